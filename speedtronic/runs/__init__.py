"""Reading runs back: records (``reader``), typed tables (``frames``), summaries (``summary``), plots
(``plot``) and replay into hooks (``replay``). Names load on first use (PEP 562)."""

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
