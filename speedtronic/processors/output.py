"""``WriteLines``: hands a rendered line to a sink and passes the event dict on, so one chain writes
several outputs (the text log and the JSONL record) before its final stage."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from structlog.typing import EventDict, WrappedLogger

from speedtronic.levels import LEVEL_NUMBERS

__all__ = ["WriteLines"]


class WriteLines:
    """Renders the event with ``renderer`` and hands the line to ``write``; returns the event dict.

    With ``level``, only events at or above it are rendered and written (so ``level=logging.WARNING``
    costs nothing for ``info`` events). ``MetricLogger`` writes its text log and JSONL file this way.
    """

    __slots__ = ("_level", "_render", "_write")

    def __init__(
        self,
        write: Callable[[Any], object],
        renderer: Callable[[WrappedLogger, str, EventDict], Any],
        level: int = logging.NOTSET,
    ) -> None:
        self._write = write
        self._render = renderer
        self._level = level

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        if self._level and LEVEL_NUMBERS.get(method_name, logging.INFO) < self._level:
            return event_dict
        self._write(self._render(logger, method_name, event_dict))
        return event_dict
