"""Reading runs back: the records of a run directory (``reader``), one typed table per event
(``frames``: pandas or polars, imported only when a table is built), its summary (``summary``), plots
(``plot``) and replaying it into hooks (``replay``). Nothing here imports the write path's private
helpers: a run is read through the event catalog and the public processors only.

The names below are loaded on first use (PEP 562): ``speedtronic summarize`` imports the reader and
the summary, not the dataframe code."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from speedtronic.runs.frames import UnknownEventWarning, read_frame, read_frames
    from speedtronic.runs.reader import (
        RATE_SUFFIX,
        RankChoice,
        Record,
        RunClock,
        RunError,
        Skipped,
        as_number,
        rate_keys,
        read_records,
        run_files,
    )

__all__ = [
    "RATE_SUFFIX",
    "RankChoice",
    "Record",
    "RunClock",
    "RunError",
    "Skipped",
    "UnknownEventWarning",
    "as_number",
    "rate_keys",
    "read_frame",
    "read_frames",
    "read_records",
    "run_files",
]

_FRAMES = ("UnknownEventWarning", "read_frame", "read_frames")


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'speedtronic.runs' has no attribute {name!r}")
    home = "speedtronic.runs.frames" if name in _FRAMES else "speedtronic.runs.reader"
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
