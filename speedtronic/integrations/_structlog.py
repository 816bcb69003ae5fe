"""``StructlogHook``: speedtronic's events into the application's own structlog logger, intact."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import structlog

from speedtronic.events import level_for
from speedtronic.processors.convert import NOTE_KEY, json_safe_record, to_python, unique_key

__all__ = ["StructlogHook"]

_RESERVED_KEYS: frozenset[str] = frozenset(
    {
        # The logging methods' own parameters: passed as keywords, these would raise TypeError.
        "self", "event", "method_name",
        # Keys structlog's processors add, overwrite or consume (add_log_level, TimeStamper,
        # add_logger_name, format_exc_info, StackInfoRenderer, dict_tracebacks, EventRenamer,
        # PositionalArgumentsFormatter, ProcessorFormatter, render_to_log_kwargs, capture_logs).
        "_from_structlog", "_record", "exc_info", "exception", "extra", "level", "level_number",
        "log_level", "logger", "message", "msg", "positional_args", "stack", "stack_info",
        "stacklevel", "timestamp",
        # CallsiteParameterAdder's keys.
        "filename", "func_name", "lineno", "module", "pathname", "process", "process_name",
        "qual_module", "qual_name", "thread", "thread_name",
        # speedtronic's note about the record (non-finite numbers, converted values).
        NOTE_KEY,
    }
)


class StructlogHook:
    """Logs each event through a structlog logger, at the event's level, its payload as key-values.

    The default logger is ``structlog.get_logger("speedtronic")``: a lazy proxy that reads the global
    configuration at each call, so the application's ``structlog.configure(...)``, its contextvars
    (``merge_contextvars``) and ``structlog.testing.capture_logs()`` all apply, whenever they are set
    up. Or pass the app's own logger (``structlog.wrap_logger(...)``, ``structlog.stdlib`` ones
    included). The level is ``speedtronic.events.level_for(event)``: warning for ``shape_warning``,
    error for ``delta_upload_failed``, info for most events.

    **Every payload key arrives, under a documented name.** The event's name is the log call's event.
    Payload keys become unique strings (``1`` and ``"1"`` → ``"1"``, ``"1#2"``, as in the JSONL
    record), and a key in ``StructlogHook.RESERVED_KEYS`` (or in ``reserved``) is passed as
    ``payload_<key>``: ``self``, ``event`` and ``method_name`` (the logging methods' parameters);
    ``level``, ``timestamp``, ``logger``, ``exc_info``, ``stack_info``, ``exception`` and the other keys
    structlog's processors add or consume; and ``_speedtronic``. When the payload has that name too,
    ``payload_<key>#2`` (``#3``...). So ``{"level": 3, "step": 5}`` reaches the app as
    ``payload_level=3 step=5``, next to the ``level`` its ``add_log_level`` adds.

    **Strict JSON by default.** Values are converted as for the JSONL record (tensors and numpy values
    to numbers, anything JSON can't hold to its text), and a NaN or infinity becomes ``None`` with a
    note naming it: ``_speedtronic={"non_finite": {"/loss": "NaN"}}`` (a JSON Pointer per value), so the
    app's ``JSONRenderer`` writes strict JSON and its ``loss`` column stays numeric. With
    ``strict_json=False`` values are only converted to Python numbers and lists: NaN stays a float,
    for an app that renders for people (``ConsoleRenderer``).

    Args:
        logger: a structlog logger; default ``structlog.get_logger("speedtronic")``.
        reserved: more keys to pass as ``payload_<key>`` (ones the app's own processors use).
        strict_json: non-finite floats as ``None`` plus the note (default), or as floats.
    """

    __slots__ = ("_logger", "_reserved", "_strict_json")

    RESERVED_KEYS: ClassVar[frozenset[str]] = _RESERVED_KEYS
    """Payload keys passed as ``payload_<key>``, so the app's logger and processors can neither clash
    with them nor consume them."""

    def __init__(self, logger: Any = None, *, reserved: Iterable[str] = (), strict_json: bool = True) -> None:
        self._logger = logger if logger is not None else structlog.get_logger("speedtronic")
        self._reserved = self.RESERVED_KEYS | frozenset(reserved)
        self._strict_json = strict_json

    def on_event(self, event: str, payload: Mapping[Any, Any]) -> None:
        fields: dict[str, Any] = {}
        for key, value in payload.items():
            name = unique_key(fields, key)
            if name in self._reserved:
                name = unique_key(fields, f"payload_{name}")
            fields[name] = to_python(value)
        if self._strict_json:
            fields = json_safe_record(fields)
        getattr(self._logger, level_for(event))(event, **fields)

    def __repr__(self) -> str:
        return f"<StructlogHook logger={self._logger!r}>"
