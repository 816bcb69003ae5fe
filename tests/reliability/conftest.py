"""Helpers for fault injection: child Python processes and strict readers of what was written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def python(code: str, *args: str, timeout: float = 120, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (speedtronic importable), capturing its output as text;
    ``timeout`` bounds a hang, not a slow start on a loaded machine under coverage."""
    return subprocess.run(
        [sys.executable, *args, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_env(),
        cwd=ROOT,
        **kwargs,
    )


def popen(code: str, **kwargs: Any) -> subprocess.Popen[str]:
    """Start ``code`` in a fresh interpreter with a pipe on its stdout."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        cwd=ROOT,
        **kwargs,
    )


def child_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONUNBUFFERED", None)  # the children's stdout buffering is part of what is tested
    return env


def strict_loads(line: str | bytes) -> dict[str, Any]:
    """One JSON object, refusing NaN/Infinity literals and duplicate keys."""

    def refuse(token: str) -> None:
        raise ValueError(f"non-standard JSON constant {token}")

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        if len(keys) != len(set(keys)):
            raise ValueError(f"duplicate keys in {keys}")
        return dict(pairs)

    value = json.loads(line, parse_constant=refuse, object_pairs_hook=unique)
    assert isinstance(value, dict)
    return value


def complete_lines(path: Path) -> tuple[list[bytes], bytes]:
    """The newline-terminated lines of a file, and the torn rest after the last newline."""
    data = path.read_bytes()
    *lines, rest = data.split(b"\n")
    return lines, rest


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSONL file, strictly parsed; the file must end with a newline."""
    lines, rest = complete_lines(path)
    assert rest == b"", f"torn tail {rest[:80]!r}"
    return [strict_loads(line) for line in lines]
