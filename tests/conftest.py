"""Shared fixtures: temporary run directories and readers for what a logger wrote."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPTS = Path(sys.executable).parent
"""Where this Python's commands are (``speedtronic``, ``tensorboard``): the virtualenv's ``bin``."""
ACTIVATED_PATH = os.pathsep.join([str(SCRIPTS), os.environ.get("PATH", "")])
"""``PATH`` of a shell with the virtualenv activated: the commands speedtronic prints are bare names."""
UNACTIVATED_PATH = os.pathsep.join(
    entry for entry in os.environ.get("PATH", "").split(os.pathsep)
    if entry and Path(entry).resolve() != SCRIPTS.resolve()
)
"""``PATH`` of a shell that never activated it (as after ``make run``)."""


def pytest_configure(config: pytest.Config) -> None:
    """Give the children the Ctrl-C a terminal gives. A suite started in the background (``&`` in a
    script, some CI runners) inherits SIGINT ignored, and so would every child it starts: the tests
    that press Ctrl-C on a child would wait for it forever. A caught signal is reset to its default
    on ``exec``, and Python then turns SIGINT into ``KeyboardInterrupt``, as in a terminal."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSONL file, parsed strictly (NaN/Infinity literals are refused)."""
    def refuse(token: str) -> None:
        raise ValueError(f"non-standard JSON constant {token}")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text("utf-8").splitlines()]


def tensorboard_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag in ``log_dir`` with its (step, value) points, read by TensorBoard itself."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: [(point.step, point.value) for point in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


class Journal:
    """A hook that journals ``"<name> <event>"`` and ``"<name> close"`` into a shared list, so a test
    asserts the order of calls across hooks (pluggy's way)."""

    def __init__(self, name: str, out: list[str]) -> None:
        self.name, self.out = name, out

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self.out.append(f"{self.name} {event}")

    def close(self) -> None:
        self.out.append(f"{self.name} close")


@pytest.fixture
def jsonl_path(tmp_path: Path) -> Path:
    return tmp_path / "run" / "metrics.jsonl"
