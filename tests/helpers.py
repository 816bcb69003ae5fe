"""Helpers the tests share: reading what a logger wrote, a journaling hook, the virtualenv's PATHs.

Import them from here (``from tests.helpers import read_jsonl``); ``conftest.py`` holds fixtures only.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "ACTIVATED_PATH",
    "SCRIPTS",
    "UNACTIVATED_PATH",
    "Journal",
    "parse_jsonl",
    "read_jsonl",
    "run_records",
    "tensorboard_scalars",
]

SCRIPTS = Path(sys.executable).parent
"""Where this Python's commands are (``speedtronic``, ``tensorboard``): the virtualenv's ``bin``."""
ACTIVATED_PATH = os.pathsep.join([str(SCRIPTS), os.environ.get("PATH", "")])
"""``PATH`` of a shell with the virtualenv activated: the commands speedtronic prints are bare names."""
UNACTIVATED_PATH = os.pathsep.join(
    entry
    for entry in os.environ.get("PATH", "").split(os.pathsep)
    if entry and Path(entry).resolve() != SCRIPTS.resolve()
)
"""``PATH`` of a shell that never activated it (as after ``make run``)."""


def read_jsonl(path: str | os.PathLike[str], *, strict: bool = True) -> list[dict[str, Any]]:
    """Every line of a JSONL file, parsed strictly (NaN/Infinity literals are refused), or as Python's
    ``json`` reads them (``strict=False``: a test hook's own journal, written by ``json.dumps``)."""
    return parse_jsonl(Path(path).read_text("utf-8"), strict=strict)


def run_records(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a run directory's ``metrics.jsonl`` (``read_jsonl``)."""
    return read_jsonl(Path(run_dir) / "metrics.jsonl")


def parse_jsonl(text: str, *, strict: bool = True) -> list[dict[str, Any]]:
    """Every line of JSONL text (a child's stdout), parsed as ``read_jsonl`` parses a file's."""

    def refuse(token: str) -> None:
        raise ValueError(f"non-standard JSON constant {token}")

    if not strict:
        return [json.loads(line) for line in text.splitlines()]
    return [json.loads(line, parse_constant=refuse) for line in text.splitlines()]


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
