"""``MetricLogger``: one training event in, a text line, a JSONL record and hook calls out.

The logger is a structlog processor chain of its own, built with ``structlog.wrap_logger`` (the
global structlog configuration is never read or changed) from ``build_processors``, the one list of
its stages (``docs/processors.md`` describes each, in order: cadence, conversion, redaction,
enrichment, one timestamp, your processors, the text line, the JSONL record, then the hooks). ``emit``
asks the chain's ``CadenceFilter`` first, so a skipped step costs one call.

The logger's own records (``hook_error``, ``logging_error``, the note where a file lost lines) go
through the same chain, marked ``"_speedtronic": {"origin": "speedtronic"}``; ``DispatchHooks`` does
not hand them to hooks. ``MetricLogger`` itself keeps the lifecycle: the lock, flush, reopen, close
and the failure counts. One lock serialises the chain, so ``emit`` is safe from several threads: lines
never interleave, and hooks are never called concurrently and see events in emission order.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType, TracebackType
from typing import IO, Any

import structlog
from structlog.typing import Processor

from speedtronic import _exit_and_fork
from speedtronic.distributed import RankInfo, detect_rank, is_lead, rank_path
from speedtronic.errors import (
    HookError,
    LoggerClosedError,
    LoggingFailureWarning,
    SpeedtronicWarning,
    check_count,
    check_seconds,
    reported,
    warn_at_caller,
)
from speedtronic.events import (
    LEVELS,
    RESERVED_KEYS,
    EventPayloadError,
    level_for,
    method_for,
    payload_key,
)
from speedtronic.hooks import HookList
from speedtronic.hooks.background import DEFAULT_PUT_TIMEOUT_S, BackgroundHooks
from speedtronic.hooks.dispatch import DispatchHooks, HookFailures, close_hook
from speedtronic.processors import (
    DEFAULT_MAX_LINE_BYTES,
    AddElapsed,
    AddMemory,
    AddRank,
    AddTimestamp,
    CadenceFilter,
    ConvertValues,
    JSONLRenderer,
    Redact,
    TextRenderer,
    WriteLines,
)
from speedtronic.processors.convert import NOTE_KEY, safe_str, unique_key
from speedtronic.processors.memory import resolve_probe
from speedtronic.processors.redact import redact_text
from speedtronic.processors.text import DEFAULT_FLOAT_DIGITS
from speedtronic.sinks import LineFile, TextStream, open_text_sink

__all__ = ["MetricLogger", "build_processors", "memory_usage_bytes"]


def memory_usage_bytes(device: Any = None) -> int | None:
    """Bytes allocated on ``device`` (default: the accelerator in use), or ``None`` without one.

    CUDA: ``torch.cuda.memory_allocated(device)``; MPS: ``torch.mps.current_allocated_memory()``.
    Never imports torch: if it has not been imported, no accelerator is in use.
    """
    return resolve_probe(device)()


def build_processors(
    *,
    every_steps: int = 1,
    redact: bool | Iterable[str] = True,
    device: Any = None,
    rank: RankInfo | None = None,
    clock: Callable[[], float] = time.time,
    processors: Iterable[Processor] = (),
    text: Callable[[str], object] | None = None,
    text_level: int = logging.INFO,
    json: Callable[[bytes], object] | None = None,
    hooks: Sequence[Any] = (),
    on_hook_error: Callable[[object, Exception, str], None] | None = None,
    max_line_bytes: int | None = DEFAULT_MAX_LINE_BYTES,
    float_digits: int | None = DEFAULT_FLOAT_DIGITS,
    local_time: bool = False,
    caller: str = "build_processors",
) -> list[Processor]:
    """The stages of a ``MetricLogger``, in order: the one list of them.

    ``text`` and ``json`` receive each rendered line (a ``str`` at or above ``text_level``, and
    ``bytes``); either may be left out. ``hooks`` (a list read at each event) get every kept event,
    their failures going to ``on_hook_error``. ``rank`` adds ``rank``/``world_size`` when the job has
    more than one process. The list works in any structlog chain
    (``structlog.wrap_logger(structlog.ReturnLogger(), processors=build_processors(text=print))``),
    and its arguments are checked here, each error naming ``caller`` and the argument.
    """
    check_count(f"{caller}(every_steps=...)", every_steps)
    stages: list[Processor] = [CadenceFilter(every_steps), ConvertValues()]
    if redact is not False:
        if isinstance(redact, str):
            raise TypeError(f"{caller}(redact=...) takes a list of patterns, not one string: [{redact!r}]")
        stages.append(Redact() if redact is True else Redact(redact))
    try:
        stages += [AddElapsed(), AddMemory(device)]
    except Exception as error:
        raise ValueError(f"{caller}(device={device!r}): {type(error).__name__}: {error}") from None
    if rank is not None and rank.distributed:
        stages.append(AddRank(rank.rank, rank.world_size))
    stages.append(AddTimestamp(clock))
    for processor in processors:
        if not callable(processor):
            raise TypeError(f"{caller}(processors=...): {processor!r} is not a structlog processor")
        stages.append(processor)
    if text is not None:
        renderer = TextRenderer(
            clock, float_digits=float_digits, max_line_bytes=max_line_bytes, local_time=local_time
        )
        stages.append(WriteLines(text, renderer, text_level))
    if json is not None:
        stages.append(WriteLines(json, JSONLRenderer(clock, as_bytes=True, max_line_bytes=max_line_bytes)))
    stages.append(DispatchHooks(hooks, on_error=on_hook_error))
    return stages


class _Routing:
    """Where the logger's own record being written goes: not to ``skip`` (a ``logging_error`` about
    that sink itself), or only to ``only`` (the note of a gap in that file). Paths; ``None``: no rule."""

    __slots__ = ("only", "skip")

    def __init__(self) -> None:
        self.skip: str | None = None
        self.only: str | None = None


class _SinkWriter:
    """Writes a rendered line to one of the logger's sinks (bound once the sink is open), following
    the ``_Routing`` of the logger's own records."""

    __slots__ = ("_routing", "_sink", "_where")

    def __init__(self, routing: _Routing) -> None:
        self._routing = routing
        self._sink: LineFile | TextStream | None = None
        self._where = ""

    def bind(self, sink: LineFile | TextStream | None) -> None:
        self._sink = sink
        self._where = str(sink.path) if sink is not None else ""

    def __call__(self, line: Any) -> None:
        routing = self._routing
        if self._sink is None or routing.skip == self._where or routing.only not in (None, self._where):
            return
        self._sink.write(line)


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


