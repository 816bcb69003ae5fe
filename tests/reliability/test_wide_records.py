"""Records wider than the line cap: written in parts that each fit, joined back by every reader, no
value lost (per-layer statistics of a 100-layer model are 1,000 keys and more)."""

from __future__ import annotations

import io
import math
import os
import signal
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog

from speedtronic.processors import DEFAULT_MAX_LINE_BYTES, CapLine, JSONLRenderer
from speedtronic.profiling import MetricLogger
from speedtronic.runs import Skipped, read_frame, read_records
from speedtronic.runs import summary as summary_module
from speedtronic.runs.reader import INCOMPLETE
from speedtronic.runs.replay import replay_run
from speedtronic.runs.summary import summarize_run
from tests.reliability.conftest import popen, strict_loads

CAP = DEFAULT_MAX_LINE_BYTES


def wide(step: int, keys: int) -> dict[str, Any]:
    """A train_step of ``keys`` per-layer floats (about 35 bytes of JSON each), the loss last."""
    payload: dict[str, Any] = {"step": step}
    payload.update({f"layers.{i}.attn.q_proj.grad_norm": step + i / 7 for i in range(keys)})
    payload[f"layers.{keys // 2}.attn.q_proj.grad_norm"] = math.nan if step % 3 == 0 else 0.5
    payload["lr"] = 1e-3 / (step + 1)
    payload["loss"] = 2.0 / (step + 1)
    return payload


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def assert_payload(read: dict[str, Any], emitted: dict[str, Any]) -> None:
    """Every emitted key is read back with its value (the logger adds ``elapsed_s``)."""
    missing = [key for key in emitted if key not in read]
    assert not missing, missing[:5]
    wrong = [key for key, value in emitted.items() if not same(read[key], value)]
    assert not wrong, [(key, read[key], emitted[key]) for key in wrong[:5]]


