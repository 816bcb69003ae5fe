"""read_frames on pyarrow's JSON reader and on the line reader: each gives what read_records reads.

Every expectation is built from ``read_records`` (the line reader, record by record), never from
read_frames' own code. Events get 300 records where the engine must be the one reading them (fewer
than 256 lines go to ``parse_record`` directly); ``TestWhichPathReads`` says which path read a file.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

from speedtronic.runs import RunError, Skipped, read_records
from speedtronic.runs.frames import FEW_LINES, ArrowEngine, EngineFallback, FileSplit, LineTable, read_frames
from speedtronic.runs.reader import RankChoice, RankFilter, run_files
from tests.runs.conftest import same, write_run

ROWS = 300
assert ROWS >= FEW_LINES, "the engine reads an event's lines only from FEW_LINES of them"


def expected(path: Path, event: str, rank: RankChoice = "first") -> dict[str, list[Any]]:
    """The event's records as read_records reads them: a list per payload key (None where a record
    lacks it) in the order keys first appear, then ``timestamp`` as aware datetimes."""
    columns: dict[str, list[Any]] = {}
    stamps: list[datetime | None] = []
    for record in read_records(path, rank=rank):
        if record.event != event:
            continue
        for key in record.payload:
            columns.setdefault(key, [None] * len(stamps))
        for key, column in columns.items():
            column.append(record.payload.get(key))
        text = record.timestamp
        stamps.append(None if text is None else datetime.fromisoformat(text.replace("Z", "+00:00")))
    return {**columns, "timestamp": stamps}


def assert_polars_reads(frame: Any, want: dict[str, list[Any]]) -> None:
    """Integers among floats are floats (the documented rule); everything else as read."""
    assert frame.columns == list(want)
    for name, values in want.items():
        if frame.schema[name] == pl.Float64:
            values = [None if value is None else float(value) for value in values]
        assert same(frame[name].to_list(), values), name


def assert_pandas_reads(frame: Any, want: dict[str, list[Any]]) -> None:
    """pandas has no null in a float column: a missing value is NaN there, pd.NA in nullable ones."""
    assert list(frame.columns) == list(want)
    for name, values in want.items():
        got = [None if value is pd.NA or value is pd.NaT else value for value in frame[name].tolist()]
        if frame[name].dtype == "float64":
            values = [math.nan if value is None else float(value) for value in values]
        if name == "timestamp":
            got = [None if value is None else value.to_pydatetime() for value in got]
        assert same(got, values), name


def assert_reads(path: Path, event: str, *, rank: RankChoice = "first") -> tuple[Any, Any]:
    """read_frames' tables of ``event`` in both libraries hold what read_records reads."""
    want = expected(path, event, rank)
    polars = read_frames(path, library="polars", rank=rank)[event]
    pandas = read_frames(path, library="pandas", rank=rank)[event]
    assert_polars_reads(polars, want)
    assert_pandas_reads(pandas, want)
    return polars, pandas


def parts(path: Path) -> dict[str, list[Any]]:
    """How the engine path reads one file: per event, its parts (pyarrow Tables, or the line reader's
    ``LineTable``); raises ``EngineFallback`` where the whole file goes to the line reader."""
    files = run_files(path)
    return FileSplit(files[0], RankFilter(files, "all", Skipped()), ArrowEngine()).parts


def steps(count: int = ROWS, **extra: Any) -> list[tuple[str, dict[str, Any]]]:
    return [("train_step", {"step": step, "loss": 1.0 / step, **extra}) for step in range(1, count + 1)]


def written(path: Path, events: Iterable[tuple[str, dict[str, Any]]]) -> Path:
    write_run(path, events)
    return path


