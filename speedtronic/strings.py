"""Deprecated import path: the never-raising text of any object is ``speedtronic.record.safe_text``."""

from speedtronic.record.safe_text import int_text, safe_repr, safe_str, value_text

__all__ = ["int_text", "safe_repr", "safe_str", "value_text"]
