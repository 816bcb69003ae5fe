"""Deprecated import path: the text line's value formatting is ``speedtronic.record.text``."""

from speedtronic.record.text import (
    DEFAULT_FLOAT_DIGITS,
    ValueFormat,
    format_fields,
    format_key,
    format_value,
    quote,
)

__all__ = ["DEFAULT_FLOAT_DIGITS", "ValueFormat", "format_fields", "format_key", "format_value", "quote"]
