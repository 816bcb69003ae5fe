"""Text-line formatting: keys and values as ``key=value`` tokens that can never break a line.

Strings are bare when they hold only safe characters, otherwise double-quoted with every character
that could end a line, fake a field or drive a terminal escaped: C0 and C1 controls (newline, CR, ESC
and the rest), DEL, U+2028/U+2029, bidi overrides, lone surrogates, ``"`` and ``\\``. So one event is
one physical line however the text is read (bytes, text mode, ``str.splitlines()``), and ``=``, ``|``
and spaces inside a value stay inside its quotes (CWE-117).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from speedtronic.processors.convert import int_text, safe_str

__all__ = [
    "fields_template",
    "fill_numbers",
    "format_each_utf8",
    "format_fields",
    "format_fields_utf8",
    "format_key",
    "format_value",
    "quote",
]

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


def _format_float(value: float) -> str:
    text = orjson.dumps(value)
    return repr(value) if text == b"null" else text.decode()  # NaN and infinities: nan, inf, -inf


def _format_int(value: int) -> str:
    return int_text(value)


def _format_str(value: str) -> str:
    return quote(value)


def _format_other(value: Any) -> str:
    return quote(safe_str(value))


_FORMATTERS: dict[type, Callable[[Any], str]] = {
    float: _format_float,
    int: _format_int,
    str: _format_str,
    bool: str,
    type(None): str,
}


def format_value(value: Any) -> str:
    """Floats as JSON writes them (shortest round-trip: ``0.0003``, ``1e-7``) or ``nan``/``inf``/``-inf``;
    ints in decimal; strings quoted when unsafe."""
    return _FORMATTERS.get(type(value), _format_other)(value)


_KEY_CACHE_SIZE = 4096
_key_tokens: dict[object, str] = {}


def format_key(key: object) -> str:
    """A key as a token: bare when safe, quoted otherwise; non-string keys by their ``str()``.

    Keys repeat from event to event, so string keys' tokens are cached (up to 4,096 of them).
    """
    token = _key_tokens.get(key) if type(key) is str else None
    if token is None:
        token = quote(key if type(key) is str else safe_str(key))
        if type(key) is str and len(_key_tokens) < _KEY_CACHE_SIZE:
            _key_tokens[key] = token
    return token


def format_fields(event_dict: Mapping[Any, Any]) -> str:
    """`` key=value`` for every key but ``"event"``, each with a leading space, in order."""
    return format_fields_utf8(event_dict).decode()


def format_fields_utf8(event_dict: Mapping[Any, Any]) -> bytes:
    """``format_fields``, UTF-8 encoded: what a text file gets.

    Most events are numbers only, under keys seen before (a ``train_step``): those are written in one
    go (``fill_numbers``) into a template cached per key sequence (``fields_template``). Anything else
    (a string, NaN, a huge int, ``"event"`` not first) takes ``_format_each``; both write the same text.
    """
    line = fill_numbers(fields_template(tuple(event_dict)), event_dict)
    return line if line is not None else format_each_utf8(event_dict)


def fields_template(shape: tuple[Any, ...]) -> bytes:
    """``b" step=%s loss=%s"`` for the key sequence ``("event", "step", "loss")``, cached; empty when
    ``"event"`` isn't first (such events are formatted value by value)."""
    template = _templates.get(shape)
    return template if template is not None else _template_for(shape)


def fill_numbers(template: bytes, event_dict: Mapping[Any, Any]) -> bytes | None:
    """``template % values`` when every value but the event's name is an int or a finite float, each
    written by orjson (one call for all of them, as bytes); ``None`` for any other event."""
    if not template:
        return None
    values = list(event_dict.values())
    del values[0]  # the event's name: first, or there would be no template
    try:
        numbers = orjson.dumps(values, option=orjson.OPT_PASSTHROUGH_SUBCLASS)[1:-1]
    except TypeError:  # a type orjson doesn't write natively, or an int beyond 64 bits
        return None
    # Only ints and finite floats leave nothing here (strings have quotes, NaN becomes null).
    if numbers.translate(None, _NUMBER_BYTES):
        return None
    return template % tuple(numbers.split(b","))


def format_each_utf8(event_dict: Mapping[Any, Any]) -> bytes:
    """``format_fields`` one value at a time, UTF-8 encoded: for events ``fill_numbers`` can't write."""
    return _format_each(event_dict).encode("utf-8", "backslashreplace")


_NUMBER_BYTES = b"0123456789.,+-e"
_TEMPLATE_CACHE_SIZE = 1024
_templates: dict[tuple[Any, ...], bytes] = {}


def _template_for(shape: tuple[Any, ...]) -> bytes:
    """``b" step=%s loss=%s"`` for ``("event", "step", "loss")``; empty when ``"event"`` isn't first."""
    if not shape or shape[0] != "event" or "event" in shape[1:]:
        return b""
    text = "".join(f" {format_key(key)}=".replace("%", "%%") + "%s" for key in shape[1:])
    template = text.encode("utf-8", "backslashreplace")
    if len(_templates) < _TEMPLATE_CACHE_SIZE and all(type(key) is str for key in shape):
        _templates[shape] = template
    return template


def _format_each(event_dict: Mapping[Any, Any]) -> str:
    """``format_fields``, one value at a time: the common types inline, the rest by ``format_value``."""
    parts: list[str] = []
    safe = _SAFE.fullmatch
    prefixes = _key_prefixes
    for key, value in event_dict.items():
        if key == "event":
            continue
        text = value if type(value) is str and safe(value) else format_value(value)
        prefix = prefixes.get(key) if type(key) is str else None
        if prefix is None:
            prefix = f" {format_key(key)}="
            if type(key) is str and len(prefixes) < _KEY_CACHE_SIZE:
                prefixes[key] = prefix
        parts += (prefix, text)
    return "".join(parts)


_key_prefixes: dict[str, str] = {}
