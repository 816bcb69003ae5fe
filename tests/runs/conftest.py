"""Runs written by a real MetricLogger, broken the ways real files break, and the CLI as a subprocess."""

from __future__ import annotations

import dataclasses
import io
import itertools
import math
import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from speedtronic import HookFailureWarning
from speedtronic.distributed import RankInfo
from speedtronic.profiling import MetricLogger
from speedtronic.record import rank_path

Event = tuple[str, dict[str, Any]]

EVENTS: list[Event] = [
    ("train_start", {"start_step": 0, "target_step": 6, "device": "cpu"}),
    ("train_step", {"step": 1, "loss": 2.0, "lr": 1e-3, "samples_per_s": 100.0, "grad_norm": 1.5}),
    ("train_step", {"step": 2, "loss": 1.5, "lr": 1e-3, "samples_per_s": 300.0, "grad_norm": 1.2}),
    ("shape_warning", {"step": 2, "name": "logits", "shape": [2, 3]}),
    ("train_step", {"step": 3, "loss": math.nan, "lr": 5e-4, "samples_per_s": math.inf}),
    ("checkpoint", {"step": 3, "path": "ckpt/step_3.pt"}),
    ("delta_upload_failed", {"step": 3, "error": "timeout"}),
    ("delta_upload_stale", {"step": 3, "age_s": 12.5}),
    ("train_step", {"step": 4, "loss": 0.75, "lr": 5e-4, "samples_per_s": 200.0, "grad_norm": 0.9}),
    ("checkpoint", {"step": 4, "path": "ckpt/step_4.pt"}),
    ("train_end", {"step": 4, "final_loss": 0.75}),
]
"""A short run with every kind of record the tools care about, NaN and Infinity included."""


class Recorder:
    """A hook that keeps what it receives, in order."""

    def __init__(self) -> None:
        self.calls: list[Event] = []

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self.calls.append((event, payload))


class FailsOnCheckpoint:
    """A hook that fails on every checkpoint, so the logger writes its own hook_error records."""

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        if event == "checkpoint":
            raise RuntimeError("disk full")


def log_run(path: Path, events: Iterable[Event] = EVENTS, hooks: Iterable[Any] = ()) -> list[Event]:
    """Emit ``events`` through a real MetricLogger writing ``path``; return what a live hook got."""
    recorder = Recorder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HookFailureWarning)
        with MetricLogger(stream=io.StringIO(), json_file=path, hooks=[recorder, *hooks]) as logger:
            for event, payload in events:
                logger.emit(event, payload)
    return recorder.calls


@pytest.fixture
def run_file(tmp_path: Path) -> Path:
    """A run directory's metrics.jsonl holding EVENTS, with a failing hook's hook_error records."""
    path = tmp_path / "run" / "metrics.jsonl"
    log_run(path, hooks=[FailsOnCheckpoint()])
    return path


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as file:
        file.write(text)


def same(a: Any, b: Any) -> bool:
    """Equality where NaN equals NaN, through lists and dicts."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) and type(a) is type(b)


CLI = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cli(tmp_path: Path) -> CLI:
    """Run ``python -m speedtronic ARGS`` in ``tmp_path``; returns the completed process."""

    def run(*args: str | os.PathLike[str], env: dict[str, str] | None = None) -> Any:
        return speedtronic(*args, cwd=tmp_path, env=env)

    return run


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Exit code 2, stderr one ``speedtronic: error:`` line holding every fragment, no traceback."""
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("speedtronic: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, result.stderr)
    assert "Traceback" not in result.stderr


def write_run(path: Path, events: Iterable[tuple[str, dict[str, Any]]], **options: Any) -> None:
    """Emit ``events`` through a real MetricLogger writing the JSONL file ``path``.

    A payload's ``rank`` says which process writes the record: a logger can't be told its rank by a
    payload (``rank`` is a reserved key), so each run of events of one rank is written by a logger of
    that rank, and its lines appended to ``path`` (one file may so hold several ranks' records, as a
    mislabelled file would)."""
    events = list(events)
    ranks = {payload["rank"] for _, payload in events if "rank" in payload}
    if not ranks:
        with MetricLogger(stream=io.StringIO(), json_file=path, **options) as logger:
            for event, payload in events:
                logger.emit(event, payload)
        return
    world = RankInfo(world_size=max(2, max(ranks) + 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    for rank, group in itertools.groupby(events, key=lambda item: item[1].get("rank", 0)):
        with tempfile.TemporaryDirectory() as tmp:
            json_file = Path(tmp) / "m.jsonl"
            rank_info = dataclasses.replace(world, rank=rank)
            with MetricLogger(stream=io.StringIO(), json_file=json_file, rank=rank_info, lead_rank=None,
                              **options) as logger:  # fmt: skip
                for event, payload in group:
                    logger.emit(event, {key: value for key, value in payload.items() if key != "rank"})
            with path.open("ab") as out:
                out.write(rank_path(json_file, rank).read_bytes())


def speedtronic(
    *args: str | os.PathLike[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m speedtronic ARGS`` in ``cwd`` (with ``env`` added to this process's environment)."""
    return subprocess.run(
        [sys.executable, "-m", "speedtronic", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
