"""Each stage of speedtronic's chain as a structlog processor, usable in any structlog chain.

A processor is a callable ``(logger, method_name, event_dict) -> event_dict``: configured in
``__init__``, straight-line in ``__call__``. A stage that filters raises ``structlog.DropEvent``; the
final stage of ``MetricLogger``'s chain (``DispatchHooks``) consumes the event and raises it too.

``MetricLogger`` runs them in this order::

    CopyPayload -> AddElapsed -> AddMemory -> ConvertValues
      -> WriteText(TextRenderer) -> WriteLines(JSONLRenderer) -> DispatchHooks

(``CadenceFilter``'s rule runs before the chain, so a skipped step costs one comparison.)
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
import structlog
from structlog.typing import EventDict, WrappedLogger

from speedtronic._convert import json_safe_mapping, safe_str, to_python
from speedtronic._memory import MemoryProbe, resolve_probe
from speedtronic._sinks import LineRecord
from speedtronic._text import format_fields, format_key, quote

__all__ = [
    "EVENT_LEVELS",
    "AddElapsed",
    "AddMemory",
    "CadenceFilter",
    "ConvertValues",
    "CopyPayload",
    "DispatchHooks",
    "HandOff",
    "JSONLRenderer",
    "TextRenderer",
    "WriteLines",
    "WriteText",
    "level_for",
]

EVENT_LEVELS: Mapping[str, str] = {
    "shape_warning": "warning",
    "delta_upload_skipped": "warning",
    "delta_upload_stale": "warning",
    "delta_upload_failed": "error",
    "hook_error": "warning",
    "logging_error": "error",
}
"""Events that signal trouble and the level their text line uses; every other event is ``info``."""


def level_for(event: str) -> str:
    """The structlog method name (``"info"``, ``"warning"``, ``"error"``) for ``event``."""
    return EVENT_LEVELS.get(event, "info")


_LEVEL_NAMES = {
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
_LEVEL_NUMBERS: dict[str, int] = {
    method: logging.getLevelName(name) for method, name in _LEVEL_NAMES.items()
}


class CopyPayload:
    """Builds the event dict from a payload passed as one keyword: ``log.info(event, payload=...)``.

    The caller's mapping is copied, never mutated, and its keys may be of any type (``**kwargs`` would
    allow only strings). A payload key ``"event"`` can't overwrite the event name: it is kept as
    ``"payload_event"``.
    """

    __slots__ = ("_key",)

    def __init__(self, key: str = "payload") -> None:
        self._key = key

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        payload = event_dict.pop(self._key, None) or {}
        event = str(event_dict.pop("event", ""))
        if "event" not in payload:
            return {"event": event, **event_dict, **payload}
        fields: EventDict = {"event": event, **event_dict}  # rare: rename in place, keep the order
        for key, value in payload.items():
            fields["payload_event" if key == "event" else key] = value
        return fields


class CadenceFilter:
    """Drops ``train_step`` events whose integer ``step`` is not a multiple of ``every_steps``.

    Other events, and a ``train_step`` without an integer step, always pass. ``admits`` is the rule
    itself, so callers can apply it before building an event dict at all.
    """

    __slots__ = ("every_steps",)

    def __init__(self, every_steps: int = 1) -> None:
        if isinstance(every_steps, bool) or not isinstance(every_steps, int) or every_steps < 1:
            raise ValueError(f"every_steps must be an integer >= 1, got {every_steps!r}")
        self.every_steps = every_steps

    def admits(self, event: str, fields: Mapping[Any, Any]) -> bool:
        """Whether the event passes the cadence."""
        if event != "train_step":
            return True
        step = fields.get("step")
        return type(step) is not int or step % self.every_steps == 0

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        if not self.admits(event_dict.get("event", ""), event_dict):
            raise structlog.DropEvent
        return event_dict


class AddElapsed:
    """Adds ``elapsed_s``, seconds on a monotonic clock since this processor was created."""

    __slots__ = ("_clock", "_start")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._start = clock()

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        event_dict.setdefault("elapsed_s", round(self._clock() - self._start, 6))
        return event_dict


class AddMemory:
    """Adds ``memory_bytes`` allocated on the accelerator, when one is in use.

    The probe is chosen once, at the first event (by then the trainer has imported torch and placed
    its model): CUDA reads ``torch.cuda.memory_allocated(device)``, MPS
    ``torch.mps.current_allocated_memory()``. With no accelerator, or torch never imported, the key is
    not added: a CPU build's ``memory_allocated()`` of 0 is not a reading.
    """

    __slots__ = ("_device", "_probe")

    def __init__(self, device: Any = None) -> None:
        self._device = device
        self._probe: MemoryProbe = self._resolve
        if device is None and _cuda_initialised():
            self._probe = resolve_probe(None)  # fix the current device now, on the creating thread

    def _resolve(self) -> int | None:
        self._probe = resolve_probe(self._device)
        return self._probe()

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        if "memory_bytes" not in event_dict:
            reading = self._probe()
            if reading is not None:
                event_dict["memory_bytes"] = reading
        return event_dict


def _cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized())


_PLAIN = frozenset({str, int, float, bool, type(None)})


class ConvertValues:
    """Turns 0-d tensors and numpy scalars into Python numbers, n-d ones into lists.

    This is the only stage that touches device values, and it runs after the cadence: a skipped step
    never calls ``.item()``, so it never forces a device sync.
    """

    __slots__ = ()

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        for key, value in event_dict.items():
            if type(value) not in _PLAIN:
                event_dict[key] = to_python(value)
        return event_dict


class _SecondCache:
    """Formats ``time.time()`` once per second: ``strftime`` is the costly part of a timestamp."""

    __slots__ = ("_convert", "_fmt", "_last", "_text")

    def __init__(self, fmt: str, convert: Callable[[float], time.struct_time]) -> None:
        self._fmt, self._convert = fmt, convert
        self._last, self._text = -1, ""

    def __call__(self, now: float) -> str:
        second = int(now)
        if second != self._last:
            self._last, self._text = second, time.strftime(self._fmt, self._convert(second))
        return self._text


class TextRenderer:
    """Renders ``2026-01-01 12:00:00 | INFO | train_step step=1 loss=1.2 elapsed_s=0.01``.

    Local time; the level from the method name; then the event and every other key in order. Floats
    use ``repr``; strings are bare when safe, else quoted with escapes, so the result is always exactly
    one line (see ``speedtronic._text``).
    """

    __slots__ = ("_clock", "_seconds")

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._seconds = _SecondCache("%Y-%m-%d %H:%M:%S", time.localtime)

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> str:
        level = _LEVEL_NAMES.get(method_name) or quote(method_name.upper())
        event = format_key(event_dict.get("event", ""))
        return f"{self._seconds(self._clock())} | {level} | {event}{format_fields(event_dict)}"


_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
_LINE_SEPARATORS = ((b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"))


class JSONLRenderer:
    """Renders one strict JSON object, no trailing newline: ``"event"`` first, ``timestamp`` last.

    ``timestamp`` (UTC, RFC 3339, milliseconds) is added when absent. NaN and infinities become
    ``"NaN"``/``"Infinity"``/``"-Infinity"`` (never ``null``); values JSON can't hold become their
    ``str()``; keys become unique strings; U+2028, U+2029 and U+0085 are escaped so ``splitlines()``
    readers see one line. Returns ``str``, or ``bytes`` with ``as_bytes=True`` (for binary sinks).
    """

    __slots__ = ("_clock", "_finish", "_seconds")

    def __init__(self, *, as_bytes: bool = False, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._seconds = _SecondCache("%Y-%m-%dT%H:%M:%S", time.gmtime)
        self._finish: Callable[[bytes], Any] = _identity if as_bytes else bytes.decode

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> Any:
        record = {"event": event_dict.get("event"), **event_dict}
        if "timestamp" not in record:
            record["timestamp"] = self._timestamp()
        return self._finish(_escape_line_breaks(_dumps(record)))

    def _timestamp(self) -> str:
        now = self._clock()
        return f"{self._seconds(now)}.{int(now % 1 * 1000):03d}Z"


def _identity(data: bytes) -> bytes:
    return data


def _dumps(record: dict[Any, Any]) -> bytes:
    """orjson directly when the record is plain; ``json_safe`` first when it isn't.

    orjson writes NaN and infinities as ``null``, so output containing ``null`` is redone the careful
    way, as is any record orjson refuses (non-string keys, lone surrogates, huge ints, deep nesting).
    """
    try:
        data = orjson.dumps(record, default=safe_str, option=_ORJSON_OPTIONS)
    except (TypeError, ValueError):
        data = b"null"
    if b"null" in data:
        data = orjson.dumps(json_safe_mapping(record), default=safe_str, option=_ORJSON_OPTIONS)
    return data


def _escape_line_breaks(data: bytes) -> bytes:
    if b"\xe2\x80" in data:  # U+2000..U+203F, which holds U+2028 and U+2029
        for raw, escaped in _LINE_SEPARATORS:
            data = data.replace(raw, escaped)
    if b"\xc2\x85" in data:
        data = data.replace(b"\xc2\x85", b"\\u0085")
    return data


class WriteText:
    """Renders the text line and logs it through ``logger``, a stdlib logger, at the event's level.

    The line is rendered only when that level is enabled, so ``level="WARNING"`` costs nothing for
    ``info`` events. The record is handed to ``logger.handle`` directly (``LineRecord``): the line is
    already formatted, so the caller lookup and argument merging of ``Logger.log`` would be wasted.
    Returns the event dict for the next stage.
    """

    __slots__ = ("_logger", "_render")

    def __init__(self, logger: logging.Logger, renderer: structlog.typing.Processor | None = None):
        self._logger = logger
        self._render = renderer or TextRenderer()

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        levelno = _LEVEL_NUMBERS.get(method_name, logging.INFO)
        if self._logger.isEnabledFor(levelno):
            line = self._render(logger, method_name, event_dict)
            self._logger.handle(LineRecord(self._logger.name, levelno, str(line)))
        return event_dict


class WriteLines:
    """Renders the event with ``renderer`` and hands the result to ``write``; returns the event dict.

    ``MetricLogger`` uses it with ``JSONLRenderer(as_bytes=True)`` and its JSONL file's ``write``.
    """

    __slots__ = ("_render", "_write")

    def __init__(self, write: Callable[[Any], object], renderer: structlog.typing.Processor):
        self._write = write
        self._render = renderer

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        self._write(self._render(logger, method_name, event_dict))
        return event_dict


OnHookError = Callable[[Any, Exception, str], None]


def _reraise(hook: Any, error: Exception, event: str) -> None:
    raise error


class HandOff:
    """Final stage for background delivery: submits ``(hooks now, event dict)``, then consumes it.

    ``MetricLogger`` submits to a worker thread that calls ``DispatchHooks.deliver``. The hooks are
    taken as they are at emit time, so a hook added later never sees earlier events. With no hooks
    registered, nothing is submitted. Raises ``structlog.DropEvent``.
    """

    __slots__ = ("_hooks", "_submit")

    def __init__(
        self, hooks: Sequence[Any], submit: Callable[[tuple[tuple[Any, ...], EventDict]], object]
    ) -> None:
        self._hooks = hooks
        self._submit = submit

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        if self._hooks:
            self._submit((tuple(self._hooks), event_dict))
        raise structlog.DropEvent


class DispatchHooks:
    """Final stage: calls each hook with ``(event, payload)``, then consumes the event.

    Each hook gets its own copy of the payload, so one hook's mutation can't reach the next. A hook's
    ``Exception`` goes to ``on_error(hook, error, event)`` and the remaining hooks still run;
    ``BaseException`` (KeyboardInterrupt, SystemExit) propagates. Raises ``structlog.DropEvent``.
    """

    __slots__ = ("_hooks", "_on_error")

    def __init__(self, hooks: Sequence[Any], on_error: OnHookError = _reraise) -> None:
        self._hooks = hooks
        self._on_error = on_error

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        self.deliver(self._hooks, event_dict)
        raise structlog.DropEvent

    def deliver(self, hooks: Sequence[Any], event_dict: EventDict) -> None:
        """Call each of ``hooks`` with the event, isolating their failures."""
        event = event_dict.get("event", "")
        for hook in hooks:
            payload = dict(event_dict)
            payload.pop("event", None)
            try:
                getattr(hook, "on_event", hook)(event, payload)
            except Exception as error:
                self._on_error(hook, error, event)
