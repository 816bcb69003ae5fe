"""Each stage of speedtronic's chain as a structlog processor, usable in any structlog chain.

A processor is a callable ``(logger, method_name, event_dict) -> event_dict``: configured in
``__init__``, straight-line in ``__call__`` (a fast path for the common event is the one kind of
branch: this runs for every logged step). A stage that filters raises ``structlog.DropEvent``; the
final stage (``DispatchHooks`` or ``HandOff``) consumes the event and raises it too, or, in
``MetricLogger``'s own chain (``final=False``), returns it to be ignored.

``MetricLogger`` runs them in this order::

    CopyPayload -> Redact -> AddElapsed -> AddMemory -> [AddRank] -> ConvertValues
      -> WriteText(TextRenderer) -> WriteLines(JSONLRenderer), both renderers line-capped
      -> HandOff (to the hook thread, which runs DispatchHooks) or DispatchHooks

(``CadenceFilter``'s rule runs before the chain, so a skipped step costs one comparison.)
"""

from __future__ import annotations

import contextvars
import dataclasses
import fnmatch
import logging
import re
import sys
import time
import types
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson
import structlog
from structlog.typing import EventDict, WrappedLogger

from speedtronic.errors import LoggingFailureWarning
from speedtronic.hooks import resolve_targets
from speedtronic.processors.convert import (
    _PLAIN,
    MAX_DEPTH,
    Truncated,
    json_safe_record,
    safe_str,
    to_python,
    truncate,
    unique_key,
)
from speedtronic.processors.memory import MemoryProbe, no_reading, resolve_probe
from speedtronic.processors.text import fields_template, fill_numbers, format_each_utf8, format_key, quote

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_SECRET_PATTERNS",
    "EVENT_LEVELS",
    "AddElapsed",
    "AddMemory",
    "AddRank",
    "CadenceFilter",
    "CapLine",
    "ConvertValues",
    "CopyPayload",
    "DispatchHooks",
    "HandOff",
    "JSONLRenderer",
    "Redact",
    "TextRenderer",
    "WriteLines",
    "WriteText",
    "bound_call",
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


def bound_call(processor: Callable[..., Any]) -> Callable[..., Any]:
    """``processor`` in its quickest form to call: an instance's bound ``__call__``, a function as is.

    Calling an instance goes through ``slot_tp_call``, which looks ``__call__`` up on every call: on
    this project's machine 0.05 µs more per call than calling the bound method, a dozen times an event.
    """
    if isinstance(processor, types.FunctionType | types.BuiltinFunctionType | types.MethodType):
        return processor
    call: Callable[..., Any] = processor.__call__  # type: ignore[operator]  # a bound method, not a call
    return call


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
_INFO = logging.INFO
_LEVEL_NUMBERS: dict[str, int] = {
    method: logging.getLevelName(name) for method, name in _LEVEL_NAMES.items()
}


class CopyPayload:
    """Builds the event dict from a payload passed as one keyword: ``log.info(event, payload=...)``.

    The caller's mapping is copied, never mutated, and its keys may be of any type (``**kwargs`` would
    allow only strings). A payload key ``"event"`` can't overwrite the event name: it is kept as
    ``"payload_event"`` (``"payload_event#2"`` if the payload has that key too).
    """

    __slots__ = ("_key",)

    def __init__(self, key: str = "payload") -> None:
        self._key = key

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        payload = event_dict.pop(self._key, None) or {}
        event = event_dict.pop("event", "")
        if type(event) is not str:
            event = str(event)
        if "event" not in payload:
            return {"event": event, **event_dict, **payload}
        # Rare: rename in place, keeping the order, to a name no other key has ("payload_event#2"...).
        renamed = unique_key({key: None for key in payload if type(key) is str}, "payload_event")
        fields: EventDict = {"event": event, **event_dict}
        for key, value in payload.items():
            fields[renamed if key == "event" else key] = value
        return fields

