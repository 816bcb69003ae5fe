"""``speedtronic train`` stopped by SIGTERM (as torchrun stops a job's workers): the run ends
``interrupted`` in its JSONL, one line on stderr, exit code 143."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import read_jsonl

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]


def test_sigterm_ends_the_run_interrupted(tmp_path: Path) -> None:
    """SIGTERM while training: train_end status=interrupted, the logger closed, one line saying how to
    continue, exit 143."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "train": {"steps": 10_000_000, "checkpoint_every": 0, "device": "cpu", "batch_size": 4},
        "logging": {"every_steps": 1, "hooks": []},
    }))
    metrics = tmp_path / "run" / "metrics.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "speedtronic", "train", "--no-progress", "--config", str(config),
         "--run-dir", str(tmp_path / "run")],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not (metrics.exists() and '"event":"train_step"' in metrics.read_text()):
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "no train_step within 240 s"
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 128 + signal.SIGTERM
    (line,) = stderr.splitlines()
    assert line.startswith("speedtronic: terminated (SIGTERM) at step ")
    assert line.endswith(f"continue with: speedtronic train --run-dir {tmp_path / 'run'} --resume")
    end = read_jsonl(metrics)[-1]
    assert (end["event"], end["status"], end["error"]) == ("train_end", "interrupted", "Terminated: SIGTERM")
