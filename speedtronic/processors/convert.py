"""Value conversion: the one place that turns tensors, numpy values and odd objects into plain data.

Two conversions live here, each used by exactly one processor:
- ``to_python`` (``ConvertValues``): tensors and numpy values become Python numbers and lists. It runs
  only for events that pass the cadence, so skipped steps never force a device sync.
- ``json_safe_record`` (``JSONLRenderer``'s slow path): anything becomes strict-JSON-ready data.

A value that can't be written as itself is replaced by a marker string: ``Converted`` (written as its
text: bytes, a set, NaN, an int beyond 64 bits) or ``Truncated`` (cut short: too long, too deep, too
many elements). ``json_safe_record`` lists the top-level keys holding either in the record's
``"_speedtronic"`` field, so a reader can tell a marker from a string the trainer logged.
"""

from __future__ import annotations

import itertools
import math
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "MAX_ELEMENTS",
    "NOTE_KEY",
    "Converted",
    "Truncated",
    "int_text",
    "json_safe_record",
    "non_finite_text",
    "safe_str",
    "to_python",
    "truncate",
    "unique_key",
]

MAX_DEPTH = 32
"""Containers nested deeper than this are cut (this also ends circular references)."""

MAX_ELEMENTS = 1024
"""Tensors and arrays with more elements are summarised instead of listed."""

NOTE_KEY = "_speedtronic"
"""The JSONL field naming what was converted or truncated: ``{"converted": [...], "truncated": [...]}``."""

_PLAIN: frozenset[type] = frozenset({str, int, float, bool, type(None)})
_INT64_MIN = -(2**63)
_UINT64_MAX = 2**64 - 1
_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}
_SURROGATE = re.compile("[\ud800-\udfff]")


def safe_str(value: object) -> str:
    """``str(value)``, or a placeholder naming the type when ``__str__`` itself fails."""
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__qualname__}>"


class Converted(str):
    """A value written as its text because JSON can't hold it (``b"\\x00"``, ``{1, 2}``, NaN...)."""


class Truncated(str):
    """A marker standing in for a value cut short: too long for a line, too deep, too many elements."""


def truncate(value: Any, keep: int) -> Truncated:
    """``<truncated: str of 3,000,000 chars; first 20 chars: xxxxxxxxxxxxxxxxxxxx>``.

    Keeps the first ``keep`` characters of the value's text; a container's text is made from its first
    ``keep`` items only, so a multi-megabyte list is never turned into text whole.
    """
    what = _describe(value)
    if keep <= 0:
        return Truncated(f"<truncated: {what}>")
    if isinstance(value, str):
        head = value[:keep]
    elif isinstance(value, Mapping):
        head = safe_str(dict(itertools.islice(value.items(), keep)))[:keep]
    elif isinstance(value, list | tuple | set | frozenset):
        head = safe_str(list(itertools.islice(value, keep)))[:keep]
    else:
        head = safe_str(value)[:keep]
    return Truncated(f"<truncated: {what}; first {len(head):,} chars: {head}>")


def _describe(value: Any) -> str:
    if isinstance(value, str):
        return f"str of {len(value):,} chars"
    if isinstance(value, bytes | bytearray):
        return f"{type(value).__name__} of {len(value):,} bytes"
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        return f"{type(value).__name__} of {len(value):,} items"
    return type(value).__qualname__


def int_text(value: int) -> str:
    """Decimal text of an int, also beyond Python's int-to-str digit limit."""
    try:
        return str(value)
    except ValueError:
        return f"<int of {value.bit_length()} bits>"


# -- to_python: device values to Python values -------------------------------------------------

_Converter = Callable[[Any, int], Any]
_converters: dict[type, _Converter] = {}


