"""Renderers: the pipe-delimited text line and the strict-JSON record, each within a line cap.

Both are ordinary structlog renderers (they return the line); ``WriteLines`` hands a rendered line to
a sink and passes the event dict on, so one chain can write both. Both read the record's one
``timestamp`` (``AddTimestamp``, or structlog's ``TimeStamper`` in your chain), so they name the same
instant; standing alone, each reads its ``clock`` once per record instead.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

import orjson
from structlog.typing import EventDict, WrappedLogger

from speedtronic.levels import LEVEL_NAMES
from speedtronic.record import NOTE_KEY, empty_note, iso_timestamp
from speedtronic.record.safe_text import safe_str
from speedtronic.record.text import DEFAULT_FLOAT_DIGITS, ValueFormat, quote
from speedtronic.record.values import PLAIN_TYPES, Truncated, is_plain, json_safe_record, truncate

__all__ = ["DEFAULT_MAX_LINE_BYTES", "CapLine", "JSONLRenderer", "TextRenderer"]

DEFAULT_MAX_LINE_BYTES = 32_000
"""Longest line written, newline included. See ``docs/shipping.md`` for each shipper's own limit
(rsyslog's default 8 KiB needs ``max_line_bytes=8192`` or a larger ``maxMessageSize``)."""

_TEXT_SKIPPED = frozenset({"event", "timestamp", NOTE_KEY})
_TEXT_SKIPPED_WITH_LEVEL = _TEXT_SKIPPED | {"level"}
_ORJSON_OPTIONS = (
    orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS
)
_EMPTY_NOTE = orjson.Fragment(orjson.dumps(empty_note()))
"""The note of a record with nothing to say, serialised once: orjson writes a ``Fragment`` as it is."""
_NULL = re.compile(b"null")
"""``null`` in a line: a regular expression finds it twice as fast as ``bytes.__contains__`` does."""
_MIN_LINE_BYTES = 1024
_OUTLINE_KEEP = 32  # short numeric fields kept in an outline


class TextRenderer:
    """Renders ``2026-01-01 12:00:00 | INFO | train_step step=1 loss=1.2 lr=0.0003 elapsed_s=0.01``.

    The record's ``timestamp`` to the second, in UTC like the JSONL record (``local_time=True``: local
    time with its offset, ``2026-01-01 07:00:00-05:00``), the level (from the method name), the event,
    then every other key in order. Not repeated: ``timestamp``, the record's ``_speedtronic`` note,
    and a ``level`` key that only repeats the record's level (``add_log_level``'s); a payload's own
    ``level`` with another value is shown. Values as ``ValueFormat`` writes them (floats with
    ``float_digits`` significant digits; strings bare when safe, else quoted with escapes, so the
    result is always exactly one line). With ``max_line_bytes``, no longer than that once a newline is
    added (see ``CapLine``). ``clock`` (seconds since the epoch) is read only for an event dict with no
    ISO ``timestamp``.
    """

    __slots__ = ("_cap", "_clock", "_format", "_local")

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        *,
        float_digits: int | None = DEFAULT_FLOAT_DIGITS,
        max_line_bytes: int | None = None,
        local_time: bool = False,
    ) -> None:
        self._clock = clock
        self._format = ValueFormat(float_digits)
        self._local = local_time
        self._cap = CapLine(self.render, max_line_bytes) if max_line_bytes else None

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> str:
        line = self.render(logger, method_name, event_dict)
        cap = self._cap
        if cap is None or cap.fits(line):  # checked here: a line that fits costs no further call
            return line
        return str(cap.shorten(logger, method_name, event_dict, line))

    def render(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> str:
        """The line, uncapped."""
        level = LEVEL_NAMES.get(method_name) or quote(method_name.upper())
        name = self._format.key(event_dict.get("event", ""))  # quoted once per event name
        own_level = event_dict.get("level")
        repeats_level = isinstance(own_level, str) and LEVEL_NAMES.get(own_level.lower()) == level
        skip = _TEXT_SKIPPED_WITH_LEVEL if repeats_level else _TEXT_SKIPPED
        return f"{self._time(event_dict)} | {level} | {name}{self._format.fields(event_dict, skip)}"

    def _time(self, event_dict: EventDict) -> str:
        stamp = event_dict.get("timestamp")
        if type(stamp) is not str or len(stamp) < 19 or stamp[10] not in "T ":  # not an ISO stamp
            if isinstance(stamp, int | float) and not isinstance(stamp, bool):  # TimeStamper(fmt=None)
                stamp = iso_timestamp(stamp)
            elif not (isinstance(stamp, str) and len(stamp) >= 19 and stamp[10] in "T "):
                stamp = iso_timestamp(self._clock())
        if self._local:  # the stamp is UTC: shown in the machine's zone, with its offset
            moment = datetime.fromisoformat(stamp[:19]).replace(tzinfo=timezone.utc)
            return moment.astimezone().isoformat(sep=" ", timespec="seconds")
        return f"{stamp[:10]} {stamp[11:19]}"


class JSONLRenderer:
    """Renders one strict JSON object, no trailing newline: ``"event"`` first.

    ``timestamp`` (UTC, RFC 3339, microseconds: ``iso_timestamp``) is the record's own (``AddTimestamp``
    or structlog's ``TimeStamper`` earlier in the chain), or read from ``clock`` when the event dict
    has none. Every record carries the ``"_speedtronic"`` note in its one fixed shape
    (``speedtronic.record.empty_note``): it says the record's contract. A record of plain
    finite scalars is written as it is plus that note; any other goes through ``json_safe_record``
    first: NaN and infinities become ``null`` (listed by JSON Pointer under the note's ``non_finite``),
    values JSON can't hold become their ``str()``, keys become unique strings, and what was converted
    or truncated is noted there too. U+2028, U+2029 and U+0085 are escaped so ``splitlines()``
    readers see one line. Returns ``str``, or ``bytes`` with ``as_bytes=True``; with
    ``max_line_bytes``, no longer than that once a newline is added.
    """

    __slots__ = ("_as_bytes", "_cap", "_clock")

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        *,
        as_bytes: bool = False,
        max_line_bytes: int | None = None,
    ) -> None:
        self._clock = clock
        self._as_bytes = as_bytes
        self._cap = CapLine(self.render, max_line_bytes) if max_line_bytes else None

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> str | bytes:
        line = self.render(logger, method_name, event_dict)
        cap = self._cap
        if cap is None or cap.fits(line):
            return line
        shorter: str | bytes = cap.shorten(logger, method_name, event_dict, line)
        return shorter

    def render(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> str | bytes:
        """The record, uncapped."""
        record = {"event": event_dict.get("event"), **event_dict}
        if "timestamp" not in record:
            record["timestamp"] = iso_timestamp(self._clock())
        data = _plain_record(record) if NOTE_KEY not in record else None
        if data is None:
            safe = json_safe_record(record, always_note=True)
            try:
                data = orjson.dumps(safe, option=_ORJSON_OPTIONS)
            except TypeError:  # a type orjson refuses: written as its text
                data = orjson.dumps(
                    json_safe_record(safe, always_note=True), default=safe_str, option=_ORJSON_OPTIONS
                )
        if not data.isascii():
            data = _escape_line_breaks(data)
        return data if self._as_bytes else data.decode()


def _plain_record(record: dict[str, Any]) -> bytes | None:
    """A record of plain finite scalars (``is_plain``) serialised as it is, with the empty note before
    its timestamp; ``None`` (and ``record`` as it was) for any other. Tested at C speed: the value types
    in one pass, ints beyond 64 bits by orjson's refusal, NaN and infinities (which orjson writes as
    ``null``) by ``is_plain`` only when the line holds a ``null``."""
    if not PLAIN_TYPES.issuperset(map(type, record.values())):
        return None
    timestamp = record.pop("timestamp")
    record[NOTE_KEY] = _EMPTY_NOTE  # every record carries the note: its contract
    record["timestamp"] = timestamp
    try:
        data: bytes | None = orjson.dumps(record, option=_ORJSON_OPTIONS)
    except TypeError:  # an int beyond 64 bits, a lone surrogate
        data = None
    del record[NOTE_KEY]
    if data is not None and _NULL.search(data) is not None and not is_plain(record):
        data = None
    return data


def _escape_line_breaks(data: bytes) -> bytes:
    return (
        data.replace(b"\xe2\x80\xa8", b"\\u2028")
        .replace(b"\xe2\x80\xa9", b"\\u2029")
        .replace(b"\xc2\x85", b"\\u0085")
    )


class CapLine:
    """Wraps a renderer so no line exceeds ``max_bytes`` (newline included), keeping it valid.

    A line that fits costs one length check. A longer one is rendered again with values replaced by
    ``truncate`` markers (``<truncated: str of 3,000,000 chars; first 900 chars: ...>``), so the
    record keeps its other fields and stays strict JSON: first the largest value alone (the common
    case: one huge value; cutting it also removes what it added to the record's note), then the
    largest values together, each cut by what is still in excess, then those values' markers only.
    Past that (thousands of fields, a huge key) the line becomes the record's outline: the event, up to
    32 short numeric fields and ``"_dropped": "<truncated: N fields ...>"``. So a capped line costs at
    most eight renders, never one per value.
    """

    __slots__ = ("_limit", "_render")

    def __init__(
        self,
        renderer: Callable[[WrappedLogger, str, EventDict], Any],
        max_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < _MIN_LINE_BYTES:
            raise ValueError(f"max_line_bytes must be an int >= {_MIN_LINE_BYTES}, got {max_bytes!r}")
        self._render = renderer
        self._limit = max_bytes - 1  # the sink adds the newline

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> Any:
        line = self._render(logger, method_name, event_dict)
        return line if self.fits(line) else self.shorten(logger, method_name, event_dict, line)

    def fits(self, line: str | bytes) -> bool:
        """Whether ``line`` is within the cap (an ASCII line's length is its size)."""
        return len(line) <= self._limit and line.isascii()

    def shorten(self, logger: WrappedLogger, method_name: str, event_dict: EventDict, line: Any) -> Any:
        """The event rendered within the cap, ``line`` being its uncapped rendering (see the class)."""
        excess = self._excess(line)
        if excess <= 0:
            return line
        fields = dict(event_dict)
        sizes = sorted(
            ((_text_size(value), key) for key, value in event_dict.items() if key not in ("event", NOTE_KEY)),
            key=lambda pair: pair[0],
            reverse=True,
        )
        if sizes:  # the largest value alone
            size, key = sizes[0]
            fields[key] = truncate(event_dict[key], max(0, size - excess - 256))
            line = self._render(logger, method_name, fields)
            if self._excess(line) <= 0:
                return line
            fields[key] = event_dict[key]
        cut: list[Any] = []
        for size, key in sizes:  # the largest values, each cut by what is still in excess
            keep = max(0, size - excess - 256)
            fields[key] = truncate(event_dict[key], keep)
            cut.append(key)
            excess -= size - keep
            if excess <= 0:
                break
        line = self._render(logger, method_name, fields)
        if self._excess(line) <= 0:
            return line
        for key in cut:
            fields[key] = truncate(event_dict[key], 0)
        line = self._render(logger, method_name, fields)
        if self._excess(line) <= 0:
            return line
        outline = _outline(event_dict, self._limit)
        line = self._render(logger, method_name, outline)
        for keep in (200, 0):  # an event name that escapes long: cut it too
            if self._excess(line) <= 0:
                break
            event = safe_str(event_dict.get("event", ""))
            line = self._render(
                logger, method_name, {"event": truncate(event, keep), "_dropped": outline["_dropped"]}
            )
        return line

    def _excess(self, line: str | bytes) -> int:
        if not line.isascii() and isinstance(line, str):  # an ASCII line's length is its size
            line = line.encode("utf-8", "surrogatepass")
        return len(line) - self._limit


def _text_size(value: Any) -> int:
    if isinstance(value, str | bytes):
        return len(value) + 2
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        try:
            return len(
                orjson.dumps(value, default=safe_str, option=_ORJSON_OPTIONS | orjson.OPT_NON_STR_KEYS)
            )
        except (TypeError, orjson.JSONEncodeError):
            return 16 * len(value)
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
