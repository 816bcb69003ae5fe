"""Value conversion: the one place that turns tensors, numpy values and odd objects into plain data
(``to_python``) and strict-JSON-ready data (``json_safe_record``)."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from speedtronic.record.contract import NOTE_KEY, free_name, merged_note, non_finite_text, pointer_token
from speedtronic.record.safe_text import int_text, safe_repr, safe_str, value_text

__all__ = [
    "CYCLE",
    "MAX_DEPTH",
    "MAX_ELEMENTS",
    "MAX_REPEATS",
    "PLAIN_NUMBERS",
    "PLAIN_TYPES",
    "Converted",
    "Seen",
    "Truncated",
    "convert_fields",
    "is_plain",
    "json_safe_record",
    "key_text",
    "to_python",
    "truncate",
    "unique_key",
]

MAX_DEPTH = 32
"""Containers nested deeper than this are cut."""

MAX_ELEMENTS = 1024
"""Tensors and arrays with more elements are summarised instead of listed."""

MAX_REPEATS = 100_000
"""Values that shared containers met again may add to one event before each further one is a marker."""

CYCLE = "<cycle>"
"""What a container met again inside itself is written as (a ``Truncated`` marker)."""

PLAIN_TYPES: frozenset[type] = frozenset({str, int, float, bool, type(None)})
"""The types JSON and the text line write as they are (``bool`` is an ``int``, but its own type here)."""
PLAIN_NUMBERS: frozenset[type] = PLAIN_TYPES - {str}
"""The plain types that hold no text to judge or quote."""
_INT64_MIN = -(2**63)
_UINT64_MAX = 2**64 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")


class Converted(str):
    """A value written as its text because JSON can't hold it (``b"\\x00"``, ``{1, 2}``, NaN...)."""


class Truncated(str):
    """A marker standing in for a value cut short: too long for a line, too deep, too many elements."""


def truncate(value: Any, keep: int) -> Truncated:
    """``<truncated: str of 3,000,000 chars; first 20 chars: xxxxxxxxxxxxxxxxxxxx>``.

    Keeps the first ``keep`` characters of the value's text. A container's text (Python's own style:
    ``[1, 2, ...``) is written only as far as ``keep`` characters, so a multi-megabyte list, or one
    whose items are shared or contain it, costs about ``keep`` characters of work.
    """
    what = _describe(value)
    marker = _MARKER.fullmatch(value) if isinstance(value, str) and value.startswith("<truncated: ") else None
    if marker is not None:  # a marker (a redacted text's cap) cut again says what it said of its value
        what, value = marker["what"], marker["head"] or ""
    if keep <= 0:
        return Truncated(f"<truncated: {what}>")
    if isinstance(value, str):
        head = value[:keep]
    elif isinstance(value, Mapping | list | tuple | set | frozenset):
        writer = _Head(keep)
        writer.write(value, 0)
        head = "".join(writer.parts)[:keep]
    else:
        head = safe_str(value)[:keep]
    return Truncated(f"<truncated: {what}; first {len(head):,} chars: {head}>")


_MARKER = re.compile(
    r"<truncated: (?P<what>[A-Za-z_.]+ of [0-9,]+ (?:chars|items|bytes))"
    r"(?:; first [0-9,]+ chars: (?P<head>.*))?>",
    re.DOTALL,
)
"""A ``truncate`` marker: what it stands for, and the head it kept."""


def _describe(value: Any) -> str:
    if isinstance(value, str):
        return f"str of {len(value):,} chars"
    if isinstance(value, bytes | bytearray):
        return f"{type(value).__name__} of {len(value):,} bytes"
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        return f"{type(value).__name__} of {_length(value)} items"
    return type(value).__qualname__


def _length(value: Any) -> str:
    try:
        return f"{len(value):,}"
    except Exception:
        return "?"