def to_python(value: Any, depth: int = 0) -> Any:
    """Return ``value`` with tensors and numpy values turned into Python numbers and lists."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    convert = _converters.get(kind)
    if convert is None:
        convert = _converters[kind] = _converter_for(kind)
    return convert(value, depth)


def _converter_for(kind: type) -> _Converter:
    torch = sys.modules.get("torch")
    if torch is not None and issubclass(kind, torch.Tensor):
        return _tensor
    numpy = sys.modules.get("numpy")
    if numpy is not None and issubclass(kind, numpy.generic):
        return _numpy_scalar
    if numpy is not None and issubclass(kind, numpy.ndarray):
        return _numpy_array
    if issubclass(kind, Mapping):
        return _mapping
    if issubclass(kind, (list, tuple)):
        return _sequence
    return _unchanged


def _unchanged(value: Any, depth: int) -> Any:
    return value


def _summary(kind: str, shape: Any, dtype: object) -> Truncated:
    return Truncated(f"<{kind} shape={list(shape)!r} dtype={dtype}>")


def _tensor(value: Any, depth: int) -> Any:
    try:
        value = value.detach()
        if value.dim() == 0:
            return value.item()
        if value.numel() > MAX_ELEMENTS:
            return _summary("tensor", value.shape, value.dtype)
        return value.cpu().tolist()
    except Exception:
        return Converted(safe_str(value))


def _numpy_scalar(value: Any, depth: int) -> Any:
    try:
        return value.item()
    except Exception:
        return Converted(safe_str(value))


def _numpy_array(value: Any, depth: int) -> Any:
    if value.size > MAX_ELEMENTS:
        return _summary("ndarray", value.shape, value.dtype)
    try:
        return value.tolist()
    except Exception:
        return Converted(safe_str(value))


def _mapping(value: Mapping[Any, Any], depth: int) -> Any:
    if depth >= MAX_DEPTH:
        return value
    return {key: to_python(item, depth + 1) for key, item in value.items()}


def _sequence(value: list[Any] | tuple[Any, ...], depth: int) -> Any:
    if depth >= MAX_DEPTH:
        return value
    return [to_python(item, depth + 1) for item in value]


# -- json_safe: anything to strict JSON --------------------------------------------------------


class _Marks:
    """Whether the value being made safe held something converted or truncated."""

    __slots__ = ("converted", "truncated")

    def __init__(self) -> None:
        self.converted = False
        self.truncated = False


def json_safe_record(record: Mapping[Any, Any]) -> dict[str, Any]:
    """``record`` as data orjson writes as strict JSON with nothing lost silently, plus ``NOTE_KEY``.

    Non-finite floats become ``"NaN"``/``"Infinity"``/``"-Infinity"``; integers beyond 64 bits and
    objects JSON can't hold become their ``str()``; lone surrogates become ``\\udXXX`` text; keys
    become unique strings; containers deeper than ``MAX_DEPTH`` become a marker string.

    A key is listed under ``"converted"`` when it or anything inside its value was written as text (a
    non-string or colliding key, NaN, a set, bytes, a huge int, a lone surrogate), under
    ``"truncated"`` when something in its value was cut short. The note goes before ``timestamp``.
    """
    out: dict[str, Any] = {}
    converted: list[str] = []
    truncated: list[str] = []
    for key, item in _items(record):
        marks = _Marks()
        name = unique_key(out, key)
        out[name] = _safe(item, 0, marks)
        if marks.converted or name != key:
            converted.append(name)
        if marks.truncated:
            truncated.append(name)
    if converted or truncated:
        timestamp = out.pop("timestamp", _ABSENT)
        note = {"converted": converted, "truncated": truncated}
        out[unique_key(out, NOTE_KEY)] = {k: v for k, v in note.items() if v}
        if timestamp is not _ABSENT:
            out["timestamp"] = timestamp
    return out


_ABSENT = object()
_DEEP = f"<truncated: nested deeper than {MAX_DEPTH} levels>"


def _safe(value: Any, depth: int, marks: _Marks) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        if isinstance(value, Truncated):
            marks.truncated = True
        elif isinstance(value, Converted):
            marks.converted = True
        return _clean_text(str(value), marks)
    if isinstance(value, float):
        if math.isfinite(value):
            return float(value)
        marks.converted = True
        return non_finite_text(value)
    if isinstance(value, int):
        if _INT64_MIN <= value <= _UINT64_MAX:
            return int(value)
        marks.converted = True
        return int_text(value)
    if isinstance(value, Mapping | list | tuple) and depth >= MAX_DEPTH:
        marks.truncated = True
        return _DEEP
    if isinstance(value, Mapping):
        return _safe_mapping(value, depth + 1, marks)
    if isinstance(value, list | tuple):
        return [_safe(item, depth + 1, marks) for item in value]
    marks.converted = True
    return _clean_text(safe_str(value), marks)


def _items(value: Mapping[Any, Any]) -> list[tuple[Any, Any]]:
    try:
        return list(value.items())
    except Exception:
        return [("<unreadable mapping>", Converted(safe_str(value)))]


def _safe_mapping(value: Mapping[Any, Any], depth: int, marks: _Marks) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in _items(value):
        name = unique_key(out, key)
        if name != key:
            marks.converted = True
        out[name] = _safe(item, depth, marks)
    return out


def unique_key(taken: Mapping[str, Any], key: object) -> str:
    """``key`` as a string not yet in ``taken``: ``1`` and ``"1"`` become ``"1"`` and ``"1#2"``."""
    text = _clean_text(key if type(key) is str else _key_text(key), _Marks())
    candidate, n = text, 1
    while candidate in taken:
        n += 1
        candidate = f"{text}#{n}"
    return candidate


def _key_text(key: object) -> str:
    if isinstance(key, float) and not math.isfinite(key):
        return non_finite_text(key)
    if isinstance(key, int) and not isinstance(key, bool):
        return int_text(key)
    return safe_str(key)


def non_finite_text(value: float) -> str:
    """How strict JSON records a non-finite float: ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``."""
    return _NON_FINITE.get(value, "NaN")


def _clean_text(text: str, marks: _Marks) -> str:
    if _SURROGATE.search(text) is None:
        return text
    marks.converted = True
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
