"""``summarize_run`` in pieces: the parts of a file, and files, summarised apart (in worker processes
or not) and merged in order give the one-pass summary, figure for figure."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from speedtronic.runs import summary
from speedtronic.runs.reader import RankChoice, RunError
from speedtronic.runs.summary import summarize_run
from tests.runs.conftest import CLI, assert_one_line_error, write_run


def line(event: str, rank: int, **payload: Any) -> str:
    return json.dumps({"event": event, **payload, "rank": rank}) + "\n"


@pytest.fixture
def resumed_ranks(tmp_path: Path) -> Path:
    """Ranks 1 and 0 in one file, resumed twice (elapsed_s restarting at 0) and killed in a fourth
    segment, with NaN losses, a best loss reached twice, damaged lines, blank lines, evals, a checkpoint
    and trouble; rank 2's file written by a real MetricLogger."""
    run = tmp_path / "run"
    run.mkdir()
    lines = ["\n", line("setup", 1, elapsed_s=3.0), line("train_start", 1, target_step=9, elapsed_s=0.0)]
    for segment, steps in enumerate([range(1, 5), range(3, 7), range(6, 10), range(9, 11)]):
        if segment:
            lines.append(line("train_start", 0, target_step=9 + segment, elapsed_s=0.0))
        for step in steps:
            for rank in (1, 0):
                loss = "NaN" if step == 4 else max(1, 8 // step) + rank * 0.5 + segment * 0.25
                rate = 100.0 * step + 0.5 * rank
                lines.append(line("train_step", rank, step=step, loss=loss, samples_per_s=rate,
                                  elapsed_s=step * 1.5 + rank))  # fmt: skip
            if step == 5:
                lines.append('{"event": "train_st\n')
                lines.append("\n")
                lines.append(line("checkpoint", 0, step=step, path=f"ckpt/{step}.pt", elapsed_s=9.0))
            if step % 3 == 0:
                lines.append(line("eval", 0, step=step, loss=1.0 / step, split="val"))
                lines.append(line("eval", 1, step=step, loss=0.01, split="test"))
        lines.append(line("shape_warning", 1, elapsed_s=2.0))
        hook = {"event": "hook_error", "hook": "H", "failures": segment + 1, "rank": 0,
                "_speedtronic": {"origin": "speedtronic"}}  # fmt: skip
        lines.append(json.dumps(hook) + "\n")
        if segment < 3:
            lines.append(line("train_end", 0, status="failed" if segment < 2 else "completed",
                              error="boom" if segment < 2 else None, final_loss=0.5 + segment))  # fmt: skip
    lines += ["[1, 2]\n"] * 7
    (run / "metrics.jsonl").write_text("".join(lines))
    write_run(run / "metrics.rank2.jsonl", [
        ("train_start", {"target_step": 3, "rank": 2}),
        ("train_step", {"step": 1, "loss": 1.5, "samples_per_s": 64.0, "rank": 2}),
        ("train_step", {"step": 2, "loss": float("nan"), "samples_per_s": 32.0, "rank": 2}),
        ("train_step", {"step": 3, "loss": 0.25, "samples_per_s": float("inf"), "rank": 2}),
        ("train_end", {"final_loss": 0.25, "rank": 2}),
    ])  # fmt: skip
    return run


def everything(path: Path, rank: RankChoice, workers: int = 1) -> dict[str, Any]:
    result = summarize_run(path, rank=rank, workers=workers)
    return {**result.as_dict(), "described": result.skipped.describe("run")}


class TestPieces:
    @pytest.mark.parametrize("rank", ["first", "all", 0, 2])
    @pytest.mark.parametrize("piece_bytes", [1, 200])
    @pytest.mark.parametrize("workers", [1, 2])
    def test_pieces_give_the_one_pass_summary(
        self, resumed_ranks: Path, rank: RankChoice, piece_bytes: int, workers: int,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:  # fmt: skip
        """A file cut into pieces (down to a line each), summarised in workers or not, reads as one pass."""
        whole = everything(resumed_ranks, rank)
        monkeypatch.setattr(summary, "PIECE_BYTES", piece_bytes)
        assert everything(resumed_ranks, rank, workers) == whole

    def test_the_run_has_what_the_merge_must_get_right(self, resumed_ranks: Path) -> None:
        """The figures the pieces must agree on are there to agree on (segments, NaN, skipped lines)."""
        got = everything(resumed_ranks, "all")
        assert got["segments"] == 3  # rank 0's train_starts in metrics.jsonl: the most of one rank
        assert got["steps"] == {"min": 1, "max": 10, "target": 3, "recorded": 10}  # rank 2 starts last
        assert got["loss"]["non_finite"] == 5  # step 4 of two segments, two ranks; rank 2's NaN
        assert got["loss"]["first"] == 8.5  # rank 1's step 1 comes first
        assert got["hook_failures"] == {"H": 1 + 2 + 3 + 4}  # each segment's logger counts from 1
        assert (got["finished"], got["final_loss"]) == (True, 0.25)  # rank 2's train_end comes last
        assert got["elapsed_s"] == 7.0 + 10.0 + 14.5 + 16.0  # rank 1's segments: the longest rank's
        assert got["described"][0] == (
            f"{resumed_ranks / 'metrics.jsonl'}: skipped 1 not JSON (line 26); "
            "7 not a JSON object (lines 61, 62, 63, 64, 65, ...)"
        )
        rank_0 = everything(resumed_ranks, 0)
        assert (rank_0["loss"]["best"], rank_0["loss"]["best_step"]) == (1.25, 5)  # and again at step 6
        assert (rank_0["finished"], rank_0["status"]) == (False, None)  # killed in its fourth segment

    def test_a_large_file_is_read_in_pieces_by_the_workers(self, tmp_path: Path) -> None:
        """A file over PIECE_BYTES, summarised by two workers: the same figures as by this process."""
        path = tmp_path / "m.jsonl"
        step = '{"event":"train_step","step":%d,"loss":%r,"samples_per_s":256.0,"elapsed_s":%r}\n'
        with path.open("w") as file:
            for start in range(0, 60_000, 10_000):
                file.write("".join(step % (i, 1.0 / (i + 1), i * 0.5) for i in range(start, start + 10_000)))
        assert path.stat().st_size > summary.PIECE_BYTES
        alone, apart = everything(path, "first"), everything(path, "first", workers=2)
        assert apart == alone
        assert alone["steps"]["recorded"] == 60_000
        assert alone["loss"]["last"] == 1.0 / 60_000

    def test_a_worker_that_dies_is_a_run_error(
        self, resumed_ranks: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A worker process killed mid-read (the OOM killer, a signal) is a RunError naming the run."""
        monkeypatch.setattr(summary, "_summarize_piece", dies)  # the one failure a test can't provoke
        with pytest.raises(RunError, match=r"run: a worker process stopped .*--workers 1"):
            summarize_run(resumed_ranks, rank="all", workers=2)


def dies(piece: object) -> None:
    """A worker's task that ends its process at once, as SIGKILL would."""
    os._exit(9)


class TestWorkersCommand:
    def test_workers_print_what_one_process_prints(self, resumed_ranks: Path, cli: CLI) -> None:
        """--workers 2 and --workers 1: the same table and the same warnings."""
        one = cli("summarize", resumed_ranks, "--rank", "all", "--workers", "1")
        two = cli("summarize", resumed_ranks, "--rank", "all", "--workers", "2")
        assert one.returncode == two.returncode == 0, two.stderr
        assert (two.stdout, two.stderr) == (one.stdout, one.stderr)
        assert "skipped 1 not JSON (line 26)" in two.stderr

    def test_a_file_that_is_not_a_run_is_one_line_with_workers(self, resumed_ranks: Path, cli: CLI) -> None:
        """A rank file that holds no record, read by workers: the reader's one-line error, exit code 2."""
        (resumed_ranks / "metrics.rank3.jsonl").write_text("a README\nin the wrong place\n")
        result = cli("summarize", resumed_ranks, "--rank", "all", "--workers", "2")
        assert_one_line_error(result, "metrics.rank3.jsonl", "not a speedtronic JSONL file")

    @pytest.mark.parametrize("bad", ["0", "-1"])
    def test_workers_must_be_positive(self, resumed_ranks: Path, cli: CLI, bad: str) -> None:
        """--workers 0 is a one-line error naming the option."""
        assert_one_line_error(cli("summarize", resumed_ranks, f"--workers={bad}"), "--workers")
