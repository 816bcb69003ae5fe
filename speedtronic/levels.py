"""The level table: which structlog method name stands for which level, and the level arguments."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from speedtronic.events import level_for

__all__ = ["LEVELS", "LEVEL_NAMES", "LEVEL_NUMBERS", "method_for", "threshold"]

LEVEL_NAMES: Mapping[str, str] = {
    "debug": "DEBUG",
    "info": "INFO",
    "msg": "INFO",
    "warning": "WARNING",
    "warn": "WARNING",
    "error": "ERROR",
    "err": "ERROR",
    "exception": "ERROR",
    "critical": "CRITICAL",
    "fatal": "CRITICAL",
}
"""The level each structlog method name stands for: the one level table (the text line's level, the
text log's threshold, ``StructlogHook``'s method and ``emit(level=...)`` all read it)."""

LEVELS: tuple[str, ...] = tuple(dict.fromkeys(LEVEL_NAMES.values()))
"""The level names, lowest first: ``("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")``."""

LEVEL_NUMBERS: Mapping[str, int] = {method: getattr(logging, name) for method, name in LEVEL_NAMES.items()}
"""Each structlog method name's stdlib level number (``"info"`` is ``logging.INFO``)."""


def method_for(event: str, level: object = None) -> str:
    """The structlog method name of a record: ``level`` (any case of a ``LEVEL_NAMES`` method name),
    else the catalog's (``level_for``). ``ValueError`` naming the event for an unknown level."""
    if level is None:
        return level_for(event)
    method = level.lower() if isinstance(level, str) else level
    if method not in LEVEL_NAMES:
        raise ValueError(f"emit({event!r}, level={level!r}): level must be one of {', '.join(LEVEL_NAMES)}")
    return str(method)


def threshold(level: object, argument: str = "MetricLogger(level=...)") -> int:
    """A text log threshold as a stdlib level number: a level name in any case (``"info"``,
    ``"WARNING"``) or an ``int``; ``ValueError`` naming ``argument`` otherwise."""
    if isinstance(level, int) and not isinstance(level, bool):
        return level
    if isinstance(level, str) and level.upper() in LEVELS:
        return int(logging.getLevelName(level.upper()))
    raise ValueError(f"{argument} must be one of {', '.join(LEVELS)} (or an int), got {level!r}")
