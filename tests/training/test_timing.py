"""The timing keys the reference trainer writes: where a step's time went, read back from a real run."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from speedtronic.accelerators import peak_flops
from speedtronic.runs.health import run_health
from tests.helpers import run_records
from tests.training.test_run_dirs import train, write_config

TIMES = ("step_time_s", "data_wait_s", "compute_s")


@pytest.fixture(scope="module")
def timed_run(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """A real `speedtronic train` run, every step logged, with evaluation and checkpoints."""
    tmp_path = tmp_path_factory.mktemp("timed")
    config = write_config(
        tmp_path / "c.yaml", train={"steps": 8, "checkpoint_every": 4, "eval_every": 4, "grad_accum": 2}
    )
    done = train("--config", config, "--run-dir", "r", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return run_records(tmp_path / "r")


class TestTimingKeys:
    def test_every_step_says_where_its_time_went(self, timed_run: list[dict[str, Any]]) -> None:
        """Each train_step has step_time_s, data_wait_s and compute_s: finite and non-negative."""
        steps = [r for r in timed_run if r["event"] == "train_step"]
        assert len(steps) == 8
        for step in steps:
            for key in TIMES:
                value = step[key]
                assert isinstance(value, float), (key, step)
                assert math.isfinite(value), (key, step)
                assert value >= 0, (key, step)

    def test_a_step_holds_its_data_wait_and_compute(self, timed_run: list[dict[str, Any]]) -> None:
        """step_time_s covers data_wait_s + compute_s (the parts are timed inside the step)."""
        for step in (r for r in timed_run if r["event"] == "train_step"):
            assert step["step_time_s"] >= step["data_wait_s"] + step["compute_s"]

    def test_no_sync_wait_without_replicas(self, timed_run: list[dict[str, Any]]) -> None:
        """A single process without an outer loop waits for nobody: no sync_wait_s key."""
        assert not any("sync_wait_s" in r for r in timed_run)

    def test_checkpoints_and_evals_are_timed(self, timed_run: list[dict[str, Any]]) -> None:
        """checkpoint carries save_s and eval carries eval_s, non-negative."""
        checkpoints = [r for r in timed_run if r["event"] == "checkpoint"]
        evals = [r for r in timed_run if r["event"] == "eval"]
        assert len(checkpoints) == 2
        assert len(evals) == 2
        assert all(r["save_s"] >= 0 for r in checkpoints)
        assert all(r["eval_s"] >= 0 for r in evals)

    def test_the_start_records_flops_per_token(self, timed_run: list[dict[str, Any]]) -> None:
        """train_start has flops_per_token = 6 x parameters, and no peak on a CPU."""
        (start,) = [r for r in timed_run if r["event"] == "train_start"]
        assert start["flops_per_token"] == 6 * start["parameters"]
        assert "peak_flops" not in start

    def test_a_given_peak_is_recorded(self, tmp_path: Path) -> None:
        """train.peak_flops set in the config: train_start records it, so MFU can be computed on a CPU."""
        config = write_config(tmp_path / "c.yaml", train={"steps": 2, "peak_flops": 1.5e12})
        done = train("--config", config, "--run-dir", "r", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        (start,) = [r for r in run_records(tmp_path / "r") if r["event"] == "train_start"]
        assert start["peak_flops"] == 1.5e12


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
class TestCuda:
    def test_a_gpu_run_records_its_peaks_and_mfu(self, tmp_path: Path) -> None:
        """On a GPU the table knows, train_start records its peak and train_end the allocator's peaks;
        summarize's MFU is flops_per_token * tokens_per_s / peak_flops."""
        config = write_config(tmp_path / "c.yaml", train={"steps": 12, "device": "cuda", "precision": "bf16"})
        done = train("--config", config, "--run-dir", "r", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        rows = run_records(tmp_path / "r")
        (start,) = [r for r in rows if r["event"] == "train_start"]
        (end,) = [r for r in rows if r["event"] == "train_end"]
        expected = peak_flops(torch.cuda.get_device_name(), "bf16")
        assert start.get("peak_flops") == expected
        assert end["peak_reserved_bytes"] >= end["peak_allocated_bytes"] > 0
        assert end["alloc_retries"] >= 0
        health = run_health(tmp_path / "r")
        assert health.fragmentation_bytes == end["peak_reserved_bytes"] - end["peak_allocated_bytes"]
        if expected is not None:
            assert health.mfu == pytest.approx(start["flops_per_token"] * health.tokens_per_s / expected)
