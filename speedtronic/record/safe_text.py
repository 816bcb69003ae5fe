"""Text of any object, never raising: the low helpers every layer uses to show a value or an error."""

from __future__ import annotations

from typing import Any

__all__ = ["int_text", "safe_repr", "safe_str", "value_text"]


def safe_str(value: object) -> str:
    """``str(value)``, or a placeholder naming the type when ``__str__`` itself fails."""
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__qualname__}>"


def safe_repr(value: object) -> str:
    """``repr(value)``, or a placeholder naming the type when ``__repr__`` itself fails."""
    try:
        return repr(value)
    except Exception:
        return f"<unprintable {type(value).__qualname__}>"


def value_text(value: object) -> str:
    """The text a value JSON can't hold is written as: an exception as ``ZeroDivisionError: division by
    zero`` (the last line of its traceback: its type is part of what it says); an object that prints
    only Python's default ``<... object at 0x7f...>`` as its type without the address, which changes
    from run to run (``<wandb.sdk.data_types.image.Image object>``); anything else its ``str()``
    (``safe_str``)."""
    if isinstance(value, BaseException):
        text = safe_str(value)
        return f"{type(value).__name__}: {text}" if text else type(value).__name__
    kind = type(value)
    if kind.__str__ is _OBJECT_STR and kind.__repr__ is _OBJECT_REPR:
        module = kind.__module__
        name = kind.__qualname__ if module in ("builtins", None) else f"{module}.{kind.__qualname__}"
        return f"<{name} object>"
    return safe_str(value)


_OBJECT_STR: Any = object.__str__
_OBJECT_REPR: Any = object.__repr__


def int_text(value: int) -> str:
    """Decimal text of an int, also beyond Python's int-to-str digit limit."""
    try:
        return str(value)
    except ValueError:
        return f"<int of {value.bit_length()} bits>"
