"""``MetricLogger``: one training event in, a text line, a JSONL record and hook calls out.

The logger is a structlog processor chain of its own, built with ``structlog.wrap_logger`` (the
global structlog configuration is never read or changed). Its stages are the public processors of
``speedtronic.processors``::

    emit(event, payload)
      CadenceFilter.admits: a skipped train_step returns here, before any work
      {"event": event, **payload} -> ConvertValues -> [Redact] -> AddElapsed -> AddMemory -> [AddRank]
        -> your processors (MetricLogger(processors=[...]))
        -> WriteText: TextRenderer -> the text log (file or stream), at or above `level`
        -> WriteLines: JSONLRenderer -> the JSONL file
        -> DispatchHooks (final): each hook, in order, its failures counted and reported

One lock serialises the chain, so ``emit`` is safe from several threads: lines never interleave, and
hooks are never called concurrently and see events in emission order. Hooks run inside ``emit`` (on
the emitting thread) unless ``background_hooks=True`` or a hook is wrapped in
``speedtronic.hooks.background``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType, TracebackType
from typing import IO, Any

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from speedtronic import _exit_and_fork
from speedtronic.distributed import RankInfo, detect_rank, is_lead, rank_path
from speedtronic.errors import (
    HookError,
    LoggerClosedError,
    LoggingFailureWarning,
    SpeedtronicWarning,
    warn_at_caller,
)
from speedtronic.events import RESERVED_KEYS, level_for, payload_key
from speedtronic.hooks import HookList
from speedtronic.hooks.background import DEFAULT_PUT_TIMEOUT_S, BackgroundHooks, check_count, check_seconds
from speedtronic.processors import (
    DEFAULT_MAX_LINE_BYTES,
    AddElapsed,
    AddMemory,
    AddRank,
    CadenceFilter,
    ConvertValues,
    DispatchHooks,
    HookFailures,
    JSONLRenderer,
    Redact,
    TextRenderer,
    WriteLines,
)
from speedtronic.processors.convert import NOTE_KEY, safe_str, unique_key
from speedtronic.processors.memory import resolve_probe
from speedtronic.processors.redact import redact_text
from speedtronic.processors.render import LEVEL_NAMES
from speedtronic.processors.text import DEFAULT_FLOAT_DIGITS
from speedtronic.sinks import LineFile, TextStream, json_note, open_text_sink

__all__ = ["MetricLogger", "memory_usage_bytes"]

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_STR = frozenset({str})


def memory_usage_bytes(device: Any = None) -> int | None:
    """Bytes allocated on ``device`` (default: the accelerator in use), or ``None`` without one.

    CUDA: ``torch.cuda.memory_allocated(device)``; MPS: ``torch.mps.current_allocated_memory()``.
    Never imports torch: if it has not been imported, no accelerator is in use.
    """
    return resolve_probe(device)()


class _EventLogger(structlog.BoundLoggerBase):
    """The chain's bound logger: structlog's documented way to write a wrapper class.

    ``log_event`` runs the chain through ``_process_event`` with the event's level as the method name
    and the payload as the event dict's fields (any string keys, ``self`` and ``event`` included).
    """

    def log_event(self, method_name: str, event: str, fields: Mapping[str, Any]) -> None:
        try:
            args, kwargs = self._process_event(method_name, event, fields)  # type: ignore[arg-type]  # copies the fields
        except structlog.DropEvent:
            return
        getattr(self._logger, method_name)(*args, **kwargs)


def _chain(processors: list[Processor]) -> _EventLogger:
    """A bound logger over ``processors`` that ignores the global structlog configuration (an
    application's wrapper class or level filter must not change or silence our events)."""
    logger: _EventLogger = structlog.wrap_logger(
        structlog.ReturnLogger(),
        processors=processors,
        wrapper_class=_EventLogger,
        context_class=dict,
        cache_logger_on_first_use=False,
    ).bind()
    return logger


def _parse_level(level: str | int) -> int:
    if isinstance(level, int) and not isinstance(level, bool):
        return level
    if isinstance(level, str) and level.upper() in _LEVELS:
        return int(logging.getLevelName(level.upper()))
    raise ValueError(
        f"MetricLogger(level=...) must be one of {', '.join(_LEVELS)} (or an int), got {level!r}"
    )


def _redactor(redact: bool | Iterable[str]) -> list[Redact]:
    if redact is True:
        return [Redact()]
    if redact is False:
        return []
    if isinstance(redact, str):
        raise TypeError(
            f"MetricLogger(redact=...) takes a list of patterns, not one string: use [{redact!r}]"
        )
    return [Redact(redact)]


def _event_fields(payload: Mapping[Any, Any]) -> Mapping[str, Any]:
    """The payload as event-dict fields: itself when every key is a ``str`` that no record owns, else
    a copy with other keys as strings no other key has (``1`` and ``"1"`` become ``"1#2"`` and
    ``"1"``) and reserved ones renamed (``timestamp`` becomes ``payload_timestamp``)."""
    if _STR.issuperset(map(type, payload)) and RESERVED_KEYS.isdisjoint(payload):
        return payload
    taken: dict[str, None] = dict.fromkeys(key for key in payload if type(key) is str)
    fields: dict[str, Any] = {}
    for key, value in payload.items():
        name = key if type(key) is str else unique_key(taken, key)
        if name in RESERVED_KEYS:
            name = payload_key(name, taken)
        taken[name] = None
        fields[name] = value
    return fields


def _method_for(level: str | None, event: str) -> str:
    """The structlog method name of an event: ``level`` (any case) or the catalog's."""
    if level is None:
        return level_for(event)
    method = level.lower() if isinstance(level, str) else level
    if method not in LEVEL_NAMES:
        raise ValueError(f"emit({event!r}, level={level!r}): level must be one of {', '.join(LEVEL_NAMES)}")
    return method


_OWN: Mapping[str, str] = MappingProxyType({"origin": "speedtronic"})


def _mark_own(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """Marks a record the logger writes of its own (``hook_error``, ``logging_error``): its note says
    ``"origin": "speedtronic"``, so a user event of the same name is told apart."""
    event_dict[NOTE_KEY] = dict(_OWN)
    return event_dict


class MetricLogger:
    """Turns training events into a text log, a JSONL record and hook calls.

    Args:
        level: threshold of the text log (``"DEBUG"`` ... ``"CRITICAL"``); the JSONL record and the
            hooks get every event regardless.
        file: append the text log here instead of writing it to ``stream``.
        json_file: append one JSON object per event here (parent directories are created).
        every_steps: log a ``train_step`` only when its ``step`` is a multiple of this.
        stream: text stream for the text log when ``file`` is not given (default ``sys.stdout``).
        hooks: hooks to call for every logged event (more can be appended to ``.hooks``).
        processors: your own structlog processors, run after speedtronic's have enriched the event
            and before it is rendered: they can add or drop fields for every sink and hook.
        device: accelerator whose memory ``memory_bytes`` reports (default: the current one).
        strict_hooks: re-raise a hook's failure as ``HookError`` from the ``emit`` that caused it
            (for test suites).
        background_hooks: call the hooks on a worker thread of the logger's own instead of inside
            ``emit`` (see ``speedtronic.hooks.BackgroundHooks``); ``False`` by default.
        hook_queue_size: with ``background_hooks``, events waiting for the worker.
        hook_put_timeout_s: with ``background_hooks``, the longest ``emit`` waits for room in a full
            queue before the event is dropped for the hooks only (counted and reported).
        close_timeout_s: how long ``close()`` waits for background hooks to deliver what is queued.
        rank: this process's place in a multi-process job (default: ``detect_rank()``). With more
            than one process, records carry ``rank`` and ``world_size`` and rank ``r > 0`` writes
            ``json_file`` as ``<stem>.rank<r><suffix>``.
        lead_rank: the rank whose text log and hooks run (default 0); ``None`` runs them on every
            rank. Other ranks write their JSONL only.
        redact: hide secret-looking keys and values from every sink and hook: ``True`` for the
            defaults, your own ``fnmatch`` key patterns, or ``False``.
        max_line_bytes: longest text line and JSONL record (newline included); longer ones have their
            largest values truncated with a marker. ``None`` or ``0``: no limit.
        float_digits: significant digits of floats in the text line (``None``: all of them); the
            JSONL record keeps every digit.

    Use it as a context manager, or call ``close()``; loggers left open are closed at exit.
    """

    def __init__(
        self,
        level: str | int = "INFO",
        file: str | os.PathLike[str] | None = None,
        json_file: str | os.PathLike[str] | None = None,
        every_steps: int = 1,
        stream: IO[str] | None = None,
        hooks: Iterable[Any] | None = None,
        *,
        processors: Iterable[Processor] = (),
        device: Any = None,
        strict_hooks: bool = False,
        background_hooks: bool = False,
        hook_queue_size: int = 10_000,
        hook_put_timeout_s: float = DEFAULT_PUT_TIMEOUT_S,
        close_timeout_s: float = 30.0,
        rank: RankInfo | None = None,
        lead_rank: int | None = 0,
        redact: bool | Iterable[str] = True,
        max_line_bytes: int | None = DEFAULT_MAX_LINE_BYTES,
        float_digits: int | None = DEFAULT_FLOAT_DIGITS,
    ) -> None:
        # Every argument is checked before any file is opened.
        levelno = _parse_level(level)
        self._cadence = CadenceFilter(every_steps)
        check_seconds("MetricLogger(close_timeout_s=...)", close_timeout_s)
        check_seconds("MetricLogger(hook_put_timeout_s=...)", hook_put_timeout_s)
        check_count("MetricLogger(hook_queue_size=...)", hook_queue_size)
        if file is not None and stream is not None:
            raise ValueError("MetricLogger: pass either file= or stream= for the text log, not both")
        user_processors = list(processors)
        for processor in user_processors:
            if not callable(processor):
                raise TypeError(f"MetricLogger(processors=...): {processor!r} is not a structlog processor")
        try:
            memory = AddMemory(device)
        except Exception as error:
            raise ValueError(f"MetricLogger(device={device!r}): {type(error).__name__}: {error}") from None
        redactor = _redactor(redact)
        self._text_renderer = text_renderer = TextRenderer(
            max_line_bytes=max_line_bytes, float_digits=float_digits
        )
        self._json_renderer = json_renderer = JSONLRenderer(as_bytes=True, max_line_bytes=max_line_bytes)
        self._hooks = HookList(hooks or ())
        self._redact_text: Callable[[str], str] = redact_text if redact is not False else _unchanged
        self._failures = HookFailures(
            _weak(self._report_hook_error), strict=strict_hooks, redact=self._redact_text
        )
        self.write_errors = 0
        """Records that could not be written or rendered, over every sink; each is also reported."""
        self._lost: dict[str, int] = {}
        self._lock = threading.RLock()
        self._closed = False
        self._depth = 0  # emits in progress on the thread holding the lock (a hook may emit)
        self._close_requested = False
        self._owner = 0  # the thread inside emit, while _depth > 0
        self._stuck = False  # close() could not get the logger from a thread stuck inside emit
        self._telling = False  # reporting a lost record to the other sinks
        self._close_timeout_s = close_timeout_s
        self.rank = rank if rank is not None else detect_rank()
        self.is_lead = is_lead(self.rank, lead_rank)
        """Whether this process writes the text log and calls the hooks."""
        self._background: BackgroundHooks | None = None
        if self.is_lead and background_hooks and not strict_hooks:
            self._background = BackgroundHooks(
                self._hooks,
                on_error=self._failures,
                queue_size=hook_queue_size,
                put_timeout_s=hook_put_timeout_s,
                close_timeout_s=close_timeout_s,
                name=f"speedtronic-hooks-{id(self):x}",
            )

        if json_file is not None:
            json_file = rank_path(json_file, self.rank.rank)
        self._text: LineFile | TextStream | None = None
        self._json: LineFile | None = None
        try:
            self._text = open_text_sink(file, stream, _weak(self._sink_failed)) if self.is_lead else None
            self._json = (
                LineFile(json_file, _weak(self._sink_failed), json_note) if json_file is not None else None
            )
        except OSError as error:
            if self._text is not None:
                self._text.close()
            which, path = (
                ("json_file", json_file) if self._text is not None or not self.is_lead else ("file", file)
            )
            raise ValueError(f"MetricLogger({which}={str(path)!r}): can't open it: {error}") from None

        elapsed = AddElapsed()
        ranked: list[Processor] = (
            [AddRank(self.rank.rank, self.rank.world_size)] if self.rank.distributed else []
        )
        writes: list[Processor] = []
        if self._text is not None:
            writes.append(WriteLines(self._text.write, text_renderer, levelno))
        if self._json is not None:
            writes.append(WriteLines(self._json.write, json_renderer))
        if not self.is_lead:
            called: list[Any] = []
        elif self._background is not None:
            called = [self._background]
        else:
            called = self._hooks
        dispatch = DispatchHooks(called, on_error=self._failures)
        enrich: list[Processor] = [ConvertValues(), *redactor, elapsed, memory, *ranked]
        self.processors: tuple[Processor, ...] = (*enrich, *user_processors, *writes, dispatch)
        """The chain's stages, in order (``emit`` asks ``CadenceFilter`` before them)."""
        self._log = _chain(list(self.processors))
        self._own_records = _chain([_mark_own, ConvertValues(), elapsed, *ranked, *writes, DispatchHooks([])])
        _exit_and_fork.remember(self)
        _exit_and_fork.guard_across_fork(self)
        # A logger nobody closed releases its files and closes its hooks when it is collected; one
        # still open at exit is closed by _exit_and_fork first (so not by this finalizer).
        owned = [self._background] if self._background is not None else self._hooks if self.is_lead else []
        self._finalizer = weakref.finalize(self, _release, self._text, self._json, owned)
        self._finalizer.atexit = False

    # -- public API ---------------------------------------------------------------------------

    @property
    def hooks(self) -> HookList:
        """The hooks, in call order; append to it at any time (each hook is checked when added)."""
        return self._hooks

    @hooks.setter
    def hooks(self, hooks: Iterable[Any]) -> None:
        self._hooks[:] = list(hooks)

    @property
    def hook_errors(self) -> Mapping[str, int]:
        """Failures per hook name (``on_event`` and ``close`` together); a live, read-only view."""
        return self._failures.counts

    @property
    def lost_records(self) -> Mapping[str, int]:
        """Records that could not be written, per sink (its path, or the stream's name)."""
        return MappingProxyType(self._lost)

    @property
    def every_steps(self) -> int:
        return self._cadence.every_steps

    @property
    def closed(self) -> bool:
        return self._closed

    def emit(self, event: str, payload: Mapping[Any, Any], *, level: str | None = None) -> None:
        """Log one event; a ``train_step`` skipped by the cadence returns before doing anything.

        ``level`` is the record's level as a structlog method name (default: the catalog's,
        ``speedtronic.events.level_for``). Hooks have been called when this returns (unless they run
        in the background). Never raises because of the payload's values or a hook (unless
        ``strict_hooks``); raises ``LoggerClosedError`` after ``close()``, ``TypeError`` for a
        payload that is no mapping and ``ValueError`` for an unknown ``level``.
        """
        if not self._cadence.admits(event, payload):
            return
        if not isinstance(payload, Mapping):
            raise TypeError(f"emit({event!r}): payload must be a mapping, got {type(payload).__name__}")
        method = _method_for(level, event)
        with self._lock:
            if self._closed:
                raise LoggerClosedError(f"emit({event!r}) on a closed MetricLogger; create a new one")
            self._depth += 1
            self._owner = threading.get_ident()
            try:
                self._log.log_event(method, str(event), _event_fields(payload))
            except (HookError, SpeedtronicWarning):
                raise
            except Exception as error:
                self._record_failed(error, f"rendering {event!r}")
            finally:
                self._depth -= 1
                close_now = self._close_requested and not self._depth
        if close_now:  # a hook asked for close() during this event, which is now done
            self.close()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until background hooks (``background_hooks=True``, and each ``background(hook)`` among
        the hooks) have received every event emitted so far; ``False`` if ``timeout`` (seconds, over
        all of them) ran out first. Every record is already written when ``emit`` returns, and inline
        hooks have been called, so there is nothing else to wait for."""
        if self._closed:
            return True
        waiting = [hook for hook in self._hooks if isinstance(hook, BackgroundHooks)]
        if self._background is not None:
            waiting.insert(0, self._background)  # first: it feeds the background(hook)s among the hooks
        if self._depth and self._owner == threading.get_ident():  # a hook inside this thread's emit:
            return all(hooks.flush(0) for hooks in waiting)  # waiting could deadlock on our own lock
        deadline = None if timeout is None else time.monotonic() + timeout
        done = True
        for hooks in waiting:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            done = hooks.flush(left) and done
        return done

    def reopen(self) -> None:
        """Reopen the text log and JSONL files at their paths: for logrotate's ``postrotate`` (or
        ``speedtronic.lifecycle.reopen_on_signals``). Each write already follows a file moved or
        removed under it; this also lets go of the old file at once."""
        with self._lock:
            for sink in (self._text, self._json):
                if isinstance(sink, LineFile):
                    sink.reopen()

    def close(self) -> None:
        """Deliver queued events, close every hook that has ``close()``, then the files. Idempotent.

        A failure on the way (a hook's close, a warning escalated to an error) doesn't stop the
        rest; the first one is raised once everything is closed. Called by a hook inside ``emit``, it
        takes effect when that event is done. If another thread holds the logger (a hook stalled
        inside ``emit``) for ``close_timeout_s``, it closes without waiting for it.
        """
        self._close(wait_for_emit=True)

    def close_now(self) -> None:
        """``close()``, also from inside this thread's ``emit`` (a signal handler that interrupted it:
        ``speedtronic.lifecycle.close_on_signals``), where ``close()`` would wait for the event."""
        self._close(wait_for_emit=False)

    def _close(self, *, wait_for_emit: bool) -> None:
        acquired = self._lock.acquire(timeout=self._close_timeout_s)
        try:
            if self._closed:
                return
            if acquired and self._depth and wait_for_emit:  # a hook of this thread's emit
                self._close_requested = True
                return
            self._closed = True
            self._stuck = not acquired  # another thread is inside emit (a hook stalled there)
        finally:
            if acquired:
                self._lock.release()
        errors: list[BaseException] = []
        for step in (self._close_hooks, self._report_totals):
            try:
                step()
            except BaseException as error:
                errors.append(error)
        self._finalizer.detach()
        _release(self._text, self._json)
        _exit_and_fork.forget(self)
        if errors:
            raise errors[0]

    def __enter__(self) -> MetricLogger:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<MetricLogger {state} every_steps={self.every_steps} hooks={len(self._hooks)}>"

    def _forked(self) -> None:
        """In a forked child: no thread of the parent is inside ``emit`` here."""
        self._depth, self._owner, self._close_requested = 0, 0, False

    # -- closing --------------------------------------------------------------------------------

    def _close_hooks(self) -> None:
        if self._background is not None:
            undelivered = self._background.close(self._close_timeout_s)
            if undelivered:
                self._report(
                    "hook_error",
                    {
                        "hook": "*",
                        "phase": "drain",
                        "undelivered": undelivered,
                        "timeout_s": self._close_timeout_s,
                    },
                )
                warn_at_caller(
                    f"speedtronic: {undelivered} event(s) not delivered to hooks within "
                    f"close_timeout_s={self._close_timeout_s}",
                    LoggingFailureWarning,
                )
            return
        if not self.is_lead:
            return
        if self._stuck:  # a hook may still be running inside another thread's emit: none is closed
            stuck = f"another thread was inside emit after {self._close_timeout_s} s: not closed"
            for hook in list(self._hooks):
                self._failures(hook, TimeoutError(stuck), "close")
            return
        seen: set[int] = set()
        for hook in list(self._hooks):
            if id(hook) in seen:
                continue
            seen.add(id(hook))
            try:
                close = getattr(hook, "close", None)
                if callable(close):
                    close()
            except Exception as error:
                self._failures(hook, error, "close")

    def _report_totals(self) -> None:
        for name, failures in self._failures.counts.items():
            self._report("hook_error", {"hook": name, "phase": "total", "failures": failures})

    # -- failures -------------------------------------------------------------------------------

    def _report_hook_error(self, fields: dict[str, Any]) -> None:
        self._report("hook_error", fields)

    def _report(self, event: str, fields: dict[str, Any]) -> None:
        """Write a record of the logger's own (never passed to hooks) to the text log and JSONL.

        Once ``close()`` found another thread stuck inside ``emit``, written without waiting for it
        (each file keeps its lines whole by its own lock)."""
        acquired = self._lock.acquire(timeout=0 if self._stuck else -1)
        try:
            self._own_records.log_event(level_for(event), event, dict(fields))
        except (HookError, SpeedtronicWarning):
            raise
        except Exception as error:
            self._record_failed(error, f"rendering {event!r}")
        finally:
            if acquired:
                self._lock.release()

    def _sink_failed(self, error: BaseException, where: str) -> None:
        """A sink could not write a record: count it for that sink, and make it seen."""
        if self._telling:  # a note about another sink's loss: not a record of the user's
            return
        self._lost[where] = self._lost.get(where, 0) + 1
        self._record_failed(error, where)

    def _record_failed(self, error: BaseException, where: str) -> None:
        """Count a lost record and report the 1st, 2nd, 4th, 8th...: a ``logging_error`` record in
        every other sink that works, else one line on stderr (as ``logging.Handler.handleError``
        does: warning filters can't silence it), and a ``LoggingFailureWarning`` at the user's call."""
        self.write_errors += 1
        if self._telling or self.write_errors & (self.write_errors - 1):
            return
        text = self._redact_text(f"{type(error).__name__}: {safe_str(error)}")
        fields = {"sink": where, "error": text, "lost_records": self.write_errors}
        self._telling = True
        try:
            told = self._tell_other_sinks(where, fields)
        finally:
            self._telling = False
        if not told:
            with contextlib.suppress(Exception):
                sys.stderr.write(
                    f"speedtronic: could not write a record to {where} ({text}); "
                    f"{self.write_errors} record(s) lost so far\n"
                )
        warn_at_caller(
            f"speedtronic could not write a record ({where}): {text}; "
            f"{self.write_errors} record(s) lost so far",
            LoggingFailureWarning,
        )

    def _tell_other_sinks(self, where: str, fields: dict[str, Any]) -> bool:
        """Write a ``logging_error`` record to each sink other than ``where``; whether one took it."""
        told = False
        for sink, render in ((self._text, self._text_renderer), (self._json, self._json_renderer)):
            if sink is None or str(sink.path) == where:
                continue
            before = sink.lost
            try:
                sink.write(render(None, "error", {"event": "logging_error", **fields, NOTE_KEY: dict(_OWN)}))
            except Exception:
                continue
            told = told or sink.lost == before
        return told


def _weak(method: Callable[..., None]) -> Callable[..., None]:
    """``method`` called through a weak reference to its object: the sinks and a hook's worker thread
    hold the logger's reporters, and must not keep a logger nobody closed alive."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> None:
        target = ref()
        if target is not None:
            target(*args)

    return call


def _unchanged(text: str) -> str:
    return text


def _release(text: LineFile | TextStream | None, json: LineFile | None, hooks: Iterable[Any] = ()) -> None:
    """Close a logger's files (and, for a logger collected without ``close()``, its hooks)."""
    for hook in hooks:
        with contextlib.suppress(Exception):
            close = getattr(hook, "close", None)
            if callable(close):
                close()
    for sink in (text, json):
        if sink is not None:
            sink.close()