class _Head:
    """Writes the start of a container's text, stopping once ``keep`` characters are written."""

    __slots__ = ("_open", "left", "parts")

    def __init__(self, keep: int) -> None:
        self.parts: list[str] = []
        self.left = keep
        self._open: set[int] = set()

    def put(self, text: str) -> None:
        self.parts.append(text[: self.left])
        self.left -= len(text)

    def write(self, value: Any, depth: int) -> None:
        if self.left <= 0:
            return
        if isinstance(value, str):
            self.put(repr(value[: self.left]))
        elif not isinstance(value, Mapping | list | tuple | set | frozenset):
            self.put(safe_repr(value)[: self.left])
        elif id(value) in self._open:
            self.put(CYCLE)
        elif depth >= MAX_DEPTH:
            self.put("...")
        else:
            self._open.add(id(value))
            self._container(value, depth)
            self._open.discard(id(value))

    def _container(self, value: Any, depth: int) -> None:
        ends = "[]"
        if isinstance(value, Mapping | set | frozenset):
            ends = "{}"
        elif isinstance(value, tuple):
            ends = "()"
        self.put(ends[0])
        try:
            items = value.items() if isinstance(value, Mapping) else value
            for n, item in enumerate(items):
                if self.left <= 0:
                    return
                if n:
                    self.put(", ")
                if isinstance(value, Mapping):
                    self.write(item[0], depth + 1)
                    self.put(": ")
                    item = item[1]
                self.write(item, depth + 1)
        except Exception:
            self.put(f"<unreadable {type(value).__qualname__}>")
        self.put(ends[1])


# -- walking containers once -------------------------------------------------------------------


class Seen:
    """The containers one walk has met, so it walks each once per event.

    ``open``/``close`` bracket the walk of a container; ``again`` answers for a container met before:
    the ``CYCLE`` marker while it is still open (met inside itself), else the entry ``close`` stored
    for it (a shared container), or a marker once repeats have added ``MAX_REPEATS`` values. ``count``
    is the values written so far (walkers add one per value), so a repeat's size is known. Entries keep
    their container alive: an id is never reused during the walk.
    """

    __slots__ = ("_done", "_open", "_repeated", "count")

    def __init__(self) -> None:
        self._open: set[int] = set()
        self._done: dict[int, tuple[Any, Any, int]] = {}
        self._repeated = 0
        self.count = 0

    def again(self, value: Any) -> Any:
        """``None`` for a container not met yet, else a ``Truncated`` marker or its stored entry."""
        key = id(value)
        if key in self._open:
            return Truncated(CYCLE)
        done = self._done.get(key)
        if done is None:
            return None
        size = done[2]
        if self._repeated + size > MAX_REPEATS:
            return Truncated(f"<truncated: {_describe(value)}, repeated>")
        self._repeated += size
        self.count += size
        return done[1]

    def open(self, value: Any) -> int:
        self._open.add(id(value))
        return self.count

    def close(self, value: Any, entry: Any, start: int) -> None:
        self._open.discard(id(value))
        self._done[id(value)] = (value, entry, self.count - start)


# -- to_python: device values to Python values -------------------------------------------------

_Converter = Callable[[Any, int, Seen], Any]


def to_python(value: Any, depth: int = 0) -> Any:
    """Return ``value`` with tensors and numpy values turned into Python numbers and lists.

    Mappings become dicts and lists and tuples become lists (at any depth, each container once: see
    the module's note on walks); anything else is returned as it is.
    """
    if type(value) in PLAIN_TYPES:
        return value
    return _python(value, depth, Seen())


def _python(value: Any, depth: int, seen: Seen) -> Any:
    seen.count += 1
    kind = type(value)
    if kind in PLAIN_TYPES:
        return value
    return _converter_for(kind)(value, depth, seen)


def _converter_for(kind: type) -> _Converter:
    torch = sys.modules.get("torch")
    if torch is not None and issubclass(kind, torch.Tensor):
        return _tensor
    numpy = sys.modules.get("numpy")
    if numpy is not None and issubclass(kind, numpy.generic):
        return _numpy_scalar
    if numpy is not None and issubclass(kind, numpy.ndarray):
        return _numpy_array
    if issubclass(kind, Mapping | list | tuple):
        return _container
    return _unchanged


def _unchanged(value: Any, depth: int, seen: Seen) -> Any:
    return value


def _summary(kind: str, shape: Any, dtype: object) -> Truncated:
    return Truncated(f"<{kind} shape={list(shape)!r} dtype={dtype}>")


def _tensor(value: Any, depth: int, seen: Seen) -> Any:
    try:
        value = value.detach()
        if value.dim() == 0:
            return value.item()
        if value.numel() > MAX_ELEMENTS:
            return _summary("tensor", value.shape, value.dtype)
        seen.count += value.numel()
        return value.cpu().tolist()
    except Exception:
        return Converted(safe_str(value))


def _numpy_scalar(value: Any, depth: int, seen: Seen) -> Any:
    try:
        return value.item()
    except Exception:
        return Converted(safe_str(value))