DEFAULT_SECRET_PATTERNS: tuple[str, ...] = (
    "*api_key*",
    "*apikey*",
    "*api-key*",
    "*access_key*",
    "*private_key*",
    "*password*",
    "*passwd*",
    "*secret*",
    "*token",
    "*authorization*",
    "*cookie*",
    "*credential*",
)
"""Key patterns ``Redact`` hides by default (``fnmatch`` style, case-insensitive).

``*token`` matches ``token``, ``hf_token``, ``access_token`` but not ``tokens_per_s`` or
``num_tokens``, which are training metrics, not secrets.
"""

REDACTED = "[REDACTED]"
_STR = frozenset({str})
_LEAF, _MAPPING, _SEQUENCE, _FIELDS = range(4)
_kinds: dict[type, int] = {}


def _kind(value: Any) -> int:
    kind = type(value)
    known = _kinds.get(kind)
    if known is None:
        known = _kinds[kind] = _classify(kind)
    return known


def _classify(kind: type) -> int:
    if kind in _PLAIN:
        return _LEAF
    if issubclass(kind, Mapping):
        return _MAPPING
    if issubclass(kind, list | tuple):
        return _SEQUENCE
    argparse = sys.modules.get("argparse")
    if dataclasses.is_dataclass(kind) or issubclass(kind, types.SimpleNamespace) or (
        argparse is not None and issubclass(kind, argparse.Namespace)
    ):
        return _FIELDS
    return _LEAF


class Redact:
    """Replaces the value of every key matching a secret pattern with ``replacement``, at any depth.

    Keys are matched case-insensitively against ``fnmatch`` patterns (default
    ``DEFAULT_SECRET_PATTERNS``), in the payload and inside nested mappings, lists, tuples,
    dataclasses and namespaces (a logged ``args`` or config object). The caller's containers are
    never changed: a container holding a secret is copied (a dataclass or namespace becomes a dict of
    its fields), one holding none is passed on as it is. Nesting deeper than ``MAX_DEPTH`` is cut, so a
    secret can't hide below the depth this looks at. The event name is never redacted.
    """

    __slots__ = ("_cache", "_match", "_replacement", "_safe")

    def __init__(self, patterns: Iterable[str] = DEFAULT_SECRET_PATTERNS, replacement: str = REDACTED):
        patterns = list(patterns)
        if not all(isinstance(p, str) for p in patterns):
            raise TypeError(f"Redact(patterns=...) takes strings, got {patterns!r}")
        regex = "|".join(fnmatch.translate(p) for p in patterns) or "(?!)"
        self._match = re.compile(regex, re.IGNORECASE | re.DOTALL).match
        self._replacement = replacement
        self._cache: dict[str, bool] = {}
        self._safe: set[str] = {"event"}  # string keys known not to be secret (the event's name never is)

    def _secret(self, key: object) -> bool:
        if type(key) is not str:
            return self._match(safe_str(key)) is not None
        hit = self._cache.get(key)
        if hit is None:
            hit = self._match(key) is not None
            if len(self._cache) < 4096:
                self._cache[key] = hit
                if not hit:
                    self._safe.add(key)
        return hit

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        # The common event: every key a str seen before and not secret, and plain values. (Keys are
        # found in the set by equality: a str subclass equal to a safe key may look secret as text.)
        if (
            self._safe.issuperset(event_dict)
            and _STR.issuperset(map(type, event_dict))
            and _PLAIN.issuperset(map(type, event_dict.values()))
        ):
            return event_dict
        cache = self._cache
        for key, value in event_dict.items():
            hit = cache.get(key) if type(key) is str else None
            if hit is None:
                hit = self._secret(key)
            if hit:
                if key != "event":
                    event_dict[key] = self._replacement
            elif type(value) not in _PLAIN and _kind(value) != _LEAF:
                event_dict[key] = self._scrub(value, 1)
        return event_dict

    def _scrub(self, value: Any, depth: int) -> Any:
        """``value`` with its secrets replaced: the same object when it holds none."""
        kind = _kind(value)
        if kind == _LEAF:
            return value
        if depth > MAX_DEPTH:
            return Truncated(f"<truncated: nested deeper than {MAX_DEPTH} levels>")
        if kind == _FIELDS:
            fields = _fields(value)
            scrubbed = self._scrub_mapping(fields, depth)
            return value if scrubbed is fields else scrubbed
        if kind == _MAPPING:
            return self._scrub_mapping(value, depth)
        items = list(value)
        new = [self._scrub(item, depth + 1) for item in items]
        if all(a is b for a, b in zip(new, items, strict=True)):
            return value
        return new if isinstance(value, list) else tuple(new)

    def _scrub_mapping(self, value: Mapping[Any, Any], depth: int) -> Any:
        try:
            items = list(value.items())
        except Exception:
            return value
        changed = False
        out: dict[Any, Any] = {}
        for key, item in items:
            new = self._replacement if self._secret(key) else self._scrub(item, depth + 1)
            changed = changed or new is not item
            out[key] = new
        return out if changed else value


