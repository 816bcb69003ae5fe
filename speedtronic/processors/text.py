"""Text-line formatting: keys and values as ``key=value`` tokens that can never break a line.

Strings are bare when they hold only safe characters, otherwise double-quoted with every character
that could end a line, fake a field or drive a terminal escaped: C0 and C1 controls (newline, CR, ESC
and the rest), DEL, U+2028/U+2029, bidi overrides, lone surrogates, ``"`` and ``\\``. So one event is
one physical line however the text is read (bytes, text mode, ``str.splitlines()``), and ``=``, ``|``
and spaces inside a value stay inside its quotes (CWE-117).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Container, Mapping
from typing import Any

from speedtronic.processors.convert import int_text, safe_str

__all__ = [
    "DEFAULT_FLOAT_DIGITS",
    "ValueFormat",
    "format_fields",
    "format_key",
    "format_value",
    "quote",
]

DEFAULT_FLOAT_DIGITS = 4
"""Significant digits of a float in the text line (``lr=0.000975``, ``loss=3.224``), whole digits
never cut (``tokens_per_s=10556.0``); the JSONL record keeps every digit."""

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
    """Formats values as text-line tokens; the float rule is decided here, once.

    A float is rounded to ``digits`` significant digits, but its whole digits are never cut (a float
    at or beyond ``10**digits`` is rounded to a whole number), then written as Python writes floats
    (``repr``): ``0.000975``, ``3.224``, ``1e-07``, ``1.0``, ``10000.0`` (9999.5), ``10556.0``,
    ``1e+20``; ``nan``, ``inf``, ``-inf``; every digit with ``digits=None``. So a float always reads
    as one (a point or an exponent), told from an int. Ints in decimal, ``True``/``None`` as such,
    strings (and anything else, by its ``str()``) bare when safe, else quoted (``quote``)."""

    __slots__ = ("_by_type", "_digits", "_keys", "_limit", "_spec")

    def __init__(self, digits: int | None = DEFAULT_FLOAT_DIGITS) -> None:
        if digits is not None and (isinstance(digits, bool) or not isinstance(digits, int) or digits < 1):
            raise ValueError(f"float_digits must be an int >= 1 or None, got {digits!r}")
        self._digits = digits
        self._spec = f".{digits}g" if digits is not None else ""
        self._limit = 10.0**digits if digits is not None else math.inf
        self._keys: dict[str, str] = {}  # the same keys come back every event: each is quoted once
        self._by_type: dict[type, Callable[[Any], str]] = {  # the formatter of each plain type
            float: self.float, int: int_text, str: quote, bool: str, type(None): str,
        }  # fmt: skip

    def key(self, key: object) -> str:
        """A key as a token: bare when safe, quoted otherwise; non-string keys by their ``str()``."""
        if type(key) is not str:
            return quote(safe_str(key))
        token = self._keys.get(key)
        if token is None:
            token = quote(key)
            if len(self._keys) < _MAX_KEYS:
                self._keys[key] = token
        return token

    def float(self, value: float) -> str:
        if self._digits is None or not math.isfinite(value):
            return repr(float(value))
        if -self._limit < value < self._limit:
            text = format(value, self._spec)  # what repr() writes too, unless it needs a point or
            return text if "." in text and "e" not in text else repr(float(text))  # drops "e+04"
        return repr(float(round(value)))

    def __call__(self, value: Any) -> str:
        plain = self._by_type.get(type(value))
        if plain is not None:
            return plain(value)
        # subclasses by their base type's own value, never their (possibly raising) __str__
        if isinstance(value, str):
            return quote(str.__str__(value))
        if isinstance(value, float):
            return self.float(float.__float__(value))
        if isinstance(value, int) and not isinstance(value, bool):
            return int_text(int.__int__(value))
        return quote(safe_str(value))

    def fields(self, event_dict: Mapping[Any, Any], skip: Container[Any] = ("event",)) -> str:
        """`` key=value`` for every key not in ``skip``, each with a leading space, in order."""
        parts = []
        for key, value in event_dict.items():
            if key not in skip:
                parts.append(f" {self.key(key)}={self(value)}")
        return "".join(parts)


_MAX_KEYS = 4096  # distinct keys whose tokens a ValueFormat keeps
_DEFAULT = ValueFormat()


def format_value(value: Any, digits: int | None = DEFAULT_FLOAT_DIGITS) -> str:
    """A value as the text line writes it (see ``ValueFormat``)."""
    return (_DEFAULT if digits == DEFAULT_FLOAT_DIGITS else ValueFormat(digits))(value)


def format_key(key: object) -> str:
    """A key as a token: bare when safe, quoted otherwise; non-string keys by their ``str()``."""
    return _DEFAULT.key(key)


def format_fields(
    event_dict: Mapping[Any, Any],
    skip: Container[Any] = ("event",),
    digits: int | None = DEFAULT_FLOAT_DIGITS,
) -> str:
    """`` key=value`` for every key not in ``skip``, each with a leading space, in order."""
    return (_DEFAULT if digits == DEFAULT_FLOAT_DIGITS else ValueFormat(digits)).fields(event_dict, skip)
