"""``FailurePolicy``: what a ``MetricLogger`` does when something fails, in one place."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from speedtronic.chain import Chain
from speedtronic.errors import (
    HookError,
    LoggingFailureWarning,
    SpeedtronicWarning,
    capped,
    reported,
    warn_at_caller,
)
from speedtronic.events import level_for
from speedtronic.hooks.dispatch import HookFailures
from speedtronic.processors import WriteLines
from speedtronic.record import NOTE_KEY, own_note
from speedtronic.record.safe_text import safe_str
from speedtronic.record.secrets import redact_exception
from speedtronic.sinks import LineFile, TextStream

__all__ = ["FailurePolicy"]


class FailurePolicy:
    """A logger's failures: their counts, its records of its own about them, their warnings.

    ``lock`` is the logger's: a report is written under it, as an event is, unless ``stuck()`` said
    another thread holds it for good (a hook stalled inside ``emit``). ``strict`` raises a hook's
    failure as ``HookError`` instead of warning. The sinks and the chain are given this policy's bound
    methods when they are made; ``write_through`` then names the chain its records go through and
    what hides secrets in a failure's text (``Chain.redact_text``); until then a failure is counted
    and told on stderr.
    After ``release`` nothing is written; a report arriving later (a background hook failing after
    the close timed out) is only counted.
    """

    def __init__(self, lock: threading.RLock, *, strict: bool = False) -> None:
        self._chain: Chain | None = None
        self._written: tuple[tuple[LineFile | TextStream, WriteLines], ...] = ()
        self._lock = lock
        self._redact: Callable[[str], str] | None = None
        self._hooks = HookFailures(self._hook_record, strict=strict, redact=self._hide)
        self._blocking = True  # False once the lock is held for good by a thread stuck inside emit
        self._released = False
        self._telling = False  # writing a logging_error record: a failure now is not reported again
        self._lost: dict[str, int] = {}
        self.write_errors = 0
        """Records that could not be written or rendered, over every sink; each is also reported."""

    def write_through(
        self, chain: Chain, written: Sequence[tuple[LineFile | TextStream, WriteLines]]
    ) -> None:
        """The logger's chain, and each open sink paired with the chain's output writing to it: a
        report about one file goes to the others, the note of a gap to the file with the gap only."""
        self._chain = chain
        self._written = tuple(written)
        self._redact = chain.redact_text

    @property
    def hook_errors(self) -> Mapping[str, int]:
        """Failures per hook name (``on_event``, ``flush`` and ``close`` together); a live view."""
        return self._hooks.counts

    @property
    def lost(self) -> Mapping[str, int]:
        """Records that could not be written, per sink (its path, or the stream's name)."""
        return MappingProxyType(self._lost)

    def stuck(self) -> None:
        """Another thread holds the logger's lock for good (a hook stalled inside ``emit``, found by
        ``close()``): reports stop waiting for it, and each file keeps its lines whole by its own
        lock."""
        self._blocking = False

    def release(self) -> None:
        """Write nothing from now on: the logger is closing its files."""
        with _Acquired(self._lock, blocking=self._blocking):
            self._released = True

    def forked(self, lock: threading.RLock) -> None:
        """In a forked child: the logger's lock is a new one (``_exit_and_fork``)."""
        self._lock = lock

    def record(self, event: str, fields: dict[str, Any], to: Sequence[WriteLines] | None = None) -> bool:
        """Run a record of the logger's own through the chain to the outputs ``to`` (default: every
        output), marked as its own; whether it reached them."""
        with _Acquired(self._lock, blocking=self._blocking):
            if self._released or self._chain is None:
                return False
            outputs = self._chain.outputs if to is None else to
            try:
                record = {**fields, "event": event, NOTE_KEY: own_note()}
                return self._chain.run_own(level_for(event), record, outputs)
            except (HookError, SpeedtronicWarning):
                raise
            except Exception as error:
                self.record_failed(error, f"rendering {event!r}")
                return False

    def hook_failed(self, hook: object, error: Exception, during: str | None) -> None:
        """A hook failed delivering ``during`` (an event's name; ``None``: in its ``close()``), inline
        or on a worker thread: counted under its name, reported the 1st, 2nd, 4th... time as a
        ``hook_error`` record and a ``HookFailureWarning`` (``HookError`` raised when strict)."""
        self._hooks(hook, error, during)

    def hooks_stuck(self, hooks: Iterable[object], timeout_s: float) -> None:
        """``hooks`` may still be running inside another thread's ``emit`` after ``timeout_s``: each
        is reported as not closed."""
        stuck = f"another thread was inside emit after {timeout_s} s: not closed"
        for hook in hooks:
            self._hooks(hook, TimeoutError(stuck), None)

    def hooks_undelivered(self, undelivered: int, timeout_s: float) -> None:
        """Closing background hooks left ``undelivered`` events queued after ``timeout_s``: a
        ``hook_error`` record (phase ``drain``) and a ``LoggingFailureWarning``."""
        self.record(
            "hook_error", {"hook": "*", "phase": "drain", "undelivered": undelivered, "timeout_s": timeout_s}
        )
        warn_at_caller(
            f"speedtronic: {undelivered} event(s) not delivered to hooks within close_timeout_s={timeout_s}",
            LoggingFailureWarning,
        )

    def report_totals(self) -> None:
        """At close: a ``hook_error`` record (phase ``total``) of each failed hook's count."""
        for name, failures in self._hooks.counts.items():
            self.record("hook_error", {"hook": name, "phase": "total", "failures": failures})

    def _hide(self, text: str) -> str:
        return self._redact(text) if self._redact is not None else text

    def _hook_record(self, fields: dict[str, Any]) -> None:
        self.record("hook_error", fields)

    def sink_failed(self, error: BaseException, where: str, lost: bool = True) -> None:
        """A sink could not write a line (``lost``: none of it; else only part, finished later):
        count a lost one for that sink (not a ``logging_error`` of our own), and make it seen."""
        if self._telling:
            return
        if lost:
            self._lost[where] = self._lost.get(where, 0) + 1
        self.record_failed(error, where)

    def sink_gap(self, lost: int, error: str, where: str) -> None:
        """A file lost ``lost`` lines and is written again: a ``logging_error`` record says so, through
        the chain, to that file only, where the lines are missing (the others were told of the
        failure when it happened)."""
        fields = {"sink": where, "error": error, "lost_records": lost}
        to = [output for sink, output in self._written if str(sink.path) == where]
        self.record("logging_error", fields, to=to)

    def record_failed(self, error: BaseException, where: str) -> None:
        """Count a failed write or render and report the 1st, 2nd, 4th, 8th...: a ``logging_error``
        record in every other sink that works, else one line on stderr (as
        ``logging.Handler.handleError`` does: warning filters can't silence it), and a
        ``LoggingFailureWarning`` at the user's call. The stderr line is the last resort also when
        the report itself was lost in the chain (a processor that fails on every record)."""
        self.write_errors += 1
        if self._telling or not reported(self.write_errors):
            return
        text = (
            redact_exception(error, text=self._redact).line
            if self._redact is not None
            else f"{type(error).__name__}: {safe_str(error)}"
        )
        others = [(sink, output) for sink, output in self._written if str(sink.path) != where]
        before = [sink.lost for sink, _ in others]
        self._telling = True
        try:
            reached = self.record(
                "logging_error",
                {"sink": where, "error": text, "lost_records": self.write_errors},
                to=[output for _, output in others],
            )
        finally:
            self._telling = False
        told = reached and any(sink.lost == lost for (sink, _), lost in zip(others, before, strict=True))
        if not told:
            with contextlib.suppress(Exception):
                sys.stderr.write(
                    capped(
                        f"speedtronic: could not write a record to {where} ({text}); "
                        f"{self.write_errors} record(s) lost so far"
                    )
                    + "\n"
                )
        warn_at_caller(
            f"speedtronic could not write a record ({where}): {text}; "
            f"{self.write_errors} record(s) lost so far",
            LoggingFailureWarning,
        )


class _Acquired:
    """``with _Acquired(lock, blocking)``: holds ``lock`` if it could be taken (at once, when not
    ``blocking``)."""

    __slots__ = ("_acquired", "_blocking", "_lock")

    def __init__(self, lock: threading.RLock, *, blocking: bool) -> None:
        self._lock, self._blocking, self._acquired = lock, blocking, False

    def __enter__(self) -> bool:
        self._acquired = self._lock.acquire(blocking=self._blocking)
        return self._acquired

    def __exit__(self, *exc: object) -> None:
        if self._acquired:
            self._lock.release()