def _fields(value: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(value):
        return {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
    return dict(vars(value))


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
    """Adds ``elapsed_s``, seconds on a monotonic clock since this processor was created, to the µs."""

    __slots__ = ("_clock", "_start")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._start = clock()

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        if "elapsed_s" not in event_dict:
            # Microseconds: n / 1e6 is the float nearest n µs (short repr), at half round()'s cost.
            event_dict["elapsed_s"] = int((self._clock() - self._start) * 1e6 + 0.5) / 1e6
        return event_dict


class AddRank:
    """Adds ``rank`` and ``world_size`` (when absent), so records of a multi-process job say whose."""

    __slots__ = ("_rank", "_world_size")

    def __init__(self, rank: int, world_size: int) -> None:
        self._rank, self._world_size = rank, world_size

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        event_dict.setdefault("rank", self._rank)
        event_dict.setdefault("world_size", self._world_size)
        return event_dict


class AddMemory:
    """Adds ``memory_bytes`` allocated on the accelerator, when one is in use.

    The probe is chosen once: here when torch is already imported (an explicit ``device`` that torch
    refuses raises now, not at step 10,000), else at the first event (by then the trainer has
    imported torch and placed its model). CUDA reads ``torch.cuda.memory_allocated(device)``, MPS
    ``torch.mps.current_allocated_memory()``. With no accelerator, or torch never imported, the key is
    not added: a CPU build's ``memory_allocated()`` of 0 is not a reading. A device refused at the
    first event is warned about once (``LoggingFailureWarning``) and reports nothing.
    """

    __slots__ = ("_device", "_probe")

    def __init__(self, device: Any = None) -> None:
        self._device = device
        self._probe: MemoryProbe = self._resolve
        if (device is not None and "torch" in sys.modules) or (device is None and _cuda_initialised()):
            self._probe = resolve_probe(device)  # now, on the creating thread: its current device

    def _resolve(self) -> int | None:
        try:
            self._probe = resolve_probe(self._device)
        except Exception as error:
            self._probe = no_reading
            warnings.warn(
                f"AddMemory(device={self._device!r}): {type(error).__name__}: {error}; "
                "memory_bytes is not reported",
                LoggingFailureWarning,
                stacklevel=2,
            )
        return self._probe()

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        if self._probe is not no_reading and "memory_bytes" not in event_dict:  # no_reading: no GPU
            reading = self._probe()
            if reading is not None:
                event_dict["memory_bytes"] = reading
        return event_dict


def _cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized())




class ConvertValues:
    """Turns 0-d tensors and numpy scalars into Python numbers, n-d ones into lists.

    This is the only stage that touches device values, and it runs after the cadence: a skipped step
    never calls ``.item()``, so it never forces a device sync.
    """

    __slots__ = ()

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        if _PLAIN.issuperset(map(type, event_dict.values())):
            return event_dict
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
    as JSON writes them (shortest round-trip: ``0.0003``, ``1e-7``), or ``nan``/``inf``/``-inf``;
    strings are bare when safe, else quoted with escapes, so the result is always exactly one line
    (see ``speedtronic.processors.text``). ``str``, or UTF-8 ``bytes`` with ``as_bytes=True``; with
    ``max_line_bytes``, no longer than that once a newline is added (as ``CapLine`` does it).
    """

    __slots__ = ("_as_bytes", "_cap", "_clock", "_fits", "_lines", "_second", "_seconds")

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        *,
        as_bytes: bool = False,
        max_line_bytes: int | None = None,
    ) -> None:
        self._clock = clock
        self._seconds = _SecondCache("%Y-%m-%d %H:%M:%S", time.localtime)
        self._second = -1
        # (key sequence, event, method) -> (line template, head), for this second: the template is
        # b"time | LEVEL | event step=%s loss=%s", or b"" for keys formatted value by value.
        self._lines: dict[tuple[Any, ...], tuple[bytes, bytes]] = {}
        self._as_bytes = as_bytes
        uncapped = TextRenderer(clock, as_bytes=as_bytes) if max_line_bytes else None
        self._cap, self._fits = _line_cap(uncapped, max_line_bytes)

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> Any:
        second = int(self._clock())
        if second != self._second:
            self._second = second
            self._lines.clear()
        event = event_dict.get("event", "")
        shape = tuple(event_dict)
        known = self._lines.get((shape, event, method_name)) if type(event) is str else None
        template, head = known if known is not None else self._learn(shape, event, method_name)
        line: Any = fill_numbers(template, event_dict)  # a numbers-only event: one % of the template
        if line is None:
            line = head + format_each_utf8(event_dict)
        if not self._as_bytes:
            line = line.decode()
        if len(line) > self._fits:
            return self._cap.fit(logger, method_name, event_dict, line)  # type: ignore[union-attr]
        return line

    def _learn(self, shape: tuple[Any, ...], event: Any, method_name: str) -> tuple[bytes, bytes]:
        """The line template and head of this second for events of ``shape``, kept for the next ones
        (up to 256 kinds a second)."""
        level = _LEVEL_NAMES.get(method_name) or quote(method_name.upper())
        text = f"{self._seconds(self._second)} | {level} | {format_key(event)}"
        head = text.encode("utf-8", "backslashreplace")
        fields = fields_template(shape)
        entry = (head.replace(b"%", b"%%") + fields if fields else b"", head)
        # Only str keys: 1, 1.0 and True are one dict key, and write as three different tokens.
        if type(event) is str and len(self._lines) < 256 and _STR.issuperset(map(type, shape)):
            self._lines[shape, event, method_name] = entry
        return entry


_ORJSON_OPTIONS = (
    orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS
)
_LINE_SEPARATORS = ((b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"))


class JSONLRenderer:
    """Renders one strict JSON object, no trailing newline: ``"event"`` first, ``timestamp`` last.

    ``timestamp`` (UTC, RFC 3339, milliseconds) is added when absent. NaN and infinities become
    ``"NaN"``/``"Infinity"``/``"-Infinity"`` (never ``null``); values JSON can't hold become their
    ``str()``; keys become unique strings; U+2028, U+2029 and U+0085 are escaped so ``splitlines()``
    readers see one line. A record in which anything was converted or truncated says so in a
    ``"_speedtronic": {"converted": [keys], "truncated": [keys]}`` field, just before ``timestamp``.
    Returns ``str``, or ``bytes`` with ``as_bytes=True`` (for binary sinks); with ``max_line_bytes``,
    no longer than that once a newline is added (as ``CapLine`` does it).
    """

    __slots__ = ("_as_bytes", "_cap", "_clock", "_fits", "_millis", "_seconds", "_stamp", "_tail")

    def __init__(
        self,
        *,
        as_bytes: bool = False,
        clock: Callable[[], float] = time.time,
        max_line_bytes: int | None = None,
    ) -> None:
        self._clock = clock
        self._seconds = _SecondCache("%Y-%m-%dT%H:%M:%S", time.gmtime)
        self._millis, self._stamp, self._tail = -1, "", b""  # the timestamp, formatted once per ms
        self._as_bytes = as_bytes
        uncapped = JSONLRenderer(as_bytes=as_bytes, clock=clock) if max_line_bytes else None
        self._cap, self._fits = _line_cap(uncapped, max_line_bytes)

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> Any:
        millis = int(self._clock() * 1000)
        if millis != self._millis:
            self._timestamp(millis)
        try:
            if "timestamp" in event_dict or next(iter(event_dict), None) != "event":
                data = orjson.dumps(self._record(event_dict), option=_ORJSON_OPTIONS)
            else:  # the common event: dumped as it is, the timestamp spliced in as its last field
                data = orjson.dumps(event_dict, option=_ORJSON_OPTIONS)[:-1] + self._tail
        except (TypeError, ValueError):  # orjson refused it: json_safe_record converts it
            data = b"null"
        if data.find(b"null") >= 0:  # NaN, infinities, None, refused records: redone the careful way
            data = _careful_dumps(self._record(event_dict))
        if not data.isascii():
            data = _escape_line_breaks(data)
        line = data if self._as_bytes else data.decode()
        if len(line) > self._fits:
            return self._cap.fit(logger, method_name, event_dict, line)  # type: ignore[union-attr]
        return line

    def _record(self, event_dict: EventDict) -> dict[Any, Any]:
        """The record as written: ``"event"`` first, ``timestamp`` last (the current one if absent)."""
        record = {"event": event_dict.get("event"), **event_dict}
        record.setdefault("timestamp", self._stamp)
        return record

    def _timestamp(self, millis: int) -> None:
        second, fraction = divmod(millis, 1000)
        self._millis, self._stamp = millis, f"{self._seconds(second)}.{fraction:03d}Z"
        self._tail = b',"timestamp":"' + self._stamp.encode() + b'"}'


def _careful_dumps(record: dict[Any, Any]) -> bytes:
    """The record through ``json_safe_record``: every conversion is noted in the record.

    orjson writes NaN and infinities as ``null``, refuses non-string keys, lone surrogates, huge ints
    and deep nesting, and would convert types it doesn't write natively (and the
    ``Converted``/``Truncated`` marker strings) without saying so.
    """
    return orjson.dumps(json_safe_record(record), default=safe_str, option=_ORJSON_OPTIONS)


def _escape_line_breaks(data: bytes) -> bytes:
    if b"\xe2\x80" in data:  # U+2000..U+203F, which holds U+2028 and U+2029
        for raw, escaped in _LINE_SEPARATORS:
            data = data.replace(raw, escaped)
    if b"\xc2\x85" in data:
        data = data.replace(b"\xc2\x85", b"\\u0085")
    return data


DEFAULT_MAX_LINE_BYTES = 32_000
"""Longest line written, newline included: below Fluent Bit's default 32 KiB line buffer (it stops
tailing a file on a longer line) and far below Vector's 100 KiB."""

