"""``StructlogHook``: speedtronic's events into the application's own structlog logger, intact."""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Iterable, Mapping
from types import FrameType
from typing import Any, ClassVar

import structlog

from speedtronic.events import level_for
from speedtronic.levels import LEVEL_NAMES
from speedtronic.record import NOTE_KEY, payload_key
from speedtronic.record.safe_text import safe_str
from speedtronic.record.text import format_fields
from speedtronic.record.values import json_safe_record, to_python, unique_key

__all__ = ["StructlogHook"]


def _log_record_names() -> frozenset[str]:
    """The names ``logging.Logger.makeRecord`` refuses in ``extra``: a real record's attributes, plus
    ``message`` and ``asctime`` (computed from the interpreter at hand: 3.12 adds ``taskName``)."""
    record = logging.LogRecord("name", logging.INFO, "path", 1, "msg", (), None)
    return frozenset(vars(record)) | {"message", "asctime"}


_RESERVED_KEYS: frozenset[str] = (
    frozenset(
        {
            # The logging methods' own parameters: passed as keywords, these would raise TypeError.
            "self",
            "event",
            "method_name",
            # Keys structlog's processors add, overwrite or consume (add_log_level, TimeStamper,
            # add_logger_name, format_exc_info, StackInfoRenderer, dict_tracebacks, EventRenamer,
            # PositionalArgumentsFormatter, ProcessorFormatter, render_to_log_kwargs, capture_logs).
            "_from_structlog",
            "_record",
            "exc_info",
            "exception",
            "extra",
            "level",
            "level_number",
            "log_level",
            "logger",
            "message",
            "msg",
            "positional_args",
            "stack",
            "stack_info",
            "stacklevel",
            "timestamp",
            # CallsiteParameterAdder's keys.
            "filename",
            "func_name",
            "lineno",
            "module",
            "pathname",
            "process",
            "process_name",
            "qual_module",
            "qual_name",
            "thread",
            "thread_name",
            # speedtronic's note about the record (non-finite numbers, converted values).
            NOTE_KEY,
        }
    )
    | _log_record_names()
)


def exception_text(error: BaseException) -> str:
    """``"ZeroDivisionError: division by zero"``: the exception's type and message, as a traceback's
    last line says them."""
    try:
        return traceback.format_exception_only(type(error), error)[-1].rstrip("\n")
    except Exception:
        return f"{type(error).__qualname__}: {safe_str(error)}"


_NOT_IN_MESSAGE = frozenset({"timestamp", NOTE_KEY})
"""Keys a stdlib record's message leaves out: its own ``created`` time, and the note about values."""

_PACKAGE = os.path.dirname(os.path.dirname(__file__)) + os.sep
"""speedtronic's directory, as its modules' code names their files (the same ``sys.path`` entry)."""


_LEVEL_OFFSET = 0 if sys.version_info >= (3, 11) else 1
"""Python 3.10's ``findCaller`` counts ``stacklevel`` from ``Logger.log``'s own frame (bpo-45171,
fixed in 3.11): one more level reaches the same caller there."""


def _caller_level() -> int:
    """The ``stacklevel`` that makes a record's call site (``%(filename)s:%(lineno)d``, ``funcName``)
    the first frame outside speedtronic above the caller's: the line that called ``emit`` (or
    ``trainer.fit()``, or the framework's logging call), not the hook's."""
    frame: FrameType | None = sys._getframe(2)  # what called the function asking: stacklevel 2 for it
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    return level + _LEVEL_OFFSET if frame is not None else 1


