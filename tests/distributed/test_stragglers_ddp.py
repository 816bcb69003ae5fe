"""Stragglers in real DDP runs: the trainer times the gradient all-reduce's wait (``sync_wait_s``)
with a communication hook, and ``summarize --rank all --health`` names the rank the others wait for
(one process without DDP writes no ``sync_wait_s``: tests/training/test_timing.py)."""

from __future__ import annotations

import io
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from speedtronic.errors import SpeedtronicWarning
from speedtronic.profiling import MetricLogger
from tests.helpers import read_jsonl
from tests.training.recording import RecordingHook

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

import torch.distributed as dist  # noqa: E402  # after the skip: torch may be missing
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from speedtronic.training.trainer import Trainer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "benchmarks" / "stragglers.py"


@pytest.fixture
def one_rank_group() -> Iterator[None]:
    """A gloo process group of one rank in this process, destroyed afterwards."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def fit(model: torch.nn.Module, steps: int = 4) -> list[dict[str, Any]]:
    """Train ``model`` on one fixed batch; the ``train_step`` payloads."""
    hook = RecordingHook()
    logger = MetricLogger(stream=io.StringIO(), hooks=[hook], background_hooks=False)
    batch = (torch.ones(4, 3), torch.zeros(4, 1))
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        [batch],
        steps=steps,
        loss_fn=torch.nn.functional.mse_loss,
        logger=logger,
        device="cpu",
        grad_accum=2,
    )
    trainer.fit()
    logger.close()
    return hook.named("train_step")


class TestOneRankDDP:
    @pytest.mark.usefixtures("one_rank_group")
    def test_a_ddp_model_records_its_sync_wait_outside_compute(self) -> None:
        """Every step of a DDP model has sync_wait_s >= 0; its step time holds data, compute and it."""
        steps = fit(DistributedDataParallel(torch.nn.Linear(3, 1)))
        assert len(steps) == 4
        for step in steps:
            assert step["sync_wait_s"] >= 0
            assert step["compute_s"] >= 0
            assert step["step_time_s"] >= step["data_wait_s"] + step["compute_s"] + step["sync_wait_s"]

    @pytest.mark.usefixtures("one_rank_group")
    def test_the_timed_all_reduce_trains_as_plain_ddp_does(self) -> None:
        """The timing hook runs PyTorch's allreduce_hook: the same weights as a model without DDP."""
        torch.manual_seed(0)
        plain = torch.nn.Linear(3, 1)
        wrapped = torch.nn.Linear(3, 1)
        wrapped.load_state_dict(plain.state_dict())
        fit(plain)
        fit(DistributedDataParallel(wrapped))
        for ours, theirs in zip(wrapped.parameters(), plain.parameters(), strict=True):
            torch.testing.assert_close(ours, theirs)

    @pytest.mark.usefixtures("one_rank_group")
    def test_a_model_with_its_own_comm_hook_trains_without_sync_wait_and_a_warning(self) -> None:
        """DDP takes one communication hook: the user's stays, the trainer says it can't time the sync."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        model = DistributedDataParallel(torch.nn.Linear(3, 1))
        model.register_comm_hook(None, allreduce_hook)
        with pytest.warns(
            SpeedtronicWarning, match="no sync_wait_s: the trainer can't time DDP's gradient sync"
        ):
            steps = fit(model)
        assert len(steps) == 4
        assert not any("sync_wait_s" in step for step in steps)


def harness_run(
    tmp_path: Path, ranks: int, steps: int, device_s: float, slow: tuple[int, str, float] | None = None
) -> Path:
    """The stragglers harness's worker (benchmarks/stragglers.py) under torchrun on gloo: the
    reference run, each forward ``device_s`` longer, ``slow`` = (rank, "data"/"compute", seconds)."""
    run_dir = tmp_path / "run"
    config = {
        "run_dir": str(run_dir),
        "train": {"steps": steps, "device": "cpu", "checkpoint_every": 0, "eval_every": 0, "warmup_steps": 2},
        "logging": {"every_steps": 1, "hooks": [], "system_interval_s": None, "validate": True},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    rank, slow_in, seconds = slow if slow is not None else (-1, "data", 0.0)
    done = subprocess.run(
        [
            sys.executable,
            *("-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", str(HARNESS)),
            *("--worker", str(path), "--device-s", str(device_s), "--slow-rank", str(rank)),
            *("--slow-in", slow_in, "--slow-s", str(seconds)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return run_dir


def test_the_rank_waiting_for_a_slow_peer_records_the_longer_sync_wait(tmp_path: Path) -> None:
    """2 ranks on gloo, rank 1 sleeping 0.3 s before each backward: rank 0's sync_wait_s holds that
    wait (rank 1's does not), and the sleep is in rank 1's compute_s, not in rank 0's."""
    run_dir = harness_run(tmp_path, ranks=2, steps=6, device_s=0.0, slow=(1, "compute", 0.3))
    ranks = [read_jsonl(run_dir / name) for name in ("metrics.jsonl", "metrics.rank1.jsonl")]
    fast, slow = ([r for r in records if r["event"] == "train_step"][1:] for records in ranks)
    assert len(fast) == len(slow) == 5

    def median(records: list[dict[str, Any]], key: str) -> float:
        return statistics.median(record[key] for record in records)

    assert median(fast, "sync_wait_s") > median(slow, "sync_wait_s") + 0.15
    assert median(slow, "compute_s") > median(fast, "compute_s") + 0.15


def summarize(run_dir: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "speedtronic", "summarize", str(run_dir), "--rank", "all", "--health", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


class TestStragglersUnderTorchrun:
    """4 ranks on gloo, each forward 0.1 s longer (an accelerator's time, so the ranks don't fight
    over this machine's cores); a slowed rank is slowed by a whole step, a margin no load can hide."""

    def test_a_balanced_run_names_no_rank(self, tmp_path: Path) -> None:
        """summarize --rank all --health: "stragglers none" when no rank is slowed."""
        run_dir = harness_run(tmp_path, ranks=4, steps=20, device_s=0.1)
        assert "stragglers     none (no rank makes the others wait)" in summarize(run_dir)

    def test_a_rank_slow_in_data_loading_is_named_with_its_cause(self, tmp_path: Path) -> None:
        """Rank 1 drawing each batch 0.1 s late: named alone (--json), the cause data loading."""
        run_dir = harness_run(tmp_path, ranks=4, steps=20, device_s=0.1, slow=(1, "data", 0.1))
        [row] = json.loads(summarize(run_dir, "--json"))
        [found] = row["health"]["stragglers"]
        assert (found["rank"], found["cause"]) == (1, "data loading")
        assert found["score"] > 0.3  # the others wait for it a large share of a step

    def test_a_rank_slow_in_compute_is_named_with_its_cause(self, tmp_path: Path) -> None:
        """Rank 3's forward 0.1 s longer: named alone in the text, the cause compute."""
        run_dir = harness_run(tmp_path, ranks=4, steps=20, device_s=0.1, slow=(3, "compute", 0.1))
        text = summarize(run_dir)
        assert "stragglers     1 rank(s) hold the others back (they wait least at the sync):" in text
        [line] = [line for line in text.splitlines() if line.startswith("  rank ")]
        assert line.startswith("  rank 3: others wait ")
        assert line.endswith(": compute")