_MIN_LINE_BYTES = 1024
_MAX_SHRUNK = 16  # values truncated one by one before falling back to the record's outline
_OUTLINE_KEEP = 32  # short scalar fields kept in an outline


class CapLine:
    """Wraps a renderer so no line exceeds ``max_bytes`` (newline included), keeping it valid.

    A line that fits costs one length check. A longer one is rendered again with its largest values,
    one at a time, replaced by ``truncate`` markers (``<truncated: str of 3,000,000 chars; first 900
    chars: ...>``) until it fits, so the record keeps its other fields and stays strict JSON. If that
    is not enough (thousands of fields, a huge key) the line becomes the record's outline: the event,
    up to 32 short numeric fields and ``"_dropped": "<truncated: N fields ...>"``.
    """

    __slots__ = ("_limit", "_render")

    def __init__(self, renderer: structlog.typing.Processor, max_bytes: int = DEFAULT_MAX_LINE_BYTES):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < _MIN_LINE_BYTES:
            raise ValueError(f"max_line_bytes must be an int >= {_MIN_LINE_BYTES}, got {max_bytes!r}")
        self._render = bound_call(renderer)
        self._limit = max_bytes - 1  # the sink adds the newline

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> Any:
        line = self._render(logger, method_name, event_dict)
        if len(line) * 4 <= self._limit:  # fits for sure: UTF-8 takes at most 4 bytes a character
            return line
        return self.fit(logger, method_name, event_dict, line)

    def fit(self, logger: WrappedLogger, method_name: str, event_dict: EventDict, line: Any) -> Any:
        """``line``, rendered from ``event_dict``, made to fit (the same line when it does already)."""
        if self._excess(line) <= 0:
            return line
        return self._shrink(logger, method_name, event_dict, line)

    def _excess(self, line: Any) -> int:
        if isinstance(line, str):
            if len(line) * 4 <= self._limit:  # UTF-8 takes at most 4 bytes a character
                return 0
            line = line.encode("utf-8", "surrogatepass")
        return len(line) - self._limit

    def _shrink(self, logger: WrappedLogger, method_name: str, event_dict: EventDict, line: Any) -> Any:
        fields = dict(event_dict)
        sizes = {key: _text_size(value) for key, value in fields.items() if key != "event"}
        largest = sorted(sizes, key=sizes.__getitem__, reverse=True)[:_MAX_SHRUNK]
        excess = self._excess(line)
        for key in largest:
            keep = max(0, sizes[key] - excess - 256)
            while True:
                fields[key] = truncate(event_dict[key], keep)
                line = self._render(logger, method_name, fields)
                excess = self._excess(line)
                if excess <= 0:
                    return line
                if keep == 0:
                    break
                keep = max(0, keep - excess)  # each character dropped saves at least one byte
        outline = _outline(event_dict, self._limit)
        line = self._render(logger, method_name, outline)
        if self._excess(line) > 0:
            line = self._render(logger, method_name, {k: outline[k] for k in ("event", "_dropped")})
        return line


