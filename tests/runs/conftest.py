"""Runs written by a real MetricLogger for the read-back tests, and the CLI as a subprocess."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from speedtronic.profiling import MetricLogger


def write_run(path: Path, events: Iterable[tuple[str, dict[str, Any]]], **options: Any) -> None:
    """Emit ``events`` through a real MetricLogger writing the JSONL file ``path``."""
    with MetricLogger(stream=io.StringIO(), json_file=path, **options) as logger:
        for event, payload in events:
            logger.emit(event, payload)


def speedtronic(*args: str | os.PathLike[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m speedtronic ARGS`` in ``cwd``."""
    return subprocess.run(
        [sys.executable, "-m", "speedtronic", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
