"""Fixtures of the suites that train the reference model (tests/training, tests/commands): each
suite's conftest imports them. torch is required there, and one thread is fastest for the tiny
model on shared machines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)


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
