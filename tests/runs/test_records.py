"""speedtronic.runs: the reader every tool streams through."""

from __future__ import annotations

import io
import math
import tracemalloc
from pathlib import Path

import pytest

from speedtronic.record import NOTE_VERSION
from speedtronic.runs import RunError, Skipped, rate_keys, read_records, run_files
from speedtronic.runs.summary import summarize_run
from tests.runs.conftest import EVENTS, append, log_run, same


class TestReadRecords:
    def test_payloads_are_what_live_hooks_received(self, tmp_path: Path) -> None:
        """Each record's payload equals the live hook's payload, NaN and Infinity as floats again."""
        path = tmp_path / "metrics.jsonl"
        live = log_run(path)
        records = list(read_records(path))
        assert same([(r.event, r.hook_payload) for r in records], live)
        step3 = records[4].payload
        assert math.isnan(step3["loss"])
        assert step3["samples_per_s"] == math.inf
        assert all(r.timestamp and r.timestamp.endswith("Z") for r in records)
        assert [r.line for r in records] == list(range(1, len(EVENTS) + 1))

    def test_non_finite_strings_in_lists_become_floats(self, tmp_path: Path) -> None:
        """A list written with "NaN"/"-Infinity" strings reads back as floats (the writer made them)."""
        path = tmp_path / "m.jsonl"
        path.write_text('{"event":"e","values":[1.0,"NaN","-Infinity"],"name":"Infinity x"}\n')
        (record,) = read_records(path)
        values = record.payload["values"]
        assert values[0] == 1.0
        assert math.isnan(values[1])
        assert values[2] == -math.inf
        assert record.payload["name"] == "Infinity x"

    def test_torn_tail_junk_and_non_objects_are_skipped_with_line_numbers(self, run_file: Path) -> None:
        """Bad lines are skipped and counted by reason with their line numbers; the rest is read."""
        good = len(run_file.read_text().splitlines())
        append(run_file, 'not json at all\n[1, 2]\n\n{"step": 9}\n{"event": "train_st')
        skipped = Skipped()
        records = list(read_records(run_file, skipped))
        assert len(records) == good
        assert skipped.by_reason() == {
            "not JSON": 1,
            "not a JSON object": 1,
            "no event name": 1,
            "torn last line": 1,
        }
        (described,) = skipped.describe("run")
        assert f"1 not JSON (line {good + 1})" in described
        assert f"1 torn last line (line {good + 5})" in described
        assert described.startswith(str(run_file))

    def test_todays_records_with_a_bad_event_are_skipped(self, tmp_path: Path) -> None:
        """Records with today's note (nothing non-finite) but no event, an empty one or a number for
        one are "no event name"; the good ones around them are read whole, note, rank and origin."""
        note = (
            '"_speedtronic":{"v":3,"origin":"%s","converted":[],"truncated":[],'
            '"non_finite":{"nan":[],"inf":[],"neg_inf":[]}}'
        )
        user, own = note % "user", note % "speedtronic"
        path = tmp_path / "m.jsonl"
        path.write_text(
            f'{{"event":"train_start","rank":2,{user},"timestamp":"2026-01-01T00:00:00Z"}}\n'
            f'{{"step":1,{user},"timestamp":"2026-01-01T00:00:01Z"}}\n'
            f'{{"event":"","step":2,{user}}}\n'
            f'{{"event":7,"step":3,{user}}}\n'
            f'{{"event":"hook_error","hook":"H","rank":"x",{own},"timestamp":5}}\n'
            f'{{"event":"train_start","step":4,{user}}}\n'
        )
        skipped = Skipped()
        first, hook, again = read_records(path, skipped, rank="all")
        assert skipped.by_reason() == {"no event name": 3}
        assert (first.event, first.payload, first.rank, first.own) == ("train_start", {"rank": 2}, 2, False)
        assert (first.timestamp, first.segment, first.line, first.notes["origin"]) == (
            "2026-01-01T00:00:00Z",
            0,
            1,
            "user",
        )
        assert (hook.payload, hook.rank, hook.timestamp, hook.own) == (
            {"hook": "H", "rank": "x"},
            0,
            None,
            True,
        )
        assert (again.payload, again.segment, again.line) == ({"step": 4}, 1, 6)

    def test_todays_records_number_the_segments_of_a_resumed_run(self, tmp_path: Path) -> None:
        """A run the writer logged twice into one file: each train_start begins the next segment, for
        every record after it, and summarize counts the two segments (one piece or several)."""
        path = tmp_path / "metrics.jsonl"
        log_run(path)
        log_run(path)
        records = list(read_records(path))
        half = len(EVENTS)
        assert [(r.event, r.segment, r.line) for r in records] == [
            (event, number // half, number + 1) for number, (event, _) in enumerate(EVENTS * 2)
        ]
        assert {(r.notes or {}).get("v") for r in records} == {NOTE_VERSION}  # today's writer's
        assert summarize_run(path).segments == 2

    def test_torn_line_mid_file_after_a_restart_is_junk_not_the_end(self, tmp_path: Path) -> None:
        """A killed run's torn line followed by a resumed run's records: both runs' records are read."""
        path = tmp_path / "metrics.jsonl"
        log_run(path, EVENTS[:2])
        append(path, '{"event":"train_step","st')
        log_run(path, EVENTS[:2])  # the writer starts the next record on a new line
        skipped = Skipped()
        assert [r.event for r in read_records(path, skipped)] == ["train_start", "train_step"] * 2
        assert skipped.by_reason() == {"not JSON": 1}

    def test_unknown_events_and_missing_keys_are_records(self, tmp_path: Path) -> None:
        """An event type no tool knows, or a train_step without step or loss, is still read."""
        path = tmp_path / "m.jsonl"
        path.write_text('{"event":"outer_step","x":1}\n{"event":"train_step"}\n')
        assert [r.event for r in read_records(path)] == ["outer_step", "train_step"]

    def test_bad_utf8_is_junk(self, tmp_path: Path) -> None:
        """A line of undecodable bytes is a skipped line, not a crash."""
        path = tmp_path / "m.jsonl"
        path.write_bytes(b'{"event":"a"}\n\xff\xfe{"event"\n{"event":"b"}\n')
        skipped = Skipped()
        assert [r.event for r in read_records(path, skipped)] == ["a", "b"]
        assert skipped.total_lines == 1


class TestRanks:
    @pytest.fixture
    def ranked(self, tmp_path: Path) -> Path:
        path = tmp_path / "m.jsonl"
        path.write_text(
            '{"event":"train_step","step":1,"rank":0}\n{"event":"train_step","step":1,"rank":1}\n'
            '{"event":"train_step","step":2,"rank":1}\n{"event":"train_step","step":2}\n'
        )
        return path

    def test_first_rank_by_default_others_counted(self, ranked: Path) -> None:
        """By default only the first record's rank is read; a record without rank is rank 0."""
        skipped = Skipped()
        assert [r.payload["step"] for r in read_records(ranked, skipped)] == [1, 2]
        assert skipped.other_ranks == {1: 2}
        assert "left out 2 record(s) of rank 1" in skipped.describe("r")[0]

    def test_one_rank_or_all(self, ranked: Path) -> None:
        """rank=N reads that rank only; rank="all" reads everything."""
        assert [r.rank for r in read_records(ranked, rank=1)] == [1, 1]
        assert [r.rank for r in read_records(ranked, rank="all")] == [0, 1, 1, 0]


class TestRunFiles:
    def test_directory_reads_metrics_then_rank_files_in_numeric_order(self, tmp_path: Path) -> None:
        """A run directory: metrics.jsonl first, then metrics.rank2 before metrics.rank10."""
        for name in ("metrics.rank10.jsonl", "metrics.rank2.jsonl", "metrics.jsonl", "notes.txt"):
            (tmp_path / name).write_text('{"event":"e"}\n')
        assert [p.name for p in run_files(tmp_path)] == [
            "metrics.jsonl",
            "metrics.rank2.jsonl",
            "metrics.rank10.jsonl",
        ]
        assert len(list(read_records(tmp_path, rank="all"))) == 3

    def test_missing_path_names_it(self, tmp_path: Path) -> None:
        """A missing run raises RunError "<path>: No such file or directory" before any reading."""
        with pytest.raises(RunError, match=r"nope\.jsonl: No such file or directory"):
            read_records(tmp_path / "nope.jsonl")

    def test_directory_without_jsonl(self, tmp_path: Path) -> None:
        """A directory without a JSONL file is an error naming it."""
        with pytest.raises(RunError, match=r"no \*\.jsonl file in this directory"):
            run_files(tmp_path)

    def test_path_through_a_file(self, tmp_path: Path) -> None:
        """A path whose parent is a file is an error naming it."""
        (tmp_path / "f").write_text("")
        with pytest.raises(RunError, match="Not a directory"):
            run_files(tmp_path / "f" / "metrics.jsonl")


def test_rate_keys_are_numeric_keys_ending_in_per_s() -> None:
    """Throughput rates: numeric keys ending in _per_s (bools and strings excluded)."""
    payload = {"samples_per_s": 1.0, "tokens_per_s": 2, "x_per_s": "fast", "ok_per_s": True, "lr": 1}
    assert rate_keys(payload) == ["samples_per_s", "tokens_per_s"]
    framework = {"train/device/samples_per_sec": 3.0, "tokens_per_second_per_gpu": 4.0, "per_sec": 5.0}
    assert rate_keys(framework) == ["train/device/samples_per_sec", "tokens_per_second_per_gpu"]


def test_a_large_run_is_summarised_in_constant_memory(tmp_path: Path) -> None:
    """100,000 records (~12 MB) summarise with a peak well under a tenth of the file's size."""
    path = tmp_path / "big.jsonl"
    line = (
        '{"event":"train_step","step":%d,"loss":0.5,"lr":0.001,"samples_per_s":100.0,'
        '"elapsed_s":1.0,"timestamp":"2026-01-01T00:00:00.000Z"}\n'
    )
    with path.open("w") as file:
        for step in range(100_000):
            file.write(line % step)
    tracemalloc.start()
    try:
        summary = summarize_run(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert summary.records == 100_000
    assert summary.step_max == 99_999
    assert peak < path.stat().st_size / 10, peak


def test_the_writers_note_says_which_nan_strings_were_floats(tmp_path: Path) -> None:
    """A logged string "NaN" stays a string; a NaN float logged beside it reads back as a float."""
    from speedtronic.profiling import MetricLogger

    path = tmp_path / "m.jsonl"
    with MetricLogger(stream=io.StringIO(), json_file=path) as logger:
        logger.emit("train_step", {"step": 1, "loss": math.nan, "label": "NaN"})
    (record,) = read_records(path)
    assert math.isnan(record.payload["loss"])
    assert record.payload["label"] == "NaN"
    assert record.notes is not None
    assert record.notes["non_finite"] == {"nan": ["/loss"], "inf": [], "neg_inf": []}
