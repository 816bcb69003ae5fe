"""``StructlogHook``: speedtronic's events into the application's own structlog configuration."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from speedtronic.processors import level_for
from speedtronic.processors.convert import unique_key

__all__ = ["StructlogHook"]


class StructlogHook:
    """Logs each event through a structlog logger, at the event's level, payload as key-values.

    The default logger is ``structlog.get_logger("speedtronic")``: a lazy proxy that reads the global
    configuration at each call, so the application's ``structlog.configure(...)``, its contextvars
    (``merge_contextvars``) and ``structlog.testing.capture_logs()`` all apply, whenever they are set
    up. ``shape_warning`` and ``delta_upload_skipped``/``_stale`` log at warning,
    ``delta_upload_failed`` at error, every other event at info (``speedtronic.processors.level_for``).
    Keys become unique strings (``1`` and ``"1"`` → ``"1"``, ``"1#2"``, as in the JSONL record); a
    payload key ``event`` becomes ``payload_event``.
    """

    __slots__ = ("_logger",)

    def __init__(self, logger: Any = None) -> None:
        self._logger = logger if logger is not None else structlog.get_logger("speedtronic")

    def on_event(self, event: str, payload: Mapping[Any, Any]) -> None:
        fields: dict[str, Any] = {}
        for key, value in payload.items():
            fields[unique_key(fields, "payload_event" if key == "event" else key)] = value
        getattr(self._logger, level_for(event))(event, **fields)

    def __repr__(self) -> str:
        return f"<StructlogHook logger={self._logger!r}>"