def _numpy_array(value: Any, depth: int, seen: Seen) -> Any:
    if value.size > MAX_ELEMENTS:
        return _summary("ndarray", value.shape, value.dtype)
    try:
        items = value.tolist()
    except Exception:
        return Converted(safe_str(value))
    if value.dtype.kind == "O":  # objects: tensors, dicts, ... converted like any other value
        return _python(items, depth, seen)
    seen.count += value.size
    return items


def _container(value: Any, depth: int, seen: Seen) -> Any:
    if depth >= MAX_DEPTH:
        return Truncated(_DEEP)
    again = seen.again(value)
    if again is not None:
        return again
    start = seen.open(value)
    try:
        if isinstance(value, Mapping):
            result: Any = {key: _python(item, depth + 1, seen) for key, item in value.items()}
        else:
            result = [_python(item, depth + 1, seen) for item in value]
    except Exception:  # a Mapping whose items() raises: written as its text downstream
        result = value
    seen.close(value, result, start)
    return result


def convert_fields(fields: MutableMapping[Any, Any]) -> None:
    """Turn each value of ``fields`` that is not plain into Python data (``to_python``), in place, with
    one walk for all of them: a container shared by two fields is converted once."""
    seen: Seen | None = None
    for key, value in fields.items():
        if type(value) not in PLAIN_TYPES:
            seen = seen or Seen()
            fields[key] = _python(value, 0, seen)


# -- json_safe: anything to strict JSON --------------------------------------------------------


class _Marks:
    """What making one top-level value safe found: something converted or truncated; and, shared by
    the record's values, the JSON Pointers of non-finite floats and the containers already met."""

    __slots__ = ("converted", "non_finite", "seen", "truncated")

    def __init__(self, non_finite: list[tuple[str, str]], seen: Seen) -> None:
        self.converted = False
        self.truncated = False
        self.non_finite = non_finite
        self.seen = seen


def is_plain(record: Mapping[Any, Any]) -> bool:
    """Whether every value of ``record`` is a plain ``str``, ``int`` (64-bit), ``bool``, ``None`` or
    finite ``float``: such a record is written as it is, with nothing to note."""
    for value in record.values():
        kind = type(value)
        if kind is float:
            if value - value != 0.0:  # NaN and infinities
                return False
        elif kind is int:
            if not _INT64_MIN <= value <= _UINT64_MAX:
                return False
        elif kind is not str and kind is not bool and value is not None:
            return False
    return True


def json_safe_record(record: Mapping[Any, Any], *, always_note: bool = False) -> dict[str, Any]:
    """``record`` as data orjson writes as strict JSON with nothing lost silently, plus ``NOTE_KEY``.

    Non-finite floats become ``None`` (their JSON Pointer goes under the note's ``non_finite``, in its
    ``"nan"``, ``"inf"`` or ``"neg_inf"`` list); integers beyond 64 bits and objects JSON can't hold
    become their ``str()``; lone surrogates become ``\\udXXX`` text; keys become unique strings;
    containers deeper than ``MAX_DEPTH`` become a marker string.

    A key is listed under ``"converted"`` when it or anything inside its value was written as text (a
    non-string or colliding key, a set, bytes, a huge int, a lone surrogate), under ``"truncated"`` when
    something in its value was cut short. The note (``empty_note``'s shape, before ``timestamp``) is
    added when there is something to note, when ``record`` holds a note dict of its own (the logger's
    own records: its ``origin`` and lists are kept), or always with ``always_note`` (every JSONL record
    carries it: it is how a line says which contract it follows).
    """
    out: dict[str, Any] = {}
    converted: list[str] = []
    truncated: list[str] = []
    found: list[tuple[str, str]] = []
    seen = Seen()
    counters: dict[str, int] = {}
    for key, item in _items(record):
        marks = _Marks(found, seen)
        name = unique_key(out, key, counters)
        out[name] = _safe(item, 0, marks, "/" + pointer_token(name))
        if marks.converted or name != key:
            converted.append(name)
        if marks.truncated:
            truncated.append(name)
    given = out.get(NOTE_KEY)
    if isinstance(given, dict):
        # A note the chain set itself (the logger's own records; or this function's output, written
        # again): one note. Its own entries were walked as values, so they are kept, not re-listed.
        converted = [key for key in converted if key != NOTE_KEY]
        truncated = [key for key in truncated if key != NOTE_KEY]
        found = [(at, text) for at, text in found if not at.startswith("/" + NOTE_KEY + "/")]
    elif not (converted or truncated or found or always_note):
        return out
    timestamp = out.pop("timestamp", _ABSENT)
    note = merged_note(given if isinstance(given, dict) else None, converted, truncated, found)
    if isinstance(given, dict):
        del out[NOTE_KEY]  # written again below: the note is always just before the timestamp
    out[NOTE_KEY if isinstance(given, dict) else unique_key(out, NOTE_KEY)] = note
    if timestamp is not _ABSENT:
        out["timestamp"] = timestamp
    return out