def write_run(path: Path, keys: int, steps: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A real logger's run of wide steps between a train_start and a train_end: what was emitted, and
    what its hook received."""
    emitted = [wide(step, keys) for step in range(steps)]
    hooked: list[dict[str, Any]] = []
    with MetricLogger(
        stream=io.StringIO(), json_file=path, hooks=[lambda e, p: hooked.append(dict(p))]
    ) as logger:
        logger.emit("train_start", {"start_step": 0, "target_step": steps})
        for payload in emitted:
            logger.emit("train_step", payload)
        logger.emit("train_end", {"step": steps - 1, "final_loss": emitted[-1]["loss"]})
    return emitted, [p for p in hooked if "layers.0.attn.q_proj.grad_norm" in p]


@pytest.fixture(scope="module", params=[(1_000, 300), (5_000, 12)], ids=["1000_keys", "5000_keys"])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A run of 300 steps of 1,000 keys (enough for the frames' engine: 256 rows), or 12 of 5,000."""
    keys, steps = request.param
    path = tmp_path_factory.mktemp("wide") / "metrics.jsonl"
    emitted, hooked = write_run(path, keys, steps)
    return path, emitted, hooked


class TestWrittenInParts:
    def test_every_line_fits_and_is_a_numbered_record(self, run: Any) -> None:
        """Each line is strict JSON under the cap with the event, step, timestamp and its part of n."""
        path, emitted, _ = run
        lines = [strict_loads(line) for line in path.read_bytes().splitlines()]
        assert max(map(len, path.read_bytes().splitlines())) + 1 <= CAP
        steps = [line for line in lines if line["event"] == "train_step"]
        parts = steps[0]["_speedtronic"]["parts"]
        assert parts >= 2
        assert len(steps) == parts * len(emitted)
        for index, line in enumerate(steps):
            note = line["_speedtronic"]
            assert (note["part"], note["parts"]) == (index % parts, parts)
            assert line["step"] == emitted[index // parts]["step"]
            assert line["timestamp"] == steps[index - index % parts]["timestamp"]
            assert list(line)[:2] == ["event", "step"]
            assert list(line)[-2:] == ["_speedtronic", "timestamp"]

    def test_each_field_in_exactly_one_part_and_its_note_there(self, run: Any) -> None:
        """A field other than the head is in one part only; its NaN is listed in that part's note."""
        path, emitted, _ = run
        lines = [strict_loads(line) for line in path.read_bytes().splitlines()]
        first = [line for line in lines if line["event"] == "train_step"][: lines[1]["_speedtronic"]["parts"]]
        seen: list[str] = []
        for line in first:
            seen += [key for key in line if key not in ("event", "step", "_speedtronic", "timestamp")]
            nan = line["_speedtronic"]["non_finite"]["nan"]
            assert all(pointer[1:] in line for pointer in nan)
        assert len(seen) == len(set(seen)) == len(emitted[0]) - 1 + 1  # every key but step, + elapsed_s
        key = f"layers.{(len(emitted[0]) - 3) // 2}.attn.q_proj.grad_norm"  # step, lr and loss aside
        assert [line["_speedtronic"]["non_finite"]["nan"] for line in first if key in line] == [[f"/{key}"]]

    def test_whole_records_stay_one_line_with_part_0_of_1(self, run: Any) -> None:
        """Narrow records are unchanged: one line, the note saying part 0 of 1."""
        path, _, _ = run
        first = strict_loads(path.read_bytes().splitlines()[0])
        assert first["event"] == "train_start"
        assert (first["_speedtronic"]["part"], first["_speedtronic"]["parts"]) == (0, 1)


class TestEveryReaderJoinsTheParts:
    def test_read_records(self, run: Any) -> None:
        """read_records yields one record per emitted step, every value equal, nothing skipped."""
        path, emitted, hooked = run
        skipped = Skipped()
        steps = [r for r in read_records(path, skipped) if r.event == "train_step"]
        assert not skipped
        assert len(steps) == len(emitted)
        for record, payload, live in zip(steps, emitted, hooked, strict=True):
            assert_payload(record.payload, payload)
            assert_payload(record.hook_payload, live)
            assert record.notes is not None
            assert record.notes["parts"] >= 2

    @pytest.mark.parametrize("library", ["pandas", "polars"])
    def test_read_frame(self, run: Any, library: str) -> None:
        """read_frame has one row per step, a column per key, every value equal."""
        path, emitted, _ = run
        frame = read_frame(path, "train_step", library=library)
        assert len(frame) == len(emitted)
        columns = {name: list(frame[name]) for name in emitted[0]}
        for row, payload in enumerate(emitted):
            assert_payload({key: values[row] for key, values in columns.items()}, payload)

    @pytest.mark.parametrize("workers", [1, 2])
    def test_summarize(self, run: Any, workers: int) -> None:
        """summarize counts each step once and reads the loss and lr of the last part."""
        path, emitted, _ = run
        summary = summarize_run(path, workers=workers)
        assert summary.events["train_step"] == len(emitted)
        assert summary.steps_recorded == len(emitted)
        assert summary.loss_last == emitted[-1]["loss"]
        assert summary.lrs["lr"] == emitted[-1]["lr"]
        assert not summary.skipped

    def test_summarize_in_pieces_never_cuts_between_parts(self, tmp_path: Path) -> None:
        """A file of wide records larger than a piece (4 MiB): ``summarize --workers 2`` cuts it
        where a record begins, so every step is read once and no line is skipped."""
        path = tmp_path / "metrics.jsonl"
        emitted, _ = write_run(path, 5_000, 30)
        assert path.stat().st_size > summary_module.PIECE_BYTES
        summary = summarize_run(path, workers=2)
        assert not summary.skipped
        assert summary.steps_recorded == summary.events["train_step"] == len(emitted)
        assert summary.loss_last == emitted[-1]["loss"]

    def test_replay(self, run: Any) -> None:
        """replay delivers each step once, with the payload the live hook received."""
        path, _, hooked = run
        replayed: list[dict[str, Any]] = []
        result = replay_run(path, [lambda e, p: replayed.append(p) if e == "train_step" else None])
        assert result.replayed["train_step"] == len(hooked)
        for got, live in zip(replayed, hooked, strict=True):
            assert_payload(got, live)

    def test_duckdb_recipe(self, run: Any) -> None:
        """docs/shipping.md's DuckDB query: one row per step, every value equal (NaN reads as null)."""
        duckdb = pytest.importorskip("duckdb")
        path, emitted, _ = run
        rows = duckdb.sql(DUCKDB_JOIN.format(path=path)).fetchall()
        names = [d[0] for d in duckdb.sql(DUCKDB_JOIN.format(path=path)).description]
        assert len(rows) == len(emitted)
        for row, payload in zip(rows, emitted, strict=True):
            read = dict(zip(names, row, strict=True))
            assert_payload(read, {k: None if v != v else v for k, v in payload.items()})

    def test_polars_recipe(self, run: Any) -> None:
        """docs/shipping.md's polars recipe: one row per step, every value equal (NaN reads as null)."""
        pl = pytest.importorskip("polars")
        path, emitted, _ = run
        steps = polars_join(pl, path)
        assert steps.height == len(emitted)
        for read, payload in zip(steps.iter_rows(named=True), emitted, strict=True):
            assert_payload(read, {k: None if v != v else v for k, v in payload.items()})

    def test_pandas_recipe(self, run: Any) -> None:
        """docs/shipping.md's pandas recipe: one row per step, every value equal."""
        pd = pytest.importorskip("pandas")
        path, emitted, _ = run
        steps = pandas_join(pd, path)
        assert len(steps) == len(emitted)
        for (_, read), payload in zip(steps.iterrows(), emitted, strict=True):
            assert_payload(dict(read), payload)


# The recipes of docs/shipping.md ("Records written in parts"), word for word.
DUCKDB_JOIN = """
    with lines as (
        select *, row_number() over () - _speedtronic.part as record
        from read_json_auto('{path}', sample_size=-1)
    )
    select any_value(columns(* exclude (record, _speedtronic))) from lines
    where event = 'train_step'
    group by record having count(*) = max(_speedtronic.parts) order by record
"""


def polars_join(pl: Any, path: Path) -> Any:
    lines = pl.read_ndjson(path, infer_schema_length=None).with_row_index("line")
    note = pl.col("_speedtronic")
    return (
        lines.with_columns(
            record=pl.col("line") - note.struct.field("part"), parts=note.struct.field("parts")
        )
        .group_by("record", maintain_order=True)
        .agg(
            pl.exclude("line", "record", "_speedtronic", "parts").drop_nulls().first(),
            whole=pl.len() == pl.col("parts").max(),
        )
        .filter(pl.col("whole") & (pl.col("event") == "train_step"))
    )


def pandas_join(pd: Any, path: Path) -> Any:
    lines = pd.read_json(path, lines=True, dtype=False, precise_float=True)
    note = pd.json_normalize(lines.pop("_speedtronic").tolist())
    lines["record"] = lines.index - note["part"]
    whole = (
        lines.groupby("record").transform("size") == note.groupby(lines["record"]).transform("max")["parts"]
    )
    joined = lines[whole].groupby("record", sort=False).first()
    return joined[joined["event"] == "train_step"]


class TestValuesLargerThanTheCap:
    def test_a_value_larger_than_the_cap_is_truncated_and_the_rest_kept(self, tmp_path: Path) -> None:
        """A 100 kB string beside 1,000 floats: the string is cut to a part's room, marked and listed
        under ``truncated``; every other value is kept."""
        payload = {**wide(1, 1_000), "blob": "x" * 100_000}
        path = tmp_path / "m.jsonl"
        with MetricLogger(stream=io.StringIO(), json_file=path) as logger:
            logger.emit("train_step", payload)
        assert max(map(len, path.read_bytes().splitlines())) + 1 <= CAP
        (record,) = read_records(path)
        blob = record.payload.pop("blob")
        assert blob.startswith("<truncated: str of 100,000 chars; first ")
        assert len(blob) > 25_000  # as much as a part holds
        assert record.notes is not None
        assert record.notes["truncated"] == ["blob"]
        del payload["blob"]
        assert_payload(record.payload, payload)


def cut_lines(path: Path, keep: list[int]) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[i] for i in keep))