def _line_cap(uncapped: Any, max_line_bytes: int | None) -> tuple[CapLine | None, int]:
    """A renderer's own line cap: the ``CapLine`` over its uncapped twin, and the length (characters
    or bytes) up to which a line fits for sure, so a line that does costs one comparison."""
    if not max_line_bytes:
        return None, sys.maxsize
    cap = CapLine(uncapped, max_line_bytes)
    return cap, (max_line_bytes - 1) // 4


def _text_size(value: Any) -> int:
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        return 16 * len(value)  # an estimate: only the order of the candidates depends on it
    return len(safe_str(value))


def _outline(event_dict: EventDict, limit: int) -> EventDict:
    event = safe_str(event_dict.get("event", ""))
    outline: EventDict = {"event": truncate(event, 200) if len(event) > 256 else event}
    kept = 0
    for key, value in event_dict.items():
        if kept == _OUTLINE_KEEP:
            break
        if key != "event" and type(key) is str and len(key) <= 64 and type(value) in (int, float, bool):
            outline[key] = value
            kept += 1
    dropped = len(event_dict) - len(outline)
    outline["_dropped"] = Truncated(f"<truncated: {dropped:,} fields did not fit in {limit + 1:,} bytes>")
    return outline


class WriteText:
    """Renders the text line and hands it to ``write`` when the event's level is at least ``level``.

    The line is rendered only then, so ``level="WARNING"`` costs nothing for ``info`` events.
    ``write`` gets the line as rendered, without its newline (``MetricLogger`` passes its text
    file's or stream's ``put``). Returns the event dict for the next stage.
    """

    __slots__ = ("_level", "_render", "_write")

    def __init__(
        self,
        write: Callable[[Any], object],
        renderer: structlog.typing.Processor | None = None,
        level: int = logging.INFO,
    ):
        self._write = write
        self._render = bound_call(renderer or TextRenderer())
        self._level = level

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        if _LEVEL_NUMBERS.get(method_name, _INFO) >= self._level:
            self._write(self._render(logger, method_name, event_dict))
        return event_dict