class StructlogHook:
    """Logs each event through a structlog logger, at the record's level, its payload as key-values.

    The default logger is ``structlog.get_logger("speedtronic")``: a lazy proxy that reads the global
    configuration at each call, so the application's ``structlog.configure(...)``, its contextvars
    (``merge_contextvars``) and ``structlog.testing.capture_logs()`` all apply, whenever they are set
    up. Or pass the app's own logger (``structlog.wrap_logger(...)``, ``structlog.stdlib`` ones
    included), or a plain stdlib ``logging.Logger``: the record's message is the event and its values
    as the text log writes them (``train_step step=5 loss=0.5 elapsed_s=0.01``), so any formatter
    shows them (``basicConfig``'s ``%(message)s``, loguru's ``InterceptHandler``), and the payload is
    also its ``extra`` (``logger.log(level, message, extra=..., exc_info=...)``), for a JSON formatter.
    The message keeps NaN and infinities as the text log writes them (``loss=nan``); the ``extra``
    holds the strict-JSON values (``loss=None``) without the ``_speedtronic`` note, which a console
    formatter (structlog's ``ProcessorFormatter`` with ``ExtraAdder`` and ``ConsoleRenderer``) would
    print: the message already says what was NaN.

    **The call site is the user's.** A stdlib record's ``pathname``, ``lineno`` and ``funcName`` are
    the line that called ``emit`` (the first frame outside speedtronic: ``stacklevel``), not the
    hook's. structlog finds its own call site (``CallsiteParameterAdder``) by leaving out frames of the
    modules it is told to: ``CallsiteParameterAdder(..., additional_ignores=["speedtronic"])``.

    **The console is the app's.** The hook ``writes_console``: a ``MetricLogger`` whose text log
    goes to stdout by default (no ``stream=`` or ``file=``) leaves stdout to the app's logger, so
    each event is printed once, by the app, and only when the app's level filter keeps it.

    **The record's level is the method called**: the level ``MetricLogger.emit(..., level=...)`` was
    given, else the catalog's (``speedtronic.events.level_for``: warning for ``shape_warning``, error
    for ``delta_upload_failed``, info for most events). So ``emit("my_alert", {...}, level="error")``
    calls ``logger.error(...)`` and ``ooo_backprop`` (debug) calls ``logger.debug(...)``, and the
    app's level filter (``make_filtering_bound_logger``, a stdlib logger's level) applies as to its
    own calls. (The logger passes the level to hooks that accept ``level``; called without one, the
    hook uses the catalog's.)

    **The record's time arrives as ``timestamp``** (UTC, RFC 3339), the instant the JSONL record
    names; an app's ``TimeStamper`` replaces it with its own reading of the clock.

    **Every payload key arrives, under a documented name.** The event's name is the log call's event.
    Payload keys become unique strings (``1`` and ``"1"`` → ``"1"``, ``"1#2"``, as in the JSONL
    record), and a key in ``StructlogHook.RESERVED_KEYS`` (or in ``reserved``) is passed as
    ``payload_<key>``: ``self``, ``event`` and ``method_name`` (the logging methods' parameters);
    ``level``, ``timestamp``, ``logger``, ``exc_info``, ``exception`` and the other keys structlog's
    processors add or consume; every attribute of a stdlib ``logging.LogRecord`` (``name``, ``args``,
    ``msg``, ``levelname``, ``created``, ``module``...) plus ``message`` and ``asctime``, which stdlib
    logging refuses in ``extra`` (structlog's ``render_to_log_kwargs`` route); and ``_speedtronic``.
    When the payload has that name too, ``payload_<key>#2`` (``#3``...). So ``{"name": "resnet",
    "step": 5}`` reaches the app as ``payload_name='resnet' step=5``.

    **Exceptions keep their type and traceback.** The first payload value that is an exception is
    also passed as ``exc_info=`` (what structlog users pass), so the app's ``format_exc_info``,
    ``dict_tracebacks``, ``ConsoleRenderer`` or stdlib handler renders its type, message and traceback
    (when it was raised); under its own key every exception value is its type and message,
    ``"ZeroDivisionError: division by zero"``.

    **Strict JSON by default.** Values are converted as for the JSONL record (tensors and numpy values
    to numbers, anything JSON can't hold to its text), and a NaN or infinity becomes ``None`` with a
    note naming it under ``_speedtronic``, so the app's ``JSONRenderer`` writes strict JSON and its
    ``loss`` column stays numeric. With ``strict_json=False`` values are only converted to Python
    numbers and lists: NaN stays a float, for an app that renders for people (``ConsoleRenderer``).

    Args:
        logger: a structlog logger; default ``structlog.get_logger("speedtronic")``.
        reserved: more keys to pass as ``payload_<key>`` (ones the app's own processors use).
        strict_json: non-finite floats as ``None`` plus the note (default), or as floats.
    """

    __slots__ = ("_log", "_logger", "_reserved", "_strict_json")

    writes_console: ClassVar[bool] = True
    """The app's logger prints the events: ``MetricLogger``'s default stdout text log stays silent
    while this hook is among its hooks."""

    RESERVED_KEYS: ClassVar[frozenset[str]] = _RESERVED_KEYS
    """Payload keys passed as ``payload_<key>``, so the app's logger and processors (and stdlib
    logging's ``LogRecord``) can neither clash with them nor consume them."""

    def __init__(self, logger: Any = None, *, reserved: Iterable[str] = (), strict_json: bool = True) -> None:
        self._logger = logger if logger is not None else structlog.get_logger("speedtronic")
        self._reserved = self.RESERVED_KEYS | frozenset(reserved)
        self._strict_json = strict_json
        self._log = self._to_stdlib if isinstance(self._logger, logging.Logger) else self._to_structlog

    def on_event(self, event: str, payload: Mapping[Any, Any], *, level: str | None = None) -> None:
        """Log the event at ``level`` (default: the catalog's level for ``event``)."""
        fields: dict[str, Any] = {}
        counters: dict[str, int] = {}
        raised: BaseException | None = None
        stamp = payload.get("timestamp")
        for key, value in payload.items():
            if key == "timestamp" and isinstance(value, str):  # the record's own time: kept as such
                continue
            name = payload_key(unique_key(fields, key, counters), fields, counters, self._reserved)
            if isinstance(value, BaseException):
                raised = raised or value
                fields[name] = exception_text(value)
            else:
                fields[name] = to_python(value)
        plain = fields  # the values as the text log writes them (nan, inf), for a stdlib message
        if self._strict_json:
            fields = json_safe_record(fields)
        if isinstance(stamp, str):
            fields["timestamp"] = stamp
        self._log(level or level_for(event), event, fields, raised, plain)

    def _to_structlog(
        self,
        level: str,
        event: str,
        fields: dict[str, Any],
        raised: BaseException | None,
        plain: dict[str, Any],
    ) -> None:
        if raised is not None:
            fields["exc_info"] = raised
        getattr(self._logger, level)(event, **fields)

    def _to_stdlib(
        self,
        level: str,
        event: str,
        fields: dict[str, Any],
        raised: BaseException | None,
        plain: dict[str, Any],
    ) -> None:
        levelno = logging.getLevelName(LEVEL_NAMES.get(level, level.upper()))
        if not self._logger.isEnabledFor(levelno):
            return
        message = event + format_fields(plain, skip=_NOT_IN_MESSAGE)  # loss=nan, as the text log
        fields.pop(NOTE_KEY, None)  # the message says what was NaN: no note for a console to show
        self._logger.log(levelno, "%s", message, exc_info=raised, extra=fields, stacklevel=_caller_level())

    def __repr__(self) -> str:
        return f"<StructlogHook logger={self._logger!r}>"