_ABSENT = object()
_DEEP = f"<truncated: nested deeper than {MAX_DEPTH} levels>"


def _safe(value: Any, depth: int, marks: _Marks, pointer: str) -> Any:
    marks.seen.count += 1
    if isinstance(value, bool) or value is None:
        return value
    # A subclass of str, float or int is read through the base type's own slot: its value, never
    # its (possibly raising) __str__, __float__ or __int__.
    if isinstance(value, str):
        if isinstance(value, Truncated):
            marks.truncated = True
        elif isinstance(value, Converted):
            marks.converted = True
        return _clean_text(str.__str__(value), marks)
    if isinstance(value, float):
        if math.isfinite(value):
            return float.__float__(value)
        marks.non_finite.append((pointer, non_finite_text(value)))
        return None
    if isinstance(value, int):
        if _INT64_MIN <= value <= _UINT64_MAX:
            return int.__int__(value)
        marks.converted = True
        return int_text(value)
    if isinstance(value, Mapping | list | tuple):
        if depth >= MAX_DEPTH:
            marks.truncated = True
            return _DEEP
        return _safe_container(value, depth, marks, pointer)
    marks.converted = True
    return _clean_text(value_text(value), marks)


def _safe_container(value: Any, depth: int, marks: _Marks, pointer: str) -> Any:
    """A mapping, list or tuple made safe, or what it was made before in this record (a shared one:
    its notes are repeated under this key, its non-finite pointers under this path)."""
    again = marks.seen.again(value)
    if isinstance(again, Truncated):
        marks.truncated = True
        return str(again)
    if again is not None:
        made, converted, truncated, first, found = again
        marks.converted |= converted
        marks.truncated |= truncated
        marks.non_finite.extend((pointer + at[len(first) :], text) for at, text in found)
        return made
    outer = marks.converted, marks.truncated
    marks.converted = marks.truncated = False
    start = len(marks.non_finite)
    opened = marks.seen.open(value)
    if isinstance(value, Mapping):
        result: Any = _safe_mapping(value, depth + 1, marks, pointer)
    else:
        result = [_safe(item, depth + 1, marks, f"{pointer}/{i}") for i, item in enumerate(value)]
    entry = (result, marks.converted, marks.truncated, pointer, marks.non_finite[start:])
    marks.seen.close(value, entry, opened)
    marks.converted |= outer[0]
    marks.truncated |= outer[1]
    return result


def _items(value: Mapping[Any, Any]) -> list[tuple[Any, Any]]:
    try:
        return list(value.items())
    except Exception:
        return [("<unreadable mapping>", Converted(safe_str(value)))]


def _safe_mapping(value: Mapping[Any, Any], depth: int, marks: _Marks, pointer: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    counters: dict[str, int] = {}
    for key, item in _items(value):
        name = unique_key(out, key, counters)
        if name != key:
            marks.converted = True
        out[name] = _safe(item, depth, marks, f"{pointer}/{pointer_token(name)}")
    return out


def unique_key(taken: Mapping[str, Any], key: object, counters: dict[str, int] | None = None) -> str:
    """``key`` as a string not yet in ``taken``: ``1`` and ``"1"`` become ``"1"`` and ``"1#2"``
    (``counters``: see ``speedtronic.record.free_name``)."""
    return free_name(taken, key_text(key), counters)


def key_text(key: object) -> str:
    """A key as the record writes it: a string as it is (a ``str`` subclass, a ``str`` enum, by its
    string value, as a value is written: so ``Redact`` judges the key its user wrote), a number as
    JSON writes it, anything else by its ``str()``; lone surrogates as ``\\udXXX`` text."""
    return _clean_text(key if type(key) is str else _key_text(key), None)


def _key_text(key: object) -> str:
    if isinstance(key, str):
        return str.__str__(key)
    if isinstance(key, float) and not math.isfinite(key):
        return non_finite_text(key)
    if isinstance(key, int) and not isinstance(key, bool):
        return int_text(key)
    return safe_str(key)


def _clean_text(text: str, marks: _Marks | None) -> str:
    if _SURROGATE.search(text) is None:
        return text
    if marks is not None:
        marks.converted = True
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