def _parse_level(level: str | int) -> int:
    if isinstance(level, int) and not isinstance(level, bool):
        return level
    if isinstance(level, str) and level.upper() in LEVELS:
        return int(logging.getLevelName(level.upper()))
    raise ValueError(f"MetricLogger(level=...) must be one of {', '.join(LEVELS)} (or an int), got {level!r}")


def _event_fields(payload: Mapping[Any, Any]) -> Mapping[str, Any]:
    """The payload as event-dict fields: itself when every key is a ``str`` that no record owns, else
    a copy with other keys as strings no other key has (``1`` and ``"1"`` become ``"1#2"`` and
    ``"1"``) and reserved ones renamed (``timestamp`` becomes ``payload_timestamp``)."""
    if RESERVED_KEYS.isdisjoint(payload) and all(type(key) is str for key in payload):
        return payload
    taken: dict[str, None] = dict.fromkeys(key for key in payload if type(key) is str)
    fields: dict[str, Any] = {}
    counters: dict[str, int] = {}
    for key, value in payload.items():
        name = key if type(key) is str else unique_key(taken, key, counters)
        if name in RESERVED_KEYS:
            name = payload_key(name, taken, counters)
        taken[name] = None
        fields[name] = value
    return fields


class MetricLogger:
    """Turns training events into a text log, a JSONL record and hook calls.

    Args:
        level: threshold of the text log (``"DEBUG"`` ... ``"CRITICAL"``); the JSONL record and the
            hooks get every event regardless.
        file: append the text log here instead of writing it to ``stream``.
        json_file: append one JSON object per event here (parent directories are created).
        every_steps: log a ``train_step`` only when its ``step`` is a multiple of this.
        stream: text stream for the text log when ``file`` is not given (default ``sys.stdout``,
            silent while a hook such as ``StructlogHook`` writes the console: see ``DefaultConsole``).
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
        local_time: write the text line's time in the machine's time zone, with its offset
            (``2026-01-01 07:00:00-05:00``); by default both the text line and the JSONL record are
            in UTC, and name the same instant.
        clock: the wall clock, seconds since the epoch (``time.time``): for tests needing fixed time.

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
        local_time: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # Every argument is checked before any file is opened.
        levelno = _parse_level(level)
        check_seconds("MetricLogger(close_timeout_s=...)", close_timeout_s)
        check_seconds("MetricLogger(hook_put_timeout_s=...)", hook_put_timeout_s)
        check_count("MetricLogger(hook_queue_size=...)", hook_queue_size)
        if file is not None and stream is not None:
            raise ValueError("MetricLogger: pass either file= or stream= for the text log, not both")
        self.rank = rank if rank is not None else detect_rank()
        self.is_lead = is_lead(self.rank, lead_rank)
        """Whether this process writes the text log and calls the hooks."""
        self._hooks = HookList(hooks or ())
        self._redact_text: Callable[[str], str] | None = redact_text if redact is not False else None
        self._failures = HookFailures(
            _weak(self._report_hook_error), strict=strict_hooks, redact=self._redact_text
        )
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
        called: Sequence[Any] = self._hooks if self._background is None else [self._background]
        self._routing = _Routing()  # where the logger's own record being written goes
        text, json = _SinkWriter(self._routing), _SinkWriter(self._routing)
        self.processors: tuple[Processor, ...] = tuple(
            build_processors(
                every_steps=every_steps,
                redact=redact,
                device=device,
                rank=self.rank,
                clock=clock,
                processors=processors,
                text=text if self.is_lead else None,
                text_level=levelno,
                json=json if json_file is not None else None,
                hooks=called if self.is_lead else [],
                on_hook_error=self._failures,
                max_line_bytes=max_line_bytes,
                float_digits=float_digits,
                local_time=local_time,
                caller="MetricLogger",
            )
        )
        """The chain's stages, in order (``emit`` asks the ``CadenceFilter`` among them first)."""
        self._cadence = next(stage for stage in self.processors if isinstance(stage, CadenceFilter))
        self._dispatch = next(stage for stage in self.processors if isinstance(stage, DispatchHooks))

        self.write_errors = 0
        """Records that could not be written or rendered, over every sink; each is also reported."""
        self._lost: dict[str, int] = {}
        self._lock = threading.RLock()
        self._closed = False
        self._released = False  # the files are closed: nothing is written any more
        self._depth = 0  # emits in progress on the thread holding the lock (a hook may emit)
        self._close_requested = False
        self._owner = 0  # the thread inside emit, while _depth > 0
        self._stuck = False  # close() could not get the logger from a thread stuck inside emit
        self._telling = False  # writing a logging_error record
        self._close_timeout_s = close_timeout_s
        self._text, self._json = self._open_sinks(file, stream, json_file)
        text.bind(self._text)
        json.bind(self._json)
        self._log: _EventLogger = structlog.wrap_logger(
            structlog.ReturnLogger(),
            processors=list(self.processors),
            wrapper_class=_EventLogger,
            context_class=dict,
            cache_logger_on_first_use=False,
        ).bind()  # its own wrapper and context classes: an app's structlog.configure() can't reach it
        _exit_and_fork.remember(self)
        _exit_and_fork.guard_across_fork(self)
        # A logger nobody closed releases its files and closes its hooks when it is collected; one
        # still open at exit is closed by _exit_and_fork first (so not by this finalizer).
        owned = [self._background] if self._background is not None else self._hooks if self.is_lead else []
        self._finalizer = weakref.finalize(self, _release, self._text, self._json, owned)
        self._finalizer.atexit = False

    def _open_sinks(
        self,
        file: str | os.PathLike[str] | None,
        stream: IO[str] | None,
        json_file: str | os.PathLike[str] | None,
    ) -> tuple[LineFile | TextStream | None, LineFile | None]:
        on_error, on_gap = _weak(self._sink_failed), _weak(self._sink_gap)
        text: LineFile | TextStream | None = None
        try:
            text = open_text_sink(file, stream, on_error, on_gap, self._hooks) if self.is_lead else None
            if json_file is None:
                return text, None
            json_file = rank_path(json_file, self.rank.rank)
            return text, LineFile(json_file, on_error, on_gap)
        except OSError as error:
            if text is not None:
                text.close()
            which, path = ("json_file", json_file) if text is not None or not self.is_lead else ("file", file)
            raise ValueError(f"MetricLogger({which}={str(path)!r}): can't open it: {error}") from None

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

    def emit(self, event: str, payload: Mapping[Any, Any], *, level: str | None = None) -> bool:
        """Log one event; whether it passed the cadence (``False``: a skipped ``train_step``, which
        returns before doing anything).

        ``level`` is the record's level as a structlog method name (default: the catalog's,
        ``speedtronic.events.level_for``). Hooks have been called when this returns (unless they run
        in the background). Never raises because of the payload's values or a hook (unless
        ``strict_hooks``, or a strict ``ValidatePayloads`` among the processors); raises
        ``LoggerClosedError`` after ``close()``, ``TypeError`` for a payload that is no mapping and
        ``ValueError`` for an unknown ``level``.
        """
        if not self._cadence.admits(event, payload):
            return False
        if not isinstance(payload, Mapping):
            raise TypeError(f"emit({event!r}): payload must be a mapping, got {type(payload).__name__}")
        method = method_for(event, level)
        with self._lock:
            if self._closed:
                raise LoggerClosedError(f"emit({event!r}) on a closed MetricLogger; create a new one")
            self._depth += 1
            self._owner = threading.get_ident()
            try:
                self._log.log_event(method, str(event), _event_fields(payload))
            except (HookError, SpeedtronicWarning, EventPayloadError):
                raise
            except Exception as error:
                self._record_failed(error, f"rendering {event!r}")
            finally:
                self._depth -= 1
                close_now = self._close_requested and not self._depth
        if close_now:  # a hook asked for close() during this event, which is now done
            self.close()
        return True

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
        self._dispatch.stop()  # an inline hook running in a stuck emit: no hook after it is called
        errors: list[BaseException] = []
        for step in (self._close_hooks, self._report_totals):
            try:
                step()
            except BaseException as error:
                errors.append(error)
        self._finalizer.detach()
        with self._lock_unless_stuck():
            self._released = True
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
        for hook in _unique(self._hooks):
            try:
                close_hook(hook)
            except Exception as error:
                self._failures(hook, error, "close")

    def _report_totals(self) -> None:
        for name, failures in self._failures.counts.items():
            self._report("hook_error", {"hook": name, "phase": "total", "failures": failures})

    # -- the logger's own records ---------------------------------------------------------------

    def _lock_unless_stuck(self) -> contextlib.AbstractContextManager[bool]:
        """The logger's lock, or, once ``close()`` found another thread stuck inside ``emit``, no
        waiting for it (each file keeps its lines whole by its own lock)."""
        return _Acquired(self._lock, blocking=not self._stuck)

    def _report(self, event: str, fields: dict[str, Any]) -> None:
        """Run a record of the logger's own through the chain, marked as its own (so no hook gets it).
        Nothing is written once ``close()`` has released the files: a report arriving later (a
        background hook failing after the close timed out) is only counted."""
        with self._lock_unless_stuck():
            if self._released:
                return
            try:
                self._log.log_event(level_for(event), event, {**fields, NOTE_KEY: {"origin": "speedtronic"}})
            except (HookError, SpeedtronicWarning):
                raise
            except Exception as error:
                self._record_failed(error, f"rendering {event!r}")

    def _report_hook_error(self, fields: dict[str, Any]) -> None:
        self._report("hook_error", fields)

    def _sink_failed(self, error: BaseException, where: str, lost: bool = True) -> None:
        """A sink could not write a line (``lost``: none of it; else only part, finished later):
        count a lost one for that sink (not a ``logging_error`` of our own), and make it seen."""
        if self._telling:
            return
        if lost:
            self._lost[where] = self._lost.get(where, 0) + 1
        self._record_failed(error, where)

    def _sink_gap(self, lost: int, error: str, where: str) -> None:
        """A file lost ``lost`` lines and is written again: a ``logging_error`` record says so, through
        the chain, to that file only, where the lines are missing (the others were told of the
        failure when it happened)."""
        self._routing.only = where
        try:
            self._report("logging_error", {"sink": where, "error": error, "lost_records": lost})
        finally:
            self._routing.only = None

    def _record_failed(self, error: BaseException, where: str) -> None:
        """Count a failed write or render and report the 1st, 2nd, 4th, 8th...: a ``logging_error``
        record in every other sink that works, else one line on stderr (as
        ``logging.Handler.handleError`` does: warning filters can't silence it), and a
        ``LoggingFailureWarning`` at the user's call."""
        self.write_errors += 1
        if self._telling or not reported(self.write_errors):
            return
        text = f"{type(error).__name__}: {safe_str(error)}"
        text = self._redact_text(text) if self._redact_text is not None else text
        others = [sink for sink in (self._text, self._json) if sink is not None and str(sink.path) != where]
        before = [sink.lost for sink in others]
        self._telling, self._routing.skip = True, where
        try:
            self._report("logging_error", {"sink": where, "error": text, "lost_records": self.write_errors})
        finally:
            self._telling, self._routing.skip = False, None
        if not any(sink.lost == lost for sink, lost in zip(others, before, strict=True)):
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


def _unique(hooks: Iterable[Any]) -> list[Any]:
    """``hooks`` without repeats (one hook registered twice is closed once), in order."""
    unique: dict[int, Any] = {}
    for hook in hooks:
        unique.setdefault(id(hook), hook)
    return list(unique.values())


def _weak(method: Callable[..., None]) -> Callable[..., None]:
    """``method`` called through a weak reference to its object: the sinks and a hook's worker thread
    hold the logger's reporters, and must not keep a logger nobody closed alive."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> None:
        target = ref()
        if target is not None:
            target(*args)

    return call


def _release(text: LineFile | TextStream | None, json: LineFile | None, hooks: Iterable[Any] = ()) -> None:
    """Close a logger's files (and, for a logger collected without ``close()``, its hooks)."""
    for hook in _unique(hooks):
        with contextlib.suppress(Exception):
            close_hook(hook)
    for sink in (text, json):
        if sink is not None:
            sink.close()
