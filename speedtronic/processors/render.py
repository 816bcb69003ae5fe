"""Renderers: the pipe-delimited text line and the strict-JSON record, each within a line cap."""

from __future__ import annotations

import bisect
import itertools
import re
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

import orjson
from structlog.typing import EventDict, WrappedLogger

from speedtronic.levels import LEVEL_NAMES
from speedtronic.record import (
    NOTE_CONVERTED,
    NOTE_KEY,
    NOTE_NON_FINITE,
    NOTE_PART,
    NOTE_PARTS,
    NOTE_TRUNCATED,
    PART_HEAD,
    empty_note,
    iso_timestamp,
    pointer_tokens,
)
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
        head, skip = self._head_and_skip(method_name, event_dict)
        cap = self._cap
        if cap is not None and len(event_dict) >= _LEAD_FIELDS:  # wide: only the fields it can keep
            room = cap.limit - _MARKER_ROOM - len(head)
            fields, left = self._format.fields_within(
                event_dict, skip, room, cap.limit - len(head), cap.limit // 8
            )
            line = head + fields
            if left:
                cut = self._cut(line, len(head), cap.limit, left)
                if cut is not None:
                    return cut
                line = head + self._format.fields(event_dict, skip)
        else:
            line = head + self._format.fields(event_dict, skip)
        if cap is None or cap.fits(line):  # checked here: a line that fits costs no further call
            return line
        cut = self._cut(line, len(head), cap.limit, 0)
        return cut if cut is not None else str(cap.shorten(logger, method_name, event_dict, line))

    def _cut(self, line: str, head: int, limit: int, left: int) -> str | None:
        """A wide line of many short bare fields (per-layer metrics) cut after the last field that
        fits, and ``_dropped`` counting the others (``left`` more follow the fields in ``line``), as
        ``CapLine`` cuts it but from the line as rendered (no render per try). ``None`` for any other
        line (non-ASCII, a quoted value, a field of a quarter of the cap or more, whose value
        ``CapLine`` cuts instead): ``CapLine`` shortens it. ``head``: where the fields begin."""
        if not line.isascii() or line.find('"', head) >= 0:
            return None
        cut = line.rfind(" ", head, limit - _MARKER_ROOM + 1)
        if cut <= head or _has_wide_field(line, head, limit // 8):
            return None
        dropped = line.count(" ", cut) + left  # bare values hold no space
        marker = Truncated(f"<truncated: {dropped:,} fields did not fit in {limit + 1:,} bytes>")
        return line[:cut] + self._format.fields({"_dropped": marker}, ())

    def render(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> str:
        """The line, uncapped."""
        head, skip = self._head_and_skip(method_name, event_dict)
        return head + self._format.fields(event_dict, skip)

    def _head_and_skip(self, method_name: str, event_dict: EventDict) -> tuple[str, frozenset[str]]:
        """The line up to its fields, and the keys its fields leave out."""
        level = LEVEL_NAMES.get(method_name) or quote(method_name.upper())
        own_level = event_dict.get("level")
        repeats_level = isinstance(own_level, str) and LEVEL_NAMES.get(own_level.lower()) == level
        return self._head(level, event_dict), _TEXT_SKIPPED_WITH_LEVEL if repeats_level else _TEXT_SKIPPED

    def _head(self, level: str, event_dict: EventDict) -> str:
        """The line up to its fields: the time, the level and the event."""
        name = self._format.key(event_dict.get("event", ""))  # quoted once per event name
        return f"{self._time(event_dict)} | {level} | {name}"

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
    readers see one line. Returns ``str``, or ``bytes`` with ``as_bytes=True``.

    With ``max_line_bytes``, no line is longer than that once a newline is added: a record wider than
    that is written in parts (``speedtronic.record``: consecutive lines joined by ``"\\n"`` in the one
    string returned, so a sink writes them with one ``write(2)``), each a complete record carrying the
    ``event``, the ``step``, ``rank`` and ``world_size`` it has, its share of the other fields, a note
    numbering it (``"part"``, ``"parts"``) and the ``timestamp``; ``speedtronic.runs`` joins them back.
    Only a value too large for a part of its own is truncated (``CapLine``'s marker). A key or an event
    name too long for a part makes the record ``CapLine``'s cut instead.
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
        data, record = self._rendered(event_dict)
        cap = self._cap
        if cap is not None and len(data) > cap.limit:  # bytes: their length is their size
            parts = _Parts(cap.limit, record, data).lines()
            if parts is None:  # a key or an event name too long for a part: the cap's own cut
                shorter: str | bytes = cap.shorten(
                    logger, method_name, event_dict, self.render(logger, method_name, event_dict)
                )
                return shorter
            data = b"\n".join(parts)
        return data if self._as_bytes else data.decode()

    def render(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> str | bytes:
        """The record, uncapped."""
        data = self._rendered(event_dict)[0]
        return data if self._as_bytes else data.decode()

    def _rendered(self, event_dict: EventDict) -> tuple[bytes, dict[str, Any]]:
        """The record's line, and the fields it was written from (in its order; its note among them
        unless it is the empty note)."""
        record = {"event": event_dict.get("event"), **event_dict}
        if "timestamp" not in record:
            record["timestamp"] = iso_timestamp(self._clock())
        data = _plain_record(record) if NOTE_KEY not in record else None
        if data is None:
            record = json_safe_record(record, always_note=True)
            data = _dumps(record)
        if not data.isascii():
            data = _escape_line_breaks(data)
        return data, record


def _dumps(safe: dict[str, Any]) -> bytes:
    """``json_safe_record``'s output as JSON bytes (a type orjson refuses is written as its text)."""
    try:
        return orjson.dumps(safe, option=_ORJSON_OPTIONS)
    except TypeError:  # a type orjson refuses: written as its text
        return orjson.dumps(
            json_safe_record(safe, always_note=True), default=safe_str, option=_ORJSON_OPTIONS
        )


class _Parts:
    """A record too wide for one line as consecutive lines that each fit (``speedtronic.record``: a
    record written in parts).

    Each part is the ``event``, the record's ``PART_HEAD`` fields, the next fields in order that fit,
    its note (``"part"`` ``i`` of ``"parts"`` ``n``; the converted, truncated and non-finite entries of
    its own fields and of the head's) and the ``timestamp``. The record is rendered once: its line is
    cut at its commas into its fields' bytes when no key or value holds a comma (numbers, short
    strings: per-layer metrics), else each field is rendered on its own; the fields are packed by
    those sizes and the parts joined from them, so the cost grows linearly with the fields. A value
    too large for a part of its own (a 3 MB string) is truncated (``truncate``: as much as fits
    beside the rest, at most a part's room) and listed under the note's ``truncated``; nothing else
    is cut."""

    __slots__ = ("_fields", "_limit", "_line", "_note", "_owners", "_record")

    def __init__(self, limit: int, record: Mapping[str, Any], line: bytes) -> None:
        self._limit = limit
        self._record = record
        self._line = line
        note = record.get(NOTE_KEY)
        self._note: dict[str, Any] = note if isinstance(note, dict) else empty_note()
        self._fields = len(record) - 1 - ("event" in record) - (NOTE_KEY in record)  # all but the timestamp
        self._owners = self._entry_owners()

    def lines(self) -> list[bytes] | None:
        """The parts' lines, without newlines; ``None`` when the event and its head, or a key, can't
        fit in a part."""
        if not self._owners:
            lines = self._cut_at_commas()
            if lines is not None:
                return lines
        return self._from_pieces()

    def _cut_at_commas(self) -> list[bytes] | None:
        """The parts cut from the line at its commas, a few calls per part, when only its structure
        holds commas and every field fits in a part (else ``None``)."""
        line, record = self._line, self._record
        end = line.rfind(b',"' + NOTE_KEY.encode() + b'":')  # the fields end where the note begins
        if line.count(b",", 1, end) != self._fields:  # a comma in a key or value
            return None
        first = line.find(b",", 1, end)  # after the event's field
        if first < 0:  # the event alone is too wide
            return None
        head, holes = [line[1:first]], []
        for key in PART_HEAD:
            if key in record:  # its field: from the comma before it to the one after it
                at = line.find(b"," + _value_bytes(key) + b":", first, end)
                stop = line.find(b",", at + 1, end)
                stop = end if stop < 0 else stop
                head.append(line[at + 1 : stop])
                holes.append((at, stop))
        view, spans, start = memoryview(line), [], first
        for at, stop in sorted(holes):
            spans.append(view[start:at])
            start = stop
        spans.append(view[start:end])
        fields = b"".join(spans)  # each field after its comma: the line's only copy before the parts
        heads = b",".join(head)
        stamp = b'"timestamp":' + _value_bytes(record.get("timestamp"))
        budget = self._limit - (len(heads) + len(self._note_bytes(9_999_999, 9_999_999, ())) + len(stamp) + 4)
        if len(fields) < 2 or budget < _MIN_LINE_BYTES // 2:
            return None
        chunks, start, view = [], 1, memoryview(fields)
        while len(fields) - start > budget:
            cut = fields.rfind(b",", start, start + budget + 1)  # after the last field that fits
            if cut <= start:  # a field wider than a part: cut by the pieces' rules
                return None
            chunks.append(view[start:cut])
            start = cut + 1
        chunks.append(view[start:])
        count = len(chunks)
        return [
            b"".join((b"{", heads, b",", chunk, b",", self._note_bytes(part, count, ()), b",", stamp, b"}"))
            for part, chunk in enumerate(chunks)
        ]

    def _from_pieces(self) -> list[bytes] | None:
        """The parts from each field's bytes (``_pieces``), values too large for a part truncated."""
        names, limit = self._names(), self._limit
        pieces = self._pieces()
        head_at = [names.index(key) for key in PART_HEAD if key in self._record]
        head = b",".join([pieces[0], *(pieces[1 + at] for at in head_at)])
        stamp = b'"timestamp":' + _value_bytes(self._record.get("timestamp"))
        widest = self._note_bytes(9_999_999, 9_999_999, ())
        budget = limit - (len(head) + len(widest) + len(stamp) + 4)
        fields = pieces[1:]
        for at in sorted(head_at, reverse=True):
            del fields[at]
        chosen = list(names)
        for at in sorted(head_at, reverse=True):
            del chosen[at]
        places = [at for at in range(len(names)) if at not in head_at]  # where each field was
        if budget < _MIN_LINE_BYTES // 2 or not chosen:
            return None
        sizes = list(map((1).__add__, map(len, fields)))  # each with its comma
        if self._owners:
            for index, name in enumerate(chosen):
                sizes[index] += sum(len(_value_bytes(entry)) + 1 for _, entry in self._owners.get(name, ()))
        if max(sizes) > budget and not self._truncate(chosen, fields, sizes, budget):
            return None
        ends = list(itertools.accumulate(sizes))
        cuts, start = [0], 0
        while start < len(chosen):  # each part: the next fields whose sizes fit in the budget
            end = bisect.bisect_right(ends, (ends[start - 1] if start else 0) + budget, start)
            cuts.append(max(end, start + 1))
            start = cuts[-1]
        count = len(cuts) - 1
        if count == 1:  # one line after all (a huge value cut): the record as it was, in its order
            for field, at in zip(fields, places, strict=True):
                pieces[1 + at] = field
            note = (
                b'"' + NOTE_KEY.encode() + b'":' + _value_bytes({**self._note, NOTE_PART: 0, NOTE_PARTS: 1})
            )
            line = b"".join((b"{", b",".join(pieces), b",", note, b",", stamp, b"}"))
            return [line] if len(line) <= limit else None
        lines = []
        for part, (start, end) in enumerate(itertools.pairwise(cuts)):
            note = self._note_bytes(part, count, chosen[start:end])
            line = b"".join((b"{", head, b",", b",".join(fields[start:end]), b",", note, b",", stamp, b"}"))
            if len(line) > limit:  # cannot be, sizes being measured: the cap's own cut, never a longer line
                return None
            lines.append(line)
        return lines

    def _pieces(self) -> list[bytes]:
        """The bytes of ``"event":...`` and of each field's ``"key":value``, in order: the line cut at
        its commas when only its structure holds commas, else each field rendered on its own."""
        line, record = self._line, self._record
        end = line.rfind(b',"' + NOTE_KEY.encode() + b'":')  # the note comes after every field
        pieces = line[1:end].split(b",")
        if len(pieces) == 1 + self._fields:
            return pieces
        return [_value_bytes(key) + b":" + _value_bytes(record[key]) for key in ("event", *self._names())]

    def _names(self) -> list[str]:
        """The record's fields but its event, note and timestamp, in order."""
        keys = list(self._record)  # the event first, then the fields, the note (if any) and the timestamp
        return keys[1:-2] if NOTE_KEY in self._record else keys[1:-1]

    def _note_bytes(self, part: int, parts: int, chosen: Any) -> bytes:
        note = {**self._note, NOTE_PART: part, NOTE_PARTS: parts}
        if self._owners:
            note.update(self._own_entries(chosen))
        return b'"' + NOTE_KEY.encode() + b'":' + _value_bytes(note)

    def _truncate(self, names: list[str], fields: list[bytes], sizes: list[int], budget: int) -> bool:
        """Each value too large for a part truncated, ``fields`` and ``sizes`` updated; ``False`` for
        a key that leaves no room for a value."""
        alone = sum(size > budget for size in sizes) == 1  # one value cut by the excess: one line
        excess = len(self._line) - self._limit
        for index, size in enumerate(sizes):
            if size <= budget:
                continue
            name = names[index]
            key = _value_bytes(name) + b":"
            if len(key) > budget - _MARKER_ROOM:
                return False
            value = self._record[name]
            target = size - excess - 256 if alone else budget
            room = (
                (target if len(key) + _MARKER_ROOM < target <= budget else budget) - len(key) - _MARKER_ROOM
            )
            length = len(value) if isinstance(value, str) else size
            keeps = [room * length // size, 0]
            by_excess = (length + 2 if isinstance(value, str) else size) - excess - 256
            if alone and by_excess > 0:  # as CapLine cuts a huge value: by the excess, to stay one line
                keeps.insert(0, by_excess)
            for keep in keeps:
                fields[index] = key + _value_bytes(truncate(value, keep))
                sizes[index] = len(fields[index]) + 1 + 2 * (len(_value_bytes(name)) + 1)
                if sizes[index] <= budget:
                    break
            note = self._note
            note[NOTE_TRUNCATED] = (
                [*note[NOTE_TRUNCATED], name] if name not in note[NOTE_TRUNCATED] else note[NOTE_TRUNCATED]
            )
            note[NOTE_NON_FINITE] = {
                kind: [at for at in pointers if _owner(at) != name]
                for kind, pointers in note[NOTE_NON_FINITE].items()
            }
            self._owners = self._entry_owners()
        return True

    def _entry_owners(self) -> dict[str, list[tuple[str, str]]]:
        """The note's entries by the field each is about (``(NOTE_CONVERTED, name)``,
        ``("nan", "/losses/2")``...); empty when the note lists nothing."""
        note = self._note
        lists = note[NOTE_NON_FINITE]
        owners: dict[str, list[tuple[str, str]]] = {}
        if not (note[NOTE_CONVERTED] or note[NOTE_TRUNCATED] or any(lists.values())):
            return owners
        for which in (NOTE_CONVERTED, NOTE_TRUNCATED):
            for name in note[which]:
                owners.setdefault(name, []).append((which, name))
        for kind, pointers in lists.items():
            for pointer in pointers:
                owners.setdefault(_owner(pointer), []).append((kind, pointer))
        return owners

    def _own_entries(self, chosen: Any) -> dict[str, Any]:
        """The note's lists with only the entries about the head's fields and ``chosen``."""
        lists: dict[str, list[str]] = {NOTE_CONVERTED: [], NOTE_TRUNCATED: []}
        found: dict[str, list[str]] = {kind: [] for kind in self._note[NOTE_NON_FINITE]}
        owners = self._owners
        for name in (*PART_HEAD, *chosen):
            for which, entry in owners.get(name, ()):
                (lists[which] if which in lists else found[which]).append(entry)
        return {**lists, NOTE_NON_FINITE: found}


_LEAD_FIELDS = 256
"""Fields from which a capped text line formats only those it can keep (``ValueFormat.fields_within``):
a narrower event is rarely cut, and formatted whole as cheaply."""
_MARKER_ROOM = 512
"""Bytes left for a truncation marker's own text when a value is cut to fit a part."""


def _has_wide_field(line: str, start: int, width: int) -> bool:
    """Whether ``line`` from ``start`` holds ``width`` characters in a row without a space, looked
    for in windows of ``width`` (so every run of ``2 * width`` is found): a call per window."""
    return any(line.find(" ", at, at + width) < 0 for at in range(start, len(line) - width, width))


def _value_bytes(value: Any) -> bytes:
    """``value`` as the record's line holds it."""
    data = orjson.dumps(value, default=safe_str, option=_ORJSON_OPTIONS)
    return data if data.isascii() else _escape_line_breaks(data)


def _owner(pointer: str) -> str:
    """The top-level key a JSON Pointer (``/losses/2``) leads into."""
    tokens = pointer_tokens(pointer)
    return tokens[0] if tokens else pointer


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

    A line that fits costs one length check. A longer one is rendered again, at most five times,
    never once per value: first with the largest value (the common case: one huge value) replaced
    by a ``truncate`` marker (``<truncated: str of 3,000,000 chars; first 900 chars: ...>``), so the
    line keeps its other fields and stays strict JSON; if that is not enough (thousands of fields, a
    huge key), with the fields that fit, in order, and ``"_dropped": "<truncated: N fields
    did not fit in 32,000 bytes>"``. ``event``, ``timestamp``, ``level`` and the record's note are
    always kept. ``JSONLRenderer(max_line_bytes=...)`` writes a wide record in parts instead, losing
    no field; ``TextRenderer(max_line_bytes=...)`` cuts its line as this does.
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

    @property
    def limit(self) -> int:
        """The longest line, newline excluded."""
        return self._limit

    def shorten(self, logger: WrappedLogger, method_name: str, event_dict: EventDict, line: Any) -> Any:
        """The event rendered within the cap, ``line`` being its uncapped rendering (see the class)."""
        excess = self.excess(line)
        if excess <= 0:
            return line
        sizes = {key: _text_size(value) for key, value in event_dict.items() if key not in _ALWAYS_KEPT}
        largest = max(sizes, key=sizes.__getitem__, default=None)
        if largest is not None:  # the common case: one huge value
            line = self._render(
                logger,
                method_name,
                {**event_dict, largest: truncate(event_dict[largest], sizes[largest] - excess - 256)},
            )
            if self.excess(line) <= 0:
                return line
        return self._first_fields(logger, method_name, event_dict, sizes, len(line) - excess)

    def _first_fields(
        self, logger: WrappedLogger, method_name: str, event_dict: EventDict, sizes: dict[Any, int], room: int
    ) -> Any:
        """The event with the fields that fit, in order, and ``_dropped`` counting the others: each
        field kept while the sizes so far leave room, the room halved until the line fits."""
        event = safe_str(event_dict.get("event", ""))
        kept: EventDict = {
            key: event_dict[key] for key in event_dict if key in _ALWAYS_KEPT and key != "event"
        }
        kept["event"] = truncate(event, 200) if len(event) > 256 else event
        for _ in range(4):
            fields = dict(kept)
            left = room - 64
            for key, size in sizes.items():
                size += len(key) + 4 if type(key) is str else 16
                if size <= left:
                    fields[key] = event_dict[key]
                    left -= size
            dropped = len(sizes) - (len(fields) - len(kept))
            fields["_dropped"] = Truncated(
                f"<truncated: {dropped:,} fields did not fit in {self._limit + 1:,} bytes>"
            )
            line = self._render(logger, method_name, fields)
            if self.excess(line) <= 0:
                return line
            room //= 2
        return self._render(
            logger, method_name, {"event": truncate(event, 0), "_dropped": fields["_dropped"]}
        )

    def excess(self, line: str | bytes) -> int:
        """How many bytes ``line`` is over the cap (0 or less: none)."""
        if not line.isascii() and isinstance(line, str):  # an ASCII line's length is its size
            line = line.encode("utf-8", "surrogatepass")
        return len(line) - self._limit


_ALWAYS_KEPT = frozenset({"event", "timestamp", "level", NOTE_KEY})
"""Keys ``CapLine`` never drops: what the line is, when it happened, and the record's note."""


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