class WriteLines:
    """Renders the event with ``renderer`` and hands the result to ``write``; returns the event dict.

    ``MetricLogger`` uses it with ``JSONLRenderer(as_bytes=True)`` and its JSONL file's ``write``.
    """

    __slots__ = ("_render", "_write")

    def __init__(self, write: Callable[[Any], object], renderer: structlog.typing.Processor):
        self._write = write
        self._render = bound_call(renderer)

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        self._write(self._render(logger, method_name, event_dict))
        return event_dict


OnHookError = Callable[[Any, Exception, str], None]


def _reraise(hook: Any, error: Exception, event: str) -> None:
    raise error


Targets = tuple[tuple[Any, Callable[[str, Any], object]], ...]
"""``(hook, callable)`` for each hook, in order: what ``HookList.targets`` holds."""

Submission = tuple[contextvars.Context, Targets, EventDict]


class _Resolved:
    """``targets`` of a plain sequence of hooks, resolved per event (a ``HookList`` keeps its own)."""

    __slots__ = ("_hooks",)

    def __init__(self, hooks: Sequence[Any]) -> None:
        self._hooks = hooks

    @property
    def targets(self) -> Targets:
        return resolve_targets(self._hooks)


def _with_targets(hooks: Sequence[Any]) -> Any:
    """``hooks`` itself when it keeps its ``targets`` (a ``HookList``), else a view resolving them."""
    return hooks if isinstance(getattr(hooks, "targets", None), tuple) else _Resolved(hooks)


