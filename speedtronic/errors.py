"""Exceptions and warning classes speedtronic raises, so users can catch, filter or escalate them.

Warnings have their own classes (as pluggy's ``PluggyWarning`` does): a test suite can make hook
failures fatal with ``-W error::speedtronic.HookFailureWarning``.
"""

from __future__ import annotations

__all__ = [
    "HookError",
    "HookFailureWarning",
    "LoggerClosedError",
    "LoggingFailureWarning",
    "SpeedtronicWarning",
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
