"""Fixtures of the suites that train the reference model (tests/training, tests/commands): each
suite's conftest imports them. torch is required there, and one thread is fastest for the tiny
model on shared machines."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]


def train_cli(
    *args: str | Path,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = 180,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``speedtronic train --no-progress ARGS`` in a subprocess running this checkout's code with one
    torch thread; ``env``: variables set over this process's."""
    return subprocess.run(
        [sys.executable, "-m", "speedtronic", "train", "--no-progress", *map(str, args)],
        cwd=cwd,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        preexec_fn=preexec_fn,
    )


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "run"


@pytest.fixture
def config(run_dir: Path) -> dict[str, Any]:
    """A 20-step run of the default task, every event validated against the catalog, no default hooks."""
    return {
        "run_dir": str(run_dir),
        "train": {"steps": 20, "checkpoint_every": 10, "batch_size": 8, "device": "cpu"},
        "logging": {"every_steps": 5, "hooks": [], "validate": True},
    }