class HandOff:
    """Final stage for background delivery: submits the event, then consumes it.

    What is submitted is ``(context, targets, event_dict)``: a copy of the emitting thread's
    ``contextvars`` (so a hook forwarding to structlog still sees the application's bound context)
    and the hooks as registered at emit time, as ``(hook, callable)`` pairs (so a hook added later
    never sees earlier events). ``MetricLogger`` submits to its hook thread, which calls
    ``DispatchHooks.deliver`` inside that context. With no hooks registered, nothing is submitted.
    Raises ``structlog.DropEvent``; with ``final=False`` returns the event dict instead, for a wrapper
    that ends the chain itself (``MetricLogger``'s: raising costs a third of a microsecond per event).
    """

    __slots__ = ("_final", "_hooks", "_submit")

    def __init__(
        self, hooks: Sequence[Any], submit: Callable[[Submission], object], *, final: bool = True
    ) -> None:
        self._hooks = _with_targets(hooks)
        self._submit = submit
        self._final = final

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        targets = self._hooks.targets
        if targets:
            self._submit((contextvars.copy_context(), targets, event_dict))
        if self._final:
            raise structlog.DropEvent
        return event_dict


class DispatchHooks:
    """Final stage: calls each hook with ``(event, payload)``, then consumes the event.

    Each hook gets a payload of its own, so one hook's mutation can't reach the next: the last hook
    gets the event dict itself, less ``"event"`` (this is the last stage: nothing reads it after),
    the others a copy each. A hook's ``Exception`` goes to ``on_error(hook, error, event)`` and the
    remaining hooks still run; ``BaseException`` (KeyboardInterrupt, SystemExit) propagates. Raises
    ``structlog.DropEvent``; with ``final=False`` returns the event dict instead (see ``HandOff``),
    as the last hook left it.
    """

    __slots__ = ("_final", "_hooks", "_on_error")

    def __init__(
        self, hooks: Sequence[Any], on_error: OnHookError = _reraise, *, final: bool = True
    ) -> None:
        self._hooks = _with_targets(hooks)
        self._on_error = on_error
        self._final = final

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        self.deliver(self._hooks.targets, event_dict)
        if self._final:
            raise structlog.DropEvent
        return event_dict

    def deliver(self, targets: Targets, event_dict: EventDict) -> None:
        """Call each of ``targets`` (``(hook, callable)`` pairs, as in ``HookList.targets``) with the
        event, isolating their failures; ``event_dict`` becomes the last hook's payload."""
        event = event_dict.pop("event", "")
        copies = len(targets) - 1
        for hook, target in targets:
            payload = dict(event_dict) if copies else event_dict
            copies -= 1
            try:
                target(event, payload)
            except Exception as error:
                self._on_error(hook, error, event)
