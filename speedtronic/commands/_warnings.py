"""Warnings shown as the CLI's own one-line ``speedtronic: warning: ...``, for every command."""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from speedtronic.errors import SpeedtronicWarning

__all__ = ["one_line_warnings"]


@contextlib.contextmanager
def one_line_warnings() -> Iterator[None]:
    """Show warnings as ``speedtronic: warning: ...``: a user's run has no source line to point at.
    Another package's warning says whose it is (``speedtronic: warning: from torch: Failed to
    initialize NumPy: ...``): speedtronic did not say it."""

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        text = str(message)
        source = _package_of(filename)
        if issubclass(category, SpeedtronicWarning) or source in (None, "speedtronic"):
            text = text.removeprefix("speedtronic: ").removeprefix("speedtronic ")
        else:
            text = f"from {source}: {text}"
        print(f"speedtronic: warning: {text}", file=file or sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def _package_of(filename: str) -> str | None:
    """The top-level package (or module) whose file ``filename`` is, by the ``sys.path`` entry it is
    under (``.../site-packages/torch/_tensor.py``: ``torch``); ``None`` when it is under none, or is
    no file (``<string>``, ``<frozen importlib._bootstrap>``)."""
    try:
        path = Path(filename).resolve()
        if not path.is_file():
            return None
    except (OSError, ValueError):
        return None
    entries = sorted({Path(entry or ".").resolve() for entry in sys.path}, key=lambda p: len(p.parts))
    for entry in reversed(entries):  # the deepest first: a venv's site-packages before its prefix
        if entry in path.parents:
            return path.relative_to(entry).parts[0].removesuffix(".py")
    return None