class TestEngine:
    def test_a_mixed_run_reads_as_the_line_reader_reads_it(self, tmp_path: Path) -> None:
        """Ints, floats (NaN, inf and -inf among them), strings, booleans, a late key, gaps: every event's
        columns hold read_records' values, in both libraries."""
        events: list[tuple[str, dict[str, Any]]] = [("train_start", {"target_step": ROWS, "device": "cpu"})]
        for step in range(1, ROWS + 1):
            loss = {100: math.nan, 200: math.inf, 250: -math.inf}.get(step, 1.0 / step)
            events.append(("train_step", {"step": step, "loss": loss, "lr": 1e-3, "ok": step % 2 == 0}))
            late = {"late": 7} if step == 280 else {}
            events.append(("eval", {"step": step, "accuracy": step / 1000, **late}))
        events.append(("train_end", {"step": ROWS, "final_loss": 1.0}))
        path = written(tmp_path / "metrics.jsonl", events)
        for event in ("train_start", "train_step", "eval", "train_end"):
            assert_reads(path, event)
        polars, pandas = assert_reads(path, "train_step")
        assert dict(polars.schema) == {
            "step": pl.Int64,
            "loss": pl.Float64,
            "lr": pl.Float64,
            "ok": pl.Boolean,
            "elapsed_s": pl.Float64,
            "timestamp": pl.Datetime("us", "UTC"),
        }
        assert [str(dtype) for dtype in pandas.dtypes] == [
            "int64",
            "float64",
            "float64",
            "bool",
            "float64",
            "datetime64[us, UTC]",
        ]
        assert math.isnan(polars["loss"][99])
        assert polars["loss"][199] == math.inf
        assert polars["loss"][249] == -math.inf
        evals = read_frames(path, library="pandas")["eval"]
        assert str(evals["late"].dtype) == "Int64"

    @pytest.mark.parametrize("other", ["yesterday", "2026-01-01T13:00:00+00:00"])
    def test_times_converted_in_one_part_and_not_another(self, tmp_path: Path, other: str) -> None:
        """A file whose times are the writer's (converted as it is read) beside one whose aren't: the
        event's times are text, each as written, when one can't be read as a time; times otherwise."""
        run = tmp_path / "run"
        first = written(run / "a.jsonl", steps())
        lines = first.read_text().splitlines(keepends=True)
        (run / "b.jsonl").write_text(
            "".join(line.replace('"timestamp":"', f'"timestamp":"{other}","was":"') for line in lines)
        )
        converted = [part.schema.field("timestamp").type for part in parts(first)["train_step"]]
        assert converted == [pa.timestamp("us", "UTC")] * len(converted)  # the first file's, as read
        texts = [record.timestamp for record in read_records(run) if record.event == "train_step"]
        assert texts[-1] == other
        for library in ("polars", "pandas"):
            frame = read_frames(run, library=library)["train_step"]
            got = list(frame["timestamp"])
            if other == "yesterday":
                assert got == texts
            else:
                assert [stamp.isoformat() for stamp in got] == [
                    datetime.fromisoformat(text.replace("Z", "+00:00")).isoformat() for text in texts
                ]

    def test_types_are_each_events_own(self, tmp_path: Path) -> None:
        """A key written as an integer in one event and as a whole float in another: int64 in the
        first, float64 in the second (a reader typing the whole file makes both float)."""
        events = [("a", {"value": step}) for step in range(ROWS)] + [("b", {"value": 2.0})] * ROWS
        path = written(tmp_path / "m.jsonl", events)
        frames = read_frames(path, library="polars")
        assert frames["a"].schema["value"] == pl.Int64
        assert frames["b"].schema["value"] == pl.Float64
        assert_reads(path, "a")
        assert_reads(path, "b")

    def test_non_finite_in_an_integer_column_and_in_a_key_never_finite(self, tmp_path: Path) -> None:
        """Integers with one NaN make a float64 column; a key only ever +inf is a float64 column of inf."""
        events = [("s", {"n": math.nan if step == 5 else step, "up": math.inf}) for step in range(ROWS)]
        path = written(tmp_path / "m.jsonl", events)
        polars, _ = assert_reads(path, "s")
        assert polars.schema["n"] == pl.Float64
        assert polars.schema["up"] == pl.Float64
        assert set(polars["up"].to_list()) == {math.inf}

    def test_a_key_only_ever_null_is_a_column(self, tmp_path: Path) -> None:
        """A key logged as None in every record is an object column of None; another event without
        that key has no such column."""
        events = [("s", {"step": step, "grad_norm": None}) for step in range(ROWS)]
        path = written(tmp_path / "m.jsonl", [*events, *[("e", {"step": 1})] * ROWS])
        polars, pandas = assert_reads(path, "s")
        assert polars.schema["grad_norm"] == pl.Object
        assert pandas["grad_norm"].dtype == object
        assert "grad_norm" not in read_frames(path)["e"].columns

    def test_strings_that_spell_numbers_or_times_stay_strings(self, tmp_path: Path) -> None:
        """ "NaN" and a date the trainer logged are text; pyarrow's guess of a time type is not used."""
        events = [("s", {"verdict": "NaN", "when": "2026-01-01T12:00:00"}) for _ in range(ROWS)]
        path = written(tmp_path / "m.jsonl", events)
        polars, _ = assert_reads(path, "s")
        assert polars.schema["verdict"] == pl.String
        assert polars.schema["when"] == pl.String


