"""``speedtronic tail`` following a ``torchrun --nproc_per_node=2`` run on gloo as it is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.distributed.test_torchrun_train import ROOT, torchrun, write_config

pytest.importorskip("torch")


def test_tail_follows_both_ranks_to_the_end(tmp_path: Path) -> None:
    """Started before the job: both ranks' files followed, windows report 2 ranks, the checkpoint and
    eval phases raise no stall alert with the default budgets, exit 0 once both ranks ended; each rank's
    train_start names its own pid and stacks file."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config = {
        "run_dir": str(run_dir),
        "train": {
            "steps": 12,
            "checkpoint_every": 4,
            "eval_every": 4,
            "eval_batches": 2,
            "batch_size": 8,
            "device": "cpu",
        },
        "logging": {"every_steps": 1, "hooks": []},
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    watcher = subprocess.Popen(
        [sys.executable, "-m", "speedtronic", "tail", str(run_dir), "--json", "--every", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    torchrun(tmp_path, "-m", "speedtronic", "train", "--config", str(write_config(tmp_path, config)))
    out, err = watcher.communicate(timeout=240)
    assert watcher.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[-1] == {"kind": "end", "ranks": [0, 1], "statuses": ["completed", "completed"]}
    assert not [line for line in lines if line["kind"] == "alert"]
    assert max(line["ranks_seen"] for line in lines if line["kind"] == "window") == 2
    starts = [
        json.loads(line)
        for name in ("metrics.jsonl", "metrics.rank1.jsonl")
        for line in (run_dir / name).read_text().splitlines()
        if '"train_start"' in line
    ]
    assert len({start["pid"] for start in starts}) == 2
    assert all((run_dir / start["stacks"]).parent == run_dir / "stacks" for start in starts)
