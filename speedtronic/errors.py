"""Exceptions and warning classes speedtronic raises, so users can catch, filter or escalate them.

Warnings have their own classes (as pluggy's ``PluggyWarning`` does): a test suite can make hook
failures fatal with ``-W error::speedtronic.HookFailureWarning``.
"""

from __future__ import annotations

import inspect
import os
import warnings

__all__ = [
    "EventPayloadError",
    "EventPayloadWarning",
    "HookError",
    "HookFailureWarning",
    "LoggerClosedError",
    "LoggingFailureWarning",
    "SpeedtronicWarning",
    "check_count",
    "check_seconds",
    "reported",
    "warn_at_caller",
]


class SpeedtronicWarning(UserWarning):
    """Base class of every warning speedtronic issues."""


class HookFailureWarning(SpeedtronicWarning):
    """A hook raised; the run goes on, the failure is counted in ``MetricLogger.hook_errors``."""


class LoggingFailureWarning(SpeedtronicWarning):
    """Writing a record failed (disk full, unserialisable value); the run goes on."""


class LoggerClosedError(RuntimeError):
    """``MetricLogger.emit`` was called after ``close()``; a closed logger never reopens its files."""


class HookError(RuntimeError):
    """A hook failed while the logger runs with ``strict_hooks=True``; ``__cause__`` is the original."""


class EventPayloadWarning(SpeedtronicWarning):
    """A payload does not match its event's ``TypedDict`` (``ValidatePayloads(strict=False)``)."""


class EventPayloadError(ValueError):
    """A payload does not match its event's ``TypedDict`` (``ValidatePayloads(strict=True)``)."""


_INTERNAL = (os.path.dirname(os.path.abspath(__file__)) + os.sep,)


def _internal_prefixes() -> tuple[str, ...]:
    import structlog  # imported here: errors.py is imported before anything else

    return (*_INTERNAL, os.path.dirname(os.path.abspath(structlog.__file__)) + os.sep)


def warn_at_caller(message: str, category: type[Warning]) -> None:
    """Warn at the first frame outside speedtronic and structlog: the user's own call (``emit``,
    ``close``...), so the warning names the user's line, not an internal one."""
    internal = _internal_prefixes()
    frame = inspect.currentframe()
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(internal):
        frame = frame.f_back
        level += 1
    del frame
    warnings.warn(message, category, stacklevel=level)


def reported(count: int) -> bool:
    """Whether the ``count``-th failure of one kind is reported: the 1st, 2nd, 4th, 8th... (the one
    throttling rule for hook failures and lost records: a failure every step stays visible without
    flooding the log)."""
    return count & (count - 1) == 0


def check_count(name: str, value: object) -> None:
    """``ValueError`` naming ``name`` unless ``value`` is an int >= 1 (a queue size, a cadence)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def check_seconds(name: str, value: object) -> None:
    """``ValueError`` naming ``name`` unless ``value`` is a finite number of seconds > 0 (a timeout)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e9:
        raise ValueError(f"{name} must be a number of seconds > 0 and finite, got {value!r}")