class TestLineReader:
    def test_nested_non_finite_values(self, tmp_path: Path) -> None:
        """A list with NaN and inf in it: an object column, the numbers restored."""
        path = written(tmp_path / "m.jsonl", steps(losses=[1.0, math.nan, -math.inf]))
        polars, pandas = assert_reads(path, "train_step")
        assert polars.schema["losses"] == pl.Object
        assert same(pandas["losses"][0], [1.0, math.nan, -math.inf])

    def test_a_key_with_several_types_in_one_event(self, tmp_path: Path) -> None:
        """A tag that is text in some records and a number in others: an object column of both."""
        events = [("s", {"tag": "a" if step % 2 else step}) for step in range(ROWS)]
        path = written(tmp_path / "m.jsonl", events)
        polars, pandas = assert_reads(path, "s")
        assert polars.schema["tag"] == pl.Object
        assert pandas["tag"].tolist()[:3] == [0, "a", 2]

    def test_integers_beyond_64_bits(self, tmp_path: Path) -> None:
        """2**63 (pyarrow would read it as a float): an object column of Python ints."""
        path = written(tmp_path / "m.jsonl", [("s", {"big": 2**63 + step}) for step in range(ROWS)])
        polars, _ = assert_reads(path, "s")
        assert polars.schema["big"] == pl.Object
        assert polars["big"][1] == 2**63 + 1

    def test_an_older_file_without_the_note(self, tmp_path: Path) -> None:
        """An older writer's "NaN" strings and no note: floats again, as read_records has them."""
        path = tmp_path / "old.jsonl"
        loss = {step: '"NaN"' if step == 3 else repr(step / 2) for step in range(ROWS)}
        lines = [
            f'{{"event":"s","step":{step},"loss":{loss[step]},"timestamp":"2026-01-01T12:00:00Z"}}'
            for step in range(ROWS)
        ]
        path.write_text("\n".join(lines) + "\n")
        polars, _ = assert_reads(path, "s")
        assert math.isnan(polars["loss"][3])

    def test_records_between_files_of_different_types(self, tmp_path: Path) -> None:
        """rank="all": a key that is an int in one rank's file and text in another's is an object
        column; one int in one file and float in the other is float64."""
        run = tmp_path / "run"
        write_run(run / "metrics.jsonl", [("s", {"rank": 0, "v": 1, "w": 1})] * ROWS)
        write_run(run / "metrics.rank1.jsonl", [("s", {"rank": 1, "v": "x", "w": 1.5})] * ROWS)
        polars, _ = assert_reads(run, "s", rank="all")
        assert polars.schema["v"] == pl.Object
        assert polars.schema["w"] == pl.Float64


class TestLinesThatAreNotRecords:
    def test_a_torn_last_line(self, tmp_path: Path) -> None:
        """A killed writer's last line is skipped and counted with its number, as read_records does."""
        path = written(tmp_path / "m.jsonl", steps())
        with path.open("a") as file:
            file.write('{"event":"train_step","step":301,"lo')
        assert_reads(path, "train_step")
        theirs, ours = Skipped(), Skipped()
        list(read_records(path, theirs))
        read_frames(path, skipped=ours)
        torn = [f"{path}: skipped 1 torn last line (line 301)"]
        assert ours.describe("run") == theirs.describe("run") == torn

    @pytest.mark.parametrize("bad", ["garbage", "[1, 2]", '{"no": "event"}', '{"event":"train_step","x":'])
    def test_a_bad_line_in_the_middle(self, tmp_path: Path, bad: str) -> None:
        """Not JSON, not an object, no event name, or a corrupt record: counted as read_records counts it."""
        path = written(tmp_path / "m.jsonl", steps())
        lines = path.read_text().splitlines()
        path.write_text("\n".join([*lines[:100], bad, "", *lines[100:]]) + "\n")
        assert_reads(path, "train_step")
        theirs, ours = Skipped(), Skipped()
        list(read_records(path, theirs))
        read_frames(path, skipped=ours)
        assert ours.describe("run") == theirs.describe("run")
        assert ours.total_lines == 1

    def test_not_a_run(self, tmp_path: Path) -> None:
        """A JSONL file none of whose lines is a record: read_records' RunError."""
        path = tmp_path / "notes.jsonl"
        path.write_text('{"hello": "world"}\n')
        with pytest.raises(RunError, match="not a speedtronic JSONL file"):
            read_frames(path)


