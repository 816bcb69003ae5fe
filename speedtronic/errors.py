"""Exceptions and warning classes speedtronic raises, so users can catch, filter or escalate them.

Warnings have their own classes (as pluggy's ``PluggyWarning`` does): a test suite can make hook
failures fatal with ``-W error::speedtronic.HookFailureWarning``.
"""

from __future__ import annotations

import inspect
import os
import warnings

__all__ = [
    "HookError",
    "HookFailureWarning",
    "LoggerClosedError",
    "LoggingFailureWarning",
    "SpeedtronicWarning",
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
