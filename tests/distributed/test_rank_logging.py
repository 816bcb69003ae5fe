"""Rank-aware logging: who writes what in a multi-process job, and aggregation across ranks."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
from pathlib import Path

from speedtronic.distributed import RankInfo, detect_rank
from speedtronic.profiling import MetricLogger
from speedtronic.record import rank_path
from tests.helpers import read_jsonl

ROOT = Path(__file__).resolve().parents[2]


class TestDetectRank:
    def test_single_process_without_launcher(self) -> None:
        assert detect_rank({}) == RankInfo(0, 1, 0, "single-process")

    def test_torchrun_environment(self) -> None:
        info = detect_rank({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"})
        assert (info.rank, info.world_size, info.local_rank, info.distributed) == (3, 8, 1, True)

    def test_slurm_environment(self) -> None:
        info = detect_rank({"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0"})
        assert (info.rank, info.world_size, info.source) == (2, 4, "env:SLURM_PROCID")

    def test_inconsistent_environment_is_ignored(self) -> None:
        """A rank outside the world, or garbage, falls back to a single process."""
        assert detect_rank({"RANK": "5", "WORLD_SIZE": "2"}).world_size == 1
        assert detect_rank({"RANK": "x", "WORLD_SIZE": "2"}).rank == 0

    def test_never_imports_torch(self) -> None:
        code = (
            "import sys; from speedtronic.distributed import detect_rank; detect_rank(); "
            "assert 'torch' not in sys.modules"
        )
        subprocess.run([sys.executable, "-c", code], check=True)


def test_rank_path() -> None:
    """Rank 0 keeps the name; others add .rank<r> before the suffix."""
    assert rank_path("runs/m.jsonl", 0) == Path("runs/m.jsonl")
    assert rank_path("runs/m.jsonl", 3) == Path("runs/m.rank3.jsonl")


class TestRankedLogger:
    def test_lead_rank_writes_text_hooks_and_ranked_records(self, jsonl_path: Path) -> None:
        seen: list[str] = []
        stream = io.StringIO()
        with MetricLogger(
            stream=stream, json_file=jsonl_path, rank=RankInfo(0, 2), hooks=[lambda e, p: seen.append(e)]
        ) as logger:
            logger.emit("train_step", {"step": 1})
        (record,) = read_jsonl(jsonl_path)
        assert (record["rank"], record["world_size"]) == (0, 2)
        assert "rank=0 world_size=2" in stream.getvalue()
        assert seen == ["train_step"]
        assert logger.is_lead

    def test_other_ranks_write_only_their_own_jsonl(self, jsonl_path: Path) -> None:
        seen: list[str] = []
        stream = io.StringIO()
        with MetricLogger(
            stream=stream, json_file=jsonl_path, rank=RankInfo(1, 2), hooks=[lambda e, p: seen.append(e)]
        ) as logger:
            logger.emit("train_step", {"step": 1})
        assert not jsonl_path.exists()
        (record,) = read_jsonl(jsonl_path.with_name("metrics.rank1.jsonl"))
        assert record["rank"] == 1
        assert stream.getvalue() == ""
        assert seen == []
        assert not logger.is_lead

    def test_every_rank_when_asked(self, jsonl_path: Path) -> None:
        stream = io.StringIO()
        with MetricLogger(stream=stream, json_file=jsonl_path, rank=RankInfo(1, 2), lead_rank=None):
            pass
        with MetricLogger(stream=stream, rank=RankInfo(1, 2), lead_rank=None) as logger:
            logger.emit("a", {})
        assert "rank=1" in stream.getvalue()

    def test_single_process_records_carry_no_rank(self, jsonl_path: Path) -> None:
        with MetricLogger(stream=io.StringIO(), json_file=jsonl_path, rank=RankInfo()) as logger:
            logger.emit("a", {})
        assert "rank" not in read_jsonl(jsonl_path)[0]


def test_aggregate_without_process_group() -> None:
    """Outside a job, aggregate returns the numbers as they are (tensors as floats)."""
    import torch

    from speedtronic.distributed import aggregate

    out = aggregate({"step": 7, "loss": torch.tensor(2.5), "n": 3, "flag": True, "name": "x"})
    assert out == {"step": 7, "loss": 2.5, "n": 3, "flag": True, "name": "x"}
    assert (type(out["step"]), type(out["n"])) == (int, int)


WORKER = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import torch.distributed as dist
    from speedtronic.distributed import aggregate
    from speedtronic.profiling import MetricLogger

    dist.init_process_group("gloo")
    rank, out = dist.get_rank(), sys.argv[1]
    hook_file = os.path.join(out, f"hook.{rank}.txt")
    def hook(event, payload):
        with open(hook_file, "a") as f:
            f.write(event + "\\n")
    with MetricLogger(json_file=os.path.join(out, "deep", "dir", "metrics.jsonl"), hooks=[hook]) as lg:
        for step in range(1, 4):
            local = {"step": step, "loss": torch.tensor(float(rank + step)), "tokens": 10 * (rank + 1)}
            averaged = aggregate(local, "mean")
            assert averaged["step"] == step and type(averaged["step"]) is int, averaged
            lg.emit("train_step", averaged)
        summed = aggregate({"tokens": 10 * (rank + 1), "step": 3}, "sum")
        assert summed == {"tokens": 30, "step": 3} and type(summed["tokens"]) is int, summed
        lg.emit("train_end", summed)
        maxed = aggregate({"loss": float(rank)}, "max")
        assert maxed == {"loss": 1.0}, maxed
    dist.destroy_process_group()
    """
)


def test_torchrun_two_ranks(tmp_path: Path) -> None:
    """torchrun x2 with gloo: per-rank JSONL with rank, one console, hooks on rank 0 only,
    and aggregate's mean/sum/max equal to the hand computation."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(script),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=170,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "deep" / "dir"
    by_rank = {0: read_jsonl(run_dir / "metrics.jsonl"), 1: read_jsonl(run_dir / "metrics.rank1.jsonl")}
    for rank, records in by_rank.items():
        assert [r["event"] for r in records] == ["train_step"] * 3 + ["train_end"]
        assert {(r["rank"], r["world_size"]) for r in records} == {(rank, 2)}
        # mean over ranks of (rank + step): ((0 + s) + (1 + s)) / 2
        assert [r["loss"] for r in records[:3]] == [1.5, 2.5, 3.5]
        assert records[3]["tokens"] == 30
    text_lines = [line for line in result.stdout.splitlines() if " | INFO | " in line]
    assert len(text_lines) == 4
    assert all("rank=0" in line for line in text_lines)
    assert (tmp_path / "hook.0.txt").read_text().split() == ["train_step"] * 3 + ["train_end"]
    assert not (tmp_path / "hook.1.txt").exists()
