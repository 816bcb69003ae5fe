"""read_records: the record contract, the logger's own records, bounded memory, rank files by name."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import orjson
import pytest

from speedtronic import HookFailureWarning
from speedtronic.runs import RunClock, RunError, Skipped, read_records
from speedtronic.runs.replay import replay_run
from speedtronic.runs.summary import summarize_run
from speedtronic.testing import RecordingHook
from tests.runs.conftest import speedtronic, write_run


def payloads(path: Path, **options: Any) -> list[dict[str, Any]]:
    return [record.payload for record in read_records(path, **options)]


class TestContract:
    def test_strings_that_spell_non_finite_numbers_stay_strings(self, tmp_path: Path) -> None:
        """ "NaN", "Infinity" and "-Infinity" logged as strings read back as those strings."""
        path = tmp_path / "m.jsonl"
        write_run(path, [("train_step", {"step": 1, "loss": "NaN", "tag": "Infinity", "low": ["-Infinity"]})])
        [payload] = payloads(path)
        assert (payload["loss"], payload["tag"], payload["low"]) == ("NaN", "Infinity", ["-Infinity"])

    def test_non_finite_numbers_come_back_as_floats(self, tmp_path: Path) -> None:
        """NaN and infinities, at the top and nested, beside a string "NaN": floats again, the string kept."""
        path = tmp_path / "m.jsonl"
        record = {"step": 1, "loss": math.nan, "lr": math.inf, "deep": {"g": [1.0, -math.inf]}, "s": "NaN"}
        write_run(path, [("train_step", record)])
        [payload] = payloads(path)
        assert math.isnan(payload["loss"])
        assert (payload["lr"], payload["deep"], payload["s"]) == (math.inf, {"g": [1.0, -math.inf]}, "NaN")

    def test_replay_delivers_the_string(self, tmp_path: Path) -> None:
        """A replayed hook gets the string the live hook got, not a float."""
        path = tmp_path / "m.jsonl"
        live = RecordingHook()
        write_run(path, [("train_step", {"step": 1, "loss": "Infinity"})], hooks=[live])
        replayed = RecordingHook()
        replay_run(path, [replayed])
        assert replayed.payloads("train_step") == live.payloads("train_step")
        assert replayed.payloads("train_step")[0]["loss"] == "Infinity"

    def test_summarize_does_not_count_a_string_loss_as_non_finite(self, tmp_path: Path) -> None:
        """A loss logged as the string "NaN" is not a number: no non-finite loss, no loss figures."""
        path = tmp_path / "m.jsonl"
        write_run(
            path,
            [
                ("train_step", {"step": 1, "loss": "NaN"}),
                ("train_step", {"step": 2, "loss": 1.5}),
            ],
        )
        summary = summarize_run(path)
        assert (summary.non_finite_losses, summary.loss_first, summary.loss_last) == (0, 1.5, 1.5)

    def test_files_of_earlier_writers_read_as_before(self, tmp_path: Path) -> None:
        """The pointer-keyed note, the converted-keys note and note-less strings keep their meaning."""
        path = tmp_path / "old.jsonl"
        path.write_text(
            '{"event":"train_step","step":1,"loss":null,"_speedtronic":{"non_finite":{"/loss":"Infinity"}}}\n'
            '{"event":"train_step","step":2,"loss":"NaN","label":"NaN","_speedtronic":{"converted":["loss"]}}\n'
            '{"event":"train_step","step":3,"loss":"-Infinity"}\n'
        )
        first, second, third = payloads(path)
        assert first["loss"] == math.inf
        assert math.isnan(second["loss"])
        assert second["label"] == "NaN"
        assert third["loss"] == -math.inf


class TestOwnRecords:
    def test_a_user_event_named_hook_error_is_not_a_hook_failure(self, tmp_path: Path) -> None:
        """summarize counts no hook failure for it, and replay delivers it as the live hooks saw it."""
        path = tmp_path / "m.jsonl"
        live = RecordingHook()
        write_run(path, [("hook_error", {"hook": "wandb", "failures": 999})], hooks=[live])
        assert summarize_run(path).hook_failures == {}
        replayed = RecordingHook()
        result = replay_run(path, [replayed])
        assert replayed.calls == live.calls
        assert [(event, payload["failures"]) for event, payload in replayed.calls] == [("hook_error", 999)]
        assert not result.not_replayed

    def test_the_loggers_own_hook_error_counts_and_is_not_replayed(self, tmp_path: Path) -> None:
        """A hook that really failed: counted by summarize, held back by replay (hooks never saw it)."""

        def fails(event: str, payload: dict[str, Any]) -> None:
            raise RuntimeError("down")

        path = tmp_path / "m.jsonl"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", HookFailureWarning)
            write_run(path, [("train_step", {"step": 1, "loss": 1.0})], hooks=[fails])
        own = [record for record in read_records(path) if record.event == "hook_error"]
        assert own
        assert all(record.own for record in own)
        summary = summarize_run(path)
        assert sum(summary.hook_failures.values()) == 1
        result = replay_run(path, [RecordingHook()])
        assert result.not_replayed["hook_error"] == len(own)


class TestBoundedLines:
    def test_a_line_over_the_limit_is_skipped_and_counted(self, tmp_path: Path) -> None:
        """The long line is left out with its number; the lines around it are read."""
        path = tmp_path / "m.jsonl"
        long = orjson.dumps({"event": "blob", "v": "x" * 5_000}).decode()
        path.write_text(f'{{"event":"a","n":1}}\n{long}\n{{"event":"a","n":2}}\n{long}')
        skipped = Skipped()
        assert [p["n"] for p in payloads(path, skipped=skipped, max_line_bytes=1_000)] == [1, 2]
        assert skipped.lines == {(str(path), "line over 1,000 bytes"): 2}
        assert "2 line over 1,000 bytes (lines 2, 4)" in skipped.describe("r")[0]

    def test_lines_across_chunk_boundaries_are_read_whole(self, tmp_path: Path) -> None:
        """A few MB of lines of every length: each record is read back exactly as written."""
        path = tmp_path / "m.jsonl"
        written = [{"event": "e", "i": i, "pad": "p" * (i * 37 % 3_001)} for i in range(3_000)]
        path.write_bytes(b"".join(orjson.dumps(record) + b"\n" for record in written))
        assert [{"event": r.event, **r.payload} for r in read_records(path)] == written

    def test_summarize_memory_on_a_400_mb_line(self, tmp_path: Path) -> None:
        """A file holding one record and then 400 MB without a newline: summarised, peak RSS < 100 MB."""
        path = tmp_path / "m.jsonl"
        with path.open("wb") as file:
            file.write(b'{"event":"train_step","step":1,"loss":0.5}\n')
            block = b"x" * (1 << 20)
            for _ in range(400):
                file.write(block)
        probe = (
            "import resource, sys\n"
            "from speedtronic.runs.summary import summarize_run\n"
            "s = summarize_run(sys.argv[1])\n"
            # VmHWM is this process's own peak; getrusage's ru_maxrss starts from the parent's (pytest's)
            "peak = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')]\n"
            "kib = int(peak[0].split()[1]) if peak else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "print(s.records, s.skipped.total_lines, kib)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=600, check=True
        )
        records, skipped, peak_kib = map(int, done.stdout.split())
        assert (records, skipped) == (1, 1)
        assert peak_kib < 100 * 1024, f"peak RSS {peak_kib / 1024:.0f} MB"


HOSTILE_READS = {
    "summarize": "from speedtronic.runs.summary import summarize_run as read\n",
    "plot": "from speedtronic.runs.plot import plot_runs\ndef read(path): plot_runs([path], path + '.png')\n",
    "replay": (
        "from speedtronic.runs.replay import replay_run\nfrom speedtronic.testing import RecordingHook\n"
        "def read(path): replay_run(path, [RecordingHook()])\n"
    ),
    "read_frames": (
        "from speedtronic.runs import read_frames\ndef read(path): read_frames(path, library='pandas')\n"
    ),
}


@pytest.mark.parametrize("tool", list(HOSTILE_READS))
def test_memory_does_not_grow_with_a_hostile_file(tmp_path: Path, tool: str) -> None:
    """A 64 MiB line between records, then 64 MiB without a newline: each tool's peak RSS grows by less
    than 40 MiB over reading a small run (a line over MAX_LINE_BYTES is never held whole)."""
    small, hostile = tmp_path / "small.jsonl", tmp_path / "hostile.jsonl"
    step = b'{"event":"train_step","step":%d,"loss":0.5}\n'
    small.write_bytes(step % 1 + step % 2)
    with hostile.open("wb") as file:
        file.write(step % 1 + b'{"event":"blob","v":"')
        for _ in range(64):
            file.write(b"x" * (1 << 20))
        file.write(b'"}\n' + step % 2)
        for _ in range(64):
            file.write(b"y" * (1 << 20))
    probe = HOSTILE_READS[tool] + (
        "import sys\n"
        "def peak():  # VmHWM: this process's own peak RSS, in KiB\n"
        "    return int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM:')).split()[1])\n"
        "read(sys.argv[1])\n"
        "before = peak()\n"
        "read(sys.argv[2])\n"
        "print(before, peak())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(small), str(hostile)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    before, after = map(int, done.stdout.split())
    assert after - before < 40 * 1024, f"{tool}: peak RSS grew by {(after - before) / 1024:.0f} MiB"


def rank_dir(root: Path, ranks: int, *, garbage: tuple[int, ...] = ()) -> Path:
    """A run directory with metrics.jsonl (rank 0) and metrics.rank<r>.jsonl; ``garbage`` ranks' files
    hold no record at all, so opening one is an error."""
    root.mkdir()
    for rank in range(ranks):
        path = root / ("metrics.jsonl" if rank == 0 else f"metrics.rank{rank}.jsonl")
        if rank in garbage:
            path.write_text("not a record\n")
            continue
        lines = [{"event": "train_step", "step": s, "rank": rank, "elapsed_s": s} for s in (1, 2)]
        path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return root


class TestRankFiles:
    def test_choosing_a_rank_opens_only_its_file(self, tmp_path: Path) -> None:
        """rank=2 reads metrics.rank2.jsonl; the other files, one of them unreadable, are not opened."""
        run = rank_dir(tmp_path / "run", 4, garbage=(1,))
        skipped = Skipped()
        assert [(r.rank, r.payload["step"]) for r in read_records(run, skipped, rank=2)] == [(2, 1), (2, 2)]
        assert skipped.other_rank_files == {0: 1, 1: 1, 3: 1}
        assert not skipped.lines
        with pytest.raises(RunError, match=r"metrics\.rank1\.jsonl: not a speedtronic JSONL file"):
            list(read_records(run, rank="all"))

    def test_the_first_rank_by_default(self, tmp_path: Path) -> None:
        """By default: metrics.jsonl's rank, no other rank's file opened."""
        run = rank_dir(tmp_path / "run", 3, garbage=(2,))
        skipped = Skipped()
        assert {r.rank for r in read_records(run, skipped)} == {0}
        assert skipped.other_rank_files == {1: 1, 2: 1}

    def test_left_out_ranks_are_one_warning_line(self, tmp_path: Path) -> None:
        """summarize of one rank of 50: one line says 49 ranks were left out, not 49 lines."""
        run = rank_dir(tmp_path / "run", 50)
        done = speedtronic("summarize", run, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        warning_lines = [line for line in done.stderr.splitlines() if "left out" in line]
        assert len(warning_lines) == 1, done.stderr
        assert "left out 49 other rank(s) (1, 2, 3, 4, 5, ...)" in warning_lines[0]
        assert "49 file(s) not opened" in warning_lines[0]

    def test_a_file_named_for_no_rank_is_read_and_filtered(self, tmp_path: Path) -> None:
        """A JSONL whose name says no rank is opened; its other ranks' records are counted."""
        path = tmp_path / "mixed.jsonl"
        lines = [{"event": "e", "rank": rank} for rank in (0, 1, 1, 0)]
        path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
        skipped = Skipped()
        assert len(list(read_records(path, skipped, rank=0))) == 2
        assert skipped.other_ranks == {1: 2}


class TestRunClock:
    def test_total_is_the_longest_rank_over_its_segments(self, tmp_path: Path) -> None:
        """Rank 0 ran 10 s then, resumed, 5 s; rank 1 ran 12 s: the run took 15 s."""
        path = tmp_path / "m.jsonl"
        lines = [
            {"event": "train_start", "rank": 0, "elapsed_s": 0.0},
            {"event": "train_step", "rank": 0, "elapsed_s": 10.0},
            {"event": "train_step", "rank": 1, "elapsed_s": 12.0},
            {"event": "train_start", "rank": 0, "elapsed_s": 0.0},
            {"event": "train_step", "rank": 0, "elapsed_s": 5.0},
        ]
        path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
        clock = RunClock()
        times = [clock.add(record) for record in read_records(path, rank="all")]
        assert times == [0.0, 10.0, 12.0, 10.0, 15.0]
        assert clock.total == 15.0
        assert summarize_run(path, rank="all").elapsed_s == 15.0
