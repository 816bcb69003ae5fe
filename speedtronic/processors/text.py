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
from collections.abc import Container, Mapping
from typing import Any

from speedtronic.processors.convert import int_text, safe_str

__all__ = ["DEFAULT_FLOAT_DIGITS", "format_fields", "format_float", "format_key", "format_value", "quote"]

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


def format_float(value: float, digits: int | None = DEFAULT_FLOAT_DIGITS) -> str:
    """``value`` with ``digits`` significant digits (``0.000975``, ``3.224``, ``1e-07``), a number at or
    beyond ``10**digits`` rounded to an integer (``20134``), or every digit (``repr``) when ``digits``
    is ``None``; ``nan``, ``inf``, ``-inf`` for the non-finite."""
    if not math.isfinite(value):
        return repr(float(value))
    if digits is None:
        return repr(float(value))
    if abs(value) >= 10**digits:
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


def format_value(value: Any, digits: int | None = DEFAULT_FLOAT_DIGITS) -> str:
    """A value as a token: floats by ``format_float``, ints in decimal, ``True``/``None`` as such,
    strings (and anything else, by its ``str()``) quoted when unsafe."""
    kind = type(value)
    if kind is str:
        return quote(value)
    if kind is float:
        return format_float(value, digits)
    if kind is int:
        return int_text(value)
    if kind is bool or value is None:
        return str(value)
    return quote(safe_str(value))


def format_key(key: object) -> str:
    """A key as a token: bare when safe, quoted otherwise; non-string keys by their ``str()``."""
    return quote(key if type(key) is str else safe_str(key))


def format_fields(
    event_dict: Mapping[Any, Any],
    skip: Container[Any] = ("event",),
    digits: int | None = DEFAULT_FLOAT_DIGITS,
) -> str:
    """`` key=value`` for every key not in ``skip``, each with a leading space, in order."""
    return "".join(
        f" {format_key(key)}={format_value(value, digits)}"
        for key, value in event_dict.items()
        if key not in skip
    )
