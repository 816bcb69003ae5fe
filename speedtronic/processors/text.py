"""Text-line formatting: keys and values as ``key=value`` tokens that can never break a line.

Strings are bare when they hold only safe characters, otherwise double-quoted with every character
that could end a line, fake a field or drive a terminal escaped: C0 and C1 controls (newline, CR, ESC
and the rest), DEL, U+2028/U+2029, bidi overrides, lone surrogates, ``"`` and ``\\``. So one event is
one physical line however the text is read (bytes, text mode, ``str.splitlines()``), and ``=``, ``|``
and spaces inside a value stay inside its quotes (CWE-117).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Container, Mapping
from typing import Any

from speedtronic.processors.convert import int_text, safe_str

__all__ = [
    "DEFAULT_FLOAT_DIGITS",
    "ValueFormat",
    "format_fields",
    "format_float",
    "format_key",
    "format_value",
    "quote",
]

DEFAULT_FLOAT_DIGITS = 4
"""Significant digits of a float in the text line (``lr=0.000975``, ``loss=3.224``); the JSONL record
keeps every digit."""

_SAFE = re.compile(r"[A-Za-z0-9_.,:/@%+\-\[\]()<>]+")
_UNSAFE = re.compile('[\\\\"\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]')
_NAMED = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def quote(text: str) -> str:
    """``text`` bare when safe, else double-quoted with every line-breaking character escaped."""
    if _SAFE.fullmatch(text):
        return text
    return '"' + _UNSAFE.sub(_escape, text) + '"'


class ValueFormat:
    """Formats values as text-line tokens, floats with ``digits`` significant digits (decided here,
    once): ``0.000975``, ``3.224``, ``1e-07``, ``1.0``; a float at or beyond ``10**digits`` rounded to
    a whole number (``20134.0``); every digit (``repr``) with ``digits=None``; ``nan``, ``inf``,
    ``-inf``. A float always reads as one (a point or an exponent), so it is told from an int.
    Ints in decimal, ``True``/``None`` as such, strings (and anything else, by its ``str()``) quoted
    when unsafe. Keys repeat from event to event, so each distinct string key is quoted once."""

    __slots__ = ("_digits", "_limit", "_quote_key", "_spec")

    def __init__(self, digits: int | None = DEFAULT_FLOAT_DIGITS) -> None:
        if digits is not None and (isinstance(digits, bool) or not isinstance(digits, int) or digits < 1):
            raise ValueError(f"float_digits must be an int >= 1 or None, got {digits!r}")
        self._digits = digits
        self._spec = f".{digits}g" if digits is not None else ""
        self._limit = 10.0**digits if digits is not None else 0.0  # 0: every float takes repr
        self._quote_key: Callable[[str], str] = functools.lru_cache(maxsize=4096)(quote)

    def key(self, key: object) -> str:
        """A key as a token: bare when safe, quoted otherwise; non-string keys by their ``str()``."""
        return self._quote_key(key) if type(key) is str else quote(safe_str(key))

    def float(self, value: float) -> str:
        if -self._limit < value < self._limit:  # finite and not huge (NaN compares false)
            text = format(value, self._spec)
        elif self._digits is not None and math.isfinite(value):
            text = f"{value:.0f}"
        else:
            return repr(float(value))
        return text if "." in text or "e" in text else text + ".0"  # a float reads as one: 1.0

    def __call__(self, value: Any) -> str:
        kind = type(value)
        if kind is float:
            return self.float(value)
        if kind is int:
            return int_text(value)
        if kind is str:
            return quote(value)
        if kind is bool or value is None:
            return str(value)
        return quote(safe_str(value))

    def fields(self, event_dict: Mapping[Any, Any], skip: Container[Any] = ("event",)) -> str:
        """`` key=value`` for every key not in ``skip``, each with a leading space, in order.

        The same tokens as ``key()`` and ``__call__``; floats and ints, most of a training event, are
        formatted here without a call each."""
        quote_key, spec, limit = self._quote_key, self._spec, self._limit
        parts = []
        for key, value in event_dict.items():
            if key in skip:
                continue
            kind = type(value)
            if kind is float and -limit < value < limit:
                text = format(value, spec)
                if "." not in text and "e" not in text:
                    text += ".0"
            elif kind is int and -_SMALL < value < _SMALL:
                text = str(value)
            else:
                text = self(value)
            token = quote_key(key) if type(key) is str else quote(safe_str(key))
            parts.append(f" {token}={text}")
        return "".join(parts)


_SMALL = 10**18  # ints below this have fewer digits than Python's int-to-str limit
_DEFAULT = ValueFormat()


def format_float(value: float, digits: int | None = DEFAULT_FLOAT_DIGITS) -> str:
    """A float as the text line writes it (see ``ValueFormat``)."""
    return (_DEFAULT if digits == DEFAULT_FLOAT_DIGITS else ValueFormat(digits)).float(value)


def format_value(value: Any, digits: int | None = DEFAULT_FLOAT_DIGITS) -> str:
    """A value as the text line writes it (see ``ValueFormat``)."""
    return (_DEFAULT if digits == DEFAULT_FLOAT_DIGITS else ValueFormat(digits))(value)


def format_key(key: object) -> str:
    """A key as a token: bare when safe, quoted otherwise; non-string keys by their ``str()``."""
    return quote(key if type(key) is str else safe_str(key))


def format_fields(
    event_dict: Mapping[Any, Any],
    skip: Container[Any] = ("event",),
    digits: int | None = DEFAULT_FLOAT_DIGITS,
) -> str:
    """`` key=value`` for every key not in ``skip``, each with a leading space, in order."""
    return (_DEFAULT if digits == DEFAULT_FLOAT_DIGITS else ValueFormat(digits)).fields(event_dict, skip)
