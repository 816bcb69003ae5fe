"""Checks of an option's value where it enters, each a ``ValueError`` naming the option.

A queue size, a cadence, a timeout: the stages, the background hooks and the integrations check their
numbers with these, so one rule says what a count or a number of seconds may be.
"""

from __future__ import annotations

import urllib.parse
from typing import TypeGuard

__all__ = ["check_count", "check_seconds", "is_http_url", "is_seconds"]


def check_count(name: str, value: object) -> None:
    """``ValueError`` naming ``name`` unless ``value`` is an int >= 1 (a queue size, a cadence)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def is_seconds(value: object) -> bool:
    """Whether ``value`` is a finite number of seconds > 0 (below 1e9: inf and 1e300 are not)."""
    return not isinstance(value, bool) and isinstance(value, int | float) and 0 < value < 1e9


def check_seconds(name: str, value: object) -> None:
    """``ValueError`` naming ``name`` unless ``value`` is a finite number of seconds > 0 (a timeout)."""
    if not is_seconds(value):
        raise ValueError(f"{name} must be a number of seconds > 0 and finite, got {value!r}")


def is_http_url(url: object) -> TypeGuard[str]:
    """Whether ``url`` is an ``http`` or ``https`` URL with a host (and a port that is a number): where a
    webhook or an OTLP/HTTP exporter can send."""
    if not isinstance(url, str):
        return False
    try:
        parts = urllib.parse.urlsplit(url)
        _ = parts.port  # raises ValueError for a port that is no number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)
