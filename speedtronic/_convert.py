"""Value conversion: the one place that turns tensors, numpy values and odd objects into plain data.

Two conversions live here, each used by exactly one processor:
- ``to_python`` (``ConvertValues``): tensors and numpy values become Python numbers and lists. It runs
  only for events that pass the cadence, so skipped steps never force a device sync.
- ``json_safe`` (``JSONLRenderer``'s slow path): anything becomes strict-JSON-ready data.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_ELEMENTS", "int_text", "json_safe", "safe_str", "to_python"]

MAX_DEPTH = 32
"""Containers nested deeper than this are cut (this also ends circular references)."""

MAX_ELEMENTS = 1024
"""Tensors and arrays with more elements are summarised instead of listed."""

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


def _summary(kind: str, shape: Any, dtype: object) -> str:
    return f"<{kind} shape={list(shape)!r} dtype={dtype}>"


def _tensor(value: Any, depth: int) -> Any:
    try:
        value = value.detach()
        if value.dim() == 0:
            return value.item()
        if value.numel() > MAX_ELEMENTS:
            return _summary("tensor", value.shape, value.dtype)
        return value.cpu().tolist()
    except Exception:
        return safe_str(value)


def _numpy_scalar(value: Any, depth: int) -> Any:
    try:
        return value.item()
    except Exception:
        return safe_str(value)


def _numpy_array(value: Any, depth: int) -> Any:
    if value.size > MAX_ELEMENTS:
        return _summary("ndarray", value.shape, value.dtype)
    try:
        return value.tolist()
    except Exception:
        return safe_str(value)


def _mapping(value: Mapping[Any, Any], depth: int) -> Any:
    if depth >= MAX_DEPTH:
        return value
    return {key: to_python(item, depth + 1) for key, item in value.items()}


def _sequence(value: list[Any] | tuple[Any, ...], depth: int) -> Any:
    if depth >= MAX_DEPTH:
        return value
    return [to_python(item, depth + 1) for item in value]


# -- json_safe: anything to strict JSON --------------------------------------------------------


def json_safe(value: Any, depth: int = 0) -> Any:
    """Return ``value`` as data orjson writes as strict JSON with nothing lost silently.

    Non-finite floats become ``"NaN"``/``"Infinity"``/``"-Infinity"``; integers beyond 64 bits and
    objects JSON can't hold become their ``str()``; lone surrogates become ``\\udXXX`` text; keys
    become unique strings; containers deeper than ``MAX_DEPTH`` become a marker string.
    """
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return _clean_text(str(value))
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else _non_finite(value)
    if isinstance(value, int):
        return int(value) if _INT64_MIN <= value <= _UINT64_MAX else int_text(value)
    if isinstance(value, Mapping | list | tuple) and depth >= MAX_DEPTH:
        return f"<truncated: nested deeper than {MAX_DEPTH} levels>"
    if isinstance(value, Mapping):
        return json_safe_mapping(value, depth + 1)
    if isinstance(value, list | tuple):
        return [json_safe(item, depth + 1) for item in value]
    return _clean_text(safe_str(value))


def json_safe_mapping(value: Mapping[Any, Any], depth: int = 0) -> dict[str, Any]:
    """A mapping with unique string keys and ``json_safe`` values."""
    out: dict[str, Any] = {}
    try:
        items = list(value.items())
    except Exception:
        return {"<unreadable mapping>": safe_str(value)}
    for key, item in items:
        out[unique_key(out, key)] = json_safe(item, depth)
    return out


def unique_key(taken: Mapping[str, Any], key: object) -> str:
    """``key`` as a string not yet in ``taken``: ``1`` and ``"1"`` become ``"1"`` and ``"1#2"``."""
    text = _clean_text(key if type(key) is str else _key_text(key))
    candidate, n = text, 1
    while candidate in taken:
        n += 1
        candidate = f"{text}#{n}"
    return candidate


def _key_text(key: object) -> str:
    if isinstance(key, float) and not math.isfinite(key):
        return _non_finite(key)
    if isinstance(key, int) and not isinstance(key, bool):
        return int_text(key)
    return safe_str(key)


def _non_finite(value: float) -> str:
    return _NON_FINITE.get(value, "NaN")


def _clean_text(text: str) -> str:
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