class TestRanks:
    @pytest.fixture
    def run(self, tmp_path: Path) -> Path:
        """Three ranks' files; rank 1's file also holds records of rank 2 (a mislabelled file)."""
        run = tmp_path / "run"
        write_run(run / "metrics.jsonl", steps(rank=0))
        write_run(run / "metrics.rank1.jsonl", [*steps(rank=1), *steps(10, rank=2)])
        write_run(run / "metrics.rank2.jsonl", steps(rank=2, extra=True))
        return run

    @pytest.mark.parametrize("rank", ["first", 0, 1, 2, "all", [0, 2], (2, 1)])
    def test_rank_choice(self, run: Path, rank: RankChoice) -> None:
        """The rows and the records and files left out are read_records'."""
        assert_reads(run, "train_step", rank=rank)
        theirs, ours = Skipped(), Skipped()
        list(read_records(run, theirs, rank=rank))
        read_frames(run, skipped=ours, rank=rank)
        assert ours.as_dict() == theirs.as_dict()

    def test_a_file_of_another_rank_first(self, tmp_path: Path) -> None:
        """A single file whose first record is rank 1: rank 1 is read, rank 0's records counted."""
        path = written(tmp_path / "m.jsonl", [*steps(5, rank=1), *steps(rank=0), *steps(rank=1)])
        polars, _ = assert_reads(path, "train_step")
        assert set(polars["rank"].to_list()) == {1}
        skipped = Skipped()
        read_frames(path, skipped=skipped)
        assert skipped.other_ranks == {0: ROWS}


class TestWhichPathReads:
    """The docstring's table of which path runs when (the speed of a writer's file depends on it)."""

    def test_a_writers_file_is_read_by_the_engine(self, tmp_path: Path) -> None:
        """Today's records, flat values: pyarrow tables, non-finite values included."""
        path = written(tmp_path / "m.jsonl", steps(grad_norm=math.nan))
        assert all(isinstance(part, pa.Table) for part in parts(path)["train_step"])

    def test_few_lines_go_to_the_line_reader(self, tmp_path: Path) -> None:
        """Fewer than FEW_LINES lines of an event: parsed by parse_record."""
        path = written(tmp_path / "m.jsonl", steps(FEW_LINES - 1))
        assert all(isinstance(part, LineTable) for part in parts(path)["train_step"])

    @pytest.mark.parametrize(
        "payload", [{"shape": [2, 3]}, {"big": 2**63}, {"loss": math.nan, "x": [math.nan]}]
    )
    def test_what_the_engine_cant_type_goes_to_the_line_reader(
        self, tmp_path: Path, payload: dict[str, Any]
    ) -> None:
        """Lists, integers beyond 64 bits, nested non-finite values: that event by the line reader."""
        path = written(tmp_path / "m.jsonl", [*steps(), *[("odd", payload)] * ROWS])
        read = parts(path)
        assert all(isinstance(part, pa.Table) for part in read["train_step"])
        assert all(isinstance(part, LineTable) for part in read["odd"])

    def test_a_corrupt_line_sends_the_file_to_the_line_reader(self, tmp_path: Path) -> None:
        """A broken record in the middle: the line reader reads the file (and counts the line)."""
        path = written(tmp_path / "m.jsonl", steps())
        lines = path.read_text().splitlines()
        path.write_text("\n".join([*lines[:10], '{"event":"train_step","x":', *lines[10:]]) + "\n")
        with pytest.raises(EngineFallback):
            parts(path)