class TestIncompleteRecords:
    @pytest.fixture
    def three(self, tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
        """Three steps of 1,000 keys (two parts each): lines 0-1, 2-3, 4-5."""
        path = tmp_path / "m.jsonl"
        emitted = [wide(step, 1_000) for step in range(3)]
        with MetricLogger(stream=io.StringIO(), json_file=path) as logger:
            for payload in emitted:
                logger.emit("train_step", payload)
        assert len(path.read_bytes().splitlines()) == 6
        return path, emitted

    @pytest.mark.parametrize(
        ("keep", "steps"),
        [([0, 1, 2, 4, 5], [0, 2]), ([0, 1, 3, 4, 5], [0, 2]), ([0, 1, 2, 3, 4], [0, 1])],
        ids=["second_part_lost", "first_part_lost", "last_part_of_the_file_lost"],
    )
    def test_a_record_missing_a_part_is_skipped_and_counted(
        self, three: tuple[Path, list[dict[str, Any]]], keep: list[int], steps: list[int]
    ) -> None:
        """A record whose parts are not all there is never read: its line is counted as ``part of an
        incomplete record``; the records around it are read whole, by every reader."""
        path, emitted = three
        cut_lines(path, keep)
        skipped = Skipped()
        records = list(read_records(path, skipped))
        assert [r.payload["step"] for r in records] == steps
        for record in records:
            assert_payload(record.payload, emitted[record.payload["step"]])
        assert skipped.by_reason() == {INCOMPLETE: 1}
        assert list(read_frame(path, "train_step")["step"]) == steps
        summary = summarize_run(path)
        assert summary.steps_recorded == len(steps)
        assert summary.skipped.by_reason() == {INCOMPLETE: 1}

    def test_a_torn_last_part_leaves_the_record_out(self, three: tuple[Path, list[dict[str, Any]]]) -> None:
        """A writer killed inside its write (the last part torn): the torn line and the parts before
        it are skipped and counted; the next writer's records read on."""
        path, _ = three
        data = path.read_bytes()
        path.write_bytes(data[: len(data) - 5_000])  # the last record's second part torn
        with MetricLogger(stream=io.StringIO(), json_file=path) as logger:
            logger.emit("train_step", wide(3, 10))
        skipped = Skipped()
        records = list(read_records(path, skipped))
        assert [r.payload["step"] for r in records] == [0, 1, 3]
        assert skipped.by_reason() == {INCOMPLETE: 1, "not JSON": 1}

    def test_sigkill_while_writing_wide_records(self, tmp_path: Path) -> None:
        """A writer of 5,000-key records killed with SIGKILL at any moment: the readers give whole
        records only (every value right), and count what the kill left as skipped lines."""
        path = tmp_path / "m.jsonl"
        child = popen(
            f"""
            import io, math, sys
            sys.path.insert(0, {str(Path(__file__).parents[2])!r})
            from tests.reliability.test_wide_records import wide
            from speedtronic.profiling import MetricLogger
            with MetricLogger(stream=io.StringIO(), json_file={str(path)!r}) as logger:
                step = 0
                while True:
                    logger.emit("train_step", wide(step, 5_000))
                    step += 1
            """
        )
        try:
            deadline = time.monotonic() + 60
            while (not path.exists() or path.stat().st_size < 3_000_000) and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.wait()
        with MetricLogger(stream=io.StringIO(), json_file=path) as logger:  # the next writer mends the tail
            logger.emit("train_end", {"step": -1})
        skipped = Skipped()
        records = [r for r in read_records(path, skipped) if r.event == "train_step"]
        assert len(records) >= 10
        assert [r.payload["step"] for r in records] == list(range(len(records)))
        for record in records:
            assert_payload(record.payload, wide(record.payload["step"], 5_000))
        assert set(skipped.by_reason()) <= {INCOMPLETE, "not JSON"}
        assert len(read_frame(path, "train_step", library="polars")) == len(records)


class TestRotation:
    def test_a_record_is_never_split_by_rotation(self, tmp_path: Path) -> None:
        """The parts of a record are written with one write(2): a file moved away between records
        (logrotate's ``create``) holds whole records, the new file the next ones."""
        path = tmp_path / "m.jsonl"
        emitted = [wide(step, 2_000) for step in range(6)]
        with MetricLogger(stream=io.StringIO(), json_file=path) as logger:
            for step, payload in enumerate(emitted):
                logger.emit("train_step", payload)
                if step % 2 == 1:
                    path.rename(tmp_path / f"m.jsonl.{step}")
        files = sorted(tmp_path.glob("m.jsonl.*"), key=lambda p: int(p.suffix[1:]))
        assert len(files) == 3
        read: list[Any] = []
        for file in files:
            skipped = Skipped()
            read += list(read_records(file, skipped))
            assert not skipped
            assert all(len(line) < CAP for line in file.read_bytes().splitlines())
        for record, payload in zip(read, emitted, strict=True):
            assert_payload(record.payload, payload)


def test_the_note_has_fixed_keys_in_every_line(tmp_path: Path) -> None:
    """Whole records and parts carry notes of one shape (schema-inferring readers type it once)."""
    path = tmp_path / "m.jsonl"
    with MetricLogger(stream=io.StringIO(), json_file=path) as logger:
        logger.emit("train_step", {"step": 1, "loss": 0.5})
        logger.emit("train_step", wide(2, 1_000))
    shapes = {tuple(orjson.loads(line)["_speedtronic"]) for line in path.read_bytes().splitlines()}
    assert shapes == {("v", "origin", "converted", "truncated", "non_finite", "part", "parts")}


class TestInAStockChain:
    def test_jsonl_renderer_writes_parts_through_a_print_logger(self, tmp_path: Path) -> None:
        """``JSONLRenderer(max_line_bytes=4096)`` as the last stage of a stock structlog chain: a wide
        event comes out as lines under 4,096 bytes that the reader joins into the event."""
        path = tmp_path / "stock.jsonl"
        payload = wide(7, 300)
        with path.open("w") as out:
            log = structlog.wrap_logger(
                structlog.PrintLogger(out),
                processors=[
                    structlog.processors.TimeStamper(fmt="iso", utc=True),
                    JSONLRenderer(max_line_bytes=4096),
                ],
            )
            log.info("train_step", **payload)
        lines = path.read_bytes().splitlines()
        assert len(lines) > 2
        assert max(map(len, lines)) + 1 <= 4096
        (record,) = read_records(path)
        assert_payload(record.payload, payload)

    def test_capline_keeps_the_first_fields_that_fit(self) -> None:
        """``CapLine`` around any renderer: a line of thousands of fields keeps the first ones, in
        order, then ``_dropped`` counting the others, within the cap."""
        event = {"event": "x", **{f"f{i}": i for i in range(5_000)}, "timestamp": "t"}
        line = CapLine(JSONLRenderer(), 4096)(None, "info", dict(event))
        assert len(line) < 4096
        record = strict_loads(line)
        kept = [key for key in record if key.startswith("f")]
        assert kept == [f"f{i}" for i in range(len(kept))]
        assert len(kept) > 200
        assert record["_dropped"] == f"<truncated: {5_000 - len(kept):,} fields did not fit in 4,096 bytes>"
        assert record["_speedtronic"]["truncated"] == ["_dropped"]
