"""Exceptions and warning classes speedtronic raises, so users can catch, filter or escalate them.

Warnings have their own classes (as pluggy's ``PluggyWarning`` does): a test suite can make hook
failures fatal with ``-W error::speedtronic.HookFailureWarning``.
"""

from __future__ import annotations

import inspect
import os
import warnings

__all__ = [
    "MAX_WARNING_BYTES",
    "EventPayloadError",
    "EventPayloadWarning",
    "HookError",
    "HookFailureWarning",
    "LoggerClosedError",
    "LoggingFailureWarning",
    "SpeedtronicWarning",
    "capped",
    "reported",
    "warn_at_caller",
]

MAX_WARNING_BYTES = 32_000
"""Longest warning speedtronic issues, in UTF-8 bytes: the default cap of a record's line
(``speedtronic.processors.DEFAULT_MAX_LINE_BYTES``), so a hook's exception with a 10 MB message costs
32 kB on stderr, not 10 MB. See ``capped``."""

_END_KEPT = 200  # characters kept from a capped warning's end: what it says after the error (a count)


class SpeedtronicWarning(UserWarning):
    """Base class of every warning speedtronic issues."""


class HookFailureWarning(SpeedtronicWarning):
    """A hook raised; the run goes on, the failure is counted in ``MetricLogger.hook_errors``."""


class LoggingFailureWarning(SpeedtronicWarning):
    """Writing a record failed (disk full, unserialisable value); the run goes on."""


class LoggerClosedError(RuntimeError):
    """``MetricLogger.emit`` was called after ``close()``; a closed logger never reopens its files."""


class HookError(RuntimeError):
    """A hook failed while the logger runs with ``strict_hooks=True``. ``__cause__`` is the hook's
    exception when its printed traceback has nothing to redact; otherwise the chain is dropped (it
    would print the secret) and the message ends with the hook's redacted traceback."""


class EventPayloadWarning(SpeedtronicWarning):
    """A payload does not match its event's ``TypedDict`` (``ValidatePayloads(strict=False)``)."""


class EventPayloadError(ValueError):
    """A payload does not match its event's ``TypedDict`` (``ValidatePayloads(strict=True)``)."""


_INTERNAL = (os.path.dirname(os.path.abspath(__file__)) + os.sep,)


def _internal_prefixes() -> tuple[str, ...]:
    import structlog  # imported here: errors.py is imported before anything else

    return (*_INTERNAL, os.path.dirname(os.path.abspath(structlog.__file__)) + os.sep)


def capped(message: str) -> str:
    """``message``, or when its UTF-8 is longer than ``MAX_WARNING_BYTES``, its start and its last 200
    characters around ``<truncated: 9,968,120 of 10,000,080 bytes>``: the start says what failed, the
    end what follows the error (a count so far). ``warn_at_caller`` caps every warning it issues, and
    each warning built from a foreign exception elsewhere goes through it too."""
    if len(message) <= MAX_WARNING_BYTES // 4:  # fits, whatever its characters (4 bytes at most each)
        return message
    data = message.encode("utf-8", "backslashreplace")
    if len(data) <= MAX_WARNING_BYTES:
        return message
    end = message[-_END_KEPT:].encode("utf-8", "backslashreplace")
    start = data[: MAX_WARNING_BYTES - len(end) - 80]  # 80: room for the marker
    cut = len(data) - len(start) - len(end)
    return (
        f"{start.decode('utf-8', 'ignore')} <truncated: {cut:,} of {len(data):,} bytes> "
        f"{end.decode('utf-8', 'ignore')}"
    )


def warn_at_caller(message: str, category: type[Warning]) -> None:
    """Warn at the first frame outside speedtronic and structlog: the user's own call (``emit``,
    ``close``...), so the warning names the user's line, not an internal one. The message is
    ``capped``."""
    internal = _internal_prefixes()
    frame = inspect.currentframe()
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(internal):
        frame = frame.f_back
        level += 1
    del frame
    warnings.warn(capped(message), category, stacklevel=level)


def reported(count: int) -> bool:
    """Whether the ``count``-th failure of one kind is reported: the 1st, 2nd, 4th, 8th... (the one
    throttling rule for hook failures and lost records: a failure every step stays visible without
    flooding the log)."""
    return count & (count - 1) == 0
