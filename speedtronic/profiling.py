"""``MetricLogger``: one training event in, a text line, a JSONL record and hook calls out.

The logger is a structlog processor chain of its own (``structlog.wrap_logger``; the global structlog
configuration is never touched), whose stages live in ``speedtronic.processors``::

    emit(event, payload)
      cadence rule (CadenceFilter.admits): a skipped train_step returns here, before any work
      CopyPayload -> Redact -> AddElapsed -> AddMemory -> [AddRank] -> ConvertValues
        -> WriteText (text file or stream) -> WriteLines (JSONL file), each renderer line-capped
        -> HandOff (final: to the hook thread, which runs DispatchHooks)
           or DispatchHooks (final, with background_hooks=False: hooks on the emitting thread)

One lock serialises the chain, so ``emit`` is safe from several threads: lines never interleave.
Hooks run on one thread at a time (the logger's hook thread, or under the lock), so they are never
called concurrently and see events in emission order.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import threading
import traceback
import warnings
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType, TracebackType
from typing import IO, Any

import structlog
from structlog.typing import EventDict, WrappedLogger

from speedtronic import _exit_and_fork
from speedtronic.distributed import RankInfo, detect_rank, is_lead, rank_path
from speedtronic.errors import (
    HookError,
    HookFailureWarning,
    LoggerClosedError,
    LoggingFailureWarning,
    SpeedtronicWarning,
)
from speedtronic.hooks import HookList, close_hook, hook_name
from speedtronic.hooks.background import BackgroundDelivery
from speedtronic.processors import (
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_SECRET_PATTERNS,
    EVENT_LEVELS,
    AddElapsed,
    AddMemory,
    AddRank,
    CadenceFilter,
    ConvertValues,
    CopyPayload,
    DispatchHooks,
    HandOff,
    JSONLRenderer,
    Redact,
    TextRenderer,
    WriteLines,
    WriteText,
    bound_call,
    level_for,
)
from speedtronic.processors.memory import resolve_probe
from speedtronic.sinks import JSONLFile, open_text_sink

__all__ = ["MetricLogger", "memory_usage_bytes"]

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_ids = itertools.count(1)


def memory_usage_bytes(device: Any = None) -> int | None:
    """Bytes allocated on ``device`` (default: the accelerator in use), or ``None`` without one.

    CUDA: ``torch.cuda.memory_allocated(device)``; MPS: ``torch.mps.current_allocated_memory()``.
    Never imports torch: if it has not been imported, no accelerator is in use.
    """
    return resolve_probe(device)()


def _parse_level(level: str | int) -> int:
    if isinstance(level, int) and not isinstance(level, bool):
        return level
    if isinstance(level, str) and level.upper() in _LEVELS:
        return int(logging.getLevelName(level.upper()))
    raise ValueError(f"level must be one of {', '.join(_LEVELS)} (or an int), got {level!r}")


def _every_event(event: str, payload: Mapping[Any, Any]) -> bool:
    """The cadence rule at ``every_steps=1``: every event passes, without looking at its payload."""
    return True


def _drop(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    raise structlog.DropEvent


class _Chain(structlog.BoundLoggerBase):
    """A structlog bound logger that takes the event's level as an argument and the payload whole.

    ``run`` does what structlog's ``_process_event`` does for a logger with no bound context: the
    event dict ``{"payload": ..., "event": ...}`` through every processor in order, a
    ``structlog.DropEvent`` ending it early. What it leaves out is the context merge (this logger
    binds none) and the call of a wrapped logger: the chain's last stage consumes the event. Measured:
    a level method (``log.info(event, payload=...)``) costs 1.1 µs more per event, ``_process_event``
    0.4 µs more.
    """

    def __init__(self, logger: WrappedLogger, processors: Iterable[Any], context: Any) -> None:
        super().__init__(logger, processors, context)
        self._steps = tuple(bound_call(processor) for processor in self._processors)  # quickest to call

    def run(self, method_name: str, event: str, payload: Mapping[Any, Any]) -> None:
        event_dict: Any = {"payload": payload, "event": event}
        logger = self._logger
        try:
            for processor in self._steps:
                event_dict = processor(logger, method_name, event_dict)
        except structlog.DropEvent:
            pass


def _own_chain(processors: list[Any]) -> _Chain:
    """A bound logger over ``processors`` that ignores the global structlog configuration.

    ``wrap_logger`` would otherwise take the wrapper and context classes from
    ``structlog.configure()``: an application's level filter must not silence our events.
    """
    chain: _Chain = structlog.wrap_logger(
        None, processors=processors, wrapper_class=_Chain, context_class=dict,
        cache_logger_on_first_use=False,
    ).bind()
    return chain


def _redactor(redact: bool | Iterable[str]) -> list[Redact]:
    if redact is True:
        return [Redact(DEFAULT_SECRET_PATTERNS)]
    if redact is False:
        return []
    if isinstance(redact, str):
        raise TypeError(f"redact= takes a list of patterns, not one string: use [{redact!r}]")
    return [Redact(redact)]


def _check_positive(name: str, value: object, kinds: type | tuple[type, ...]) -> None:
    if isinstance(value, bool) or not isinstance(value, kinds) or not value > 0:  # type: ignore[operator]  # a number here
        raise ValueError(f"{name} must be a number > 0, got {value!r}")


def _is_power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


class MetricLogger:
    """Turns training events into a text log, a JSONL record and hook calls.

    Args:
        level: threshold of the text log (``"DEBUG"`` ... ``"CRITICAL"``); the JSONL record and the
            hooks get every event regardless.
        file: append the text log here instead of writing it to ``stream``.
        json_file: append one JSON object per event here (parent directories are created).
        every_steps: log a ``train_step`` only when its ``step`` is a multiple of this.
        stream: text stream for the text log when ``file`` is not given (default ``sys.stdout``).
        hooks: hooks to call for every delivered event (more can be appended to ``.hooks``).
        device: accelerator whose memory ``memory_bytes`` reports (default: the current one).
        strict_hooks: re-raise a hook's failure as ``HookError`` from the ``emit`` that caused it
            (for test suites; hooks then run on the emitting thread).
        background_hooks: run hooks on the logger's own thread (default), so a slow hook doesn't
            stall training; ``False`` runs them inside ``emit``.
        hook_queue_size: events waiting for the hook thread before ``emit`` blocks (never drops).
        close_timeout_s: how long ``close()`` waits for the hook thread to deliver what is queued.
        rank: this process's place in a multi-process job (default: ``detect_rank()``). With more
            than one process, records carry ``rank`` and ``world_size`` and rank ``r > 0`` writes
            ``json_file`` as ``<stem>.rank<r><suffix>``.
        lead_rank: the rank whose text log and hooks run (default 0); ``None`` runs them on every
            rank. Other ranks write their JSONL only.
        redact: hide the values of secret-looking keys from every sink and hook: ``True`` for
            ``DEFAULT_SECRET_PATTERNS``, your own ``fnmatch`` patterns, or ``False``.
        max_line_bytes: longest text line and JSONL record (newline included); longer ones have their
            largest values truncated with a marker. ``None`` or ``0``: no limit.

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
        device: Any = None,
        strict_hooks: bool = False,
        background_hooks: bool = True,
        hook_queue_size: int = 10_000,
        close_timeout_s: float = 30.0,
        rank: RankInfo | None = None,
        lead_rank: int | None = 0,
        redact: bool | Iterable[str] = True,
        max_line_bytes: int | None = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        levelno = _parse_level(level)
        self._cadence = CadenceFilter(every_steps)  # arguments are checked before any file is opened
        _check_positive("hook_queue_size", hook_queue_size, int)
        _check_positive("close_timeout_s", close_timeout_s, (int, float))
        try:
            memory = AddMemory(device)
        except Exception as error:
            raise ValueError(f"MetricLogger(device={device!r}): {type(error).__name__}: {error}") from None
        redactor = _redactor(redact)  # arguments are checked before any file is opened
        text_renderer = TextRenderer(as_bytes=file is not None, max_line_bytes=max_line_bytes)
        json_renderer = JSONLRenderer(as_bytes=True, max_line_bytes=max_line_bytes)
        if file is not None and stream is not None:
            raise ValueError("pass either file= or stream= for the text log, not both")
        self._hooks = HookList(hooks or ())
        self._hook_errors: dict[str, int] = {}
        self._hook_names: dict[int, tuple[object, str]] = {}
        self._strict_hooks = strict_hooks
        self.write_errors = 0
        """Records that could not be written (I/O errors) or rendered; each failure is also warned."""
        self._lock = threading.RLock()
        self._closed = False
        self._admits: Callable[[str, Mapping[Any, Any]], bool] = (
            self._cadence.admits if every_steps > 1 else _every_event  # the cadence's rule, at 1: True
        )
        self._close_timeout_s = close_timeout_s
        self._deferred: collections.deque[tuple[object, Exception, str]] = collections.deque()
        number = next(_ids)
        self.rank = rank if rank is not None else detect_rank()
        self.is_lead = is_lead(self.rank, lead_rank)
        """Whether this process runs the text log and the hooks."""
        if json_file is not None:
            json_file = rank_path(json_file, self.rank.rank)

        try:
            self._text = open_text_sink(file, stream, self._write_failed)
        except OSError as error:
            raise ValueError(f"MetricLogger(file={str(file)!r}): can't open it: {error}") from None
        try:
            self._json = JSONLFile(json_file, self._write_failed) if json_file is not None else None
        except OSError as error:
            self._text.close()
            raise ValueError(
                f"MetricLogger(json_file={str(json_file)!r}): can't open it: {error}"
            ) from None

        elapsed = AddElapsed()
        sinks: list[Any] = [WriteText(self._text.put, text_renderer, levelno)] if self.is_lead else []
        if self._json is not None:
            sinks.append(WriteLines(self._json.write_held, json_renderer))  # under self._lock
        ranked = [AddRank(self.rank.rank, self.rank.world_size)] if self.rank.distributed else []
        chain = [CopyPayload(), *redactor, elapsed, memory, *ranked, ConvertValues(), *sinks]
        self._delivery: BackgroundDelivery | None = None
        if not self.is_lead:
            final: Any = _drop
        elif background_hooks and not strict_hooks:
            on_hook_thread = DispatchHooks(self._hooks, self._defer_failure)
            self._delivery = BackgroundDelivery(
                on_hook_thread.deliver,
                hook_queue_size,
                name=f"speedtronic-hooks-{number}",
            )
            final = HandOff(self._hooks, self._delivery.submit, final=False)
        else:
            final = DispatchHooks(self._hooks, self._hook_failed, final=False)
        self._chain = _own_chain([*chain, final])
        self._report_chain = _own_chain([CopyPayload(), elapsed, *ranked, ConvertValues(), *sinks, _drop])
        _exit_and_fork.remember(self)
        _exit_and_fork.guard_across_fork(self)

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
        return MappingProxyType(self._hook_errors)

    @property
    def every_steps(self) -> int:
        return self._cadence.every_steps

    @property
    def closed(self) -> bool:
        return self._closed

    def emit(self, event: str, payload: Mapping[Any, Any]) -> None:
        """Log one event; a ``train_step`` skipped by the cadence returns before doing anything.

        Never raises because of the payload or a hook (unless ``strict_hooks``); raises
        ``LoggerClosedError`` after ``close()`` and ``TypeError`` for a payload that is no mapping.
        """
        try:
            admitted = self._admits(event, payload)  # after close(), this raises LoggerClosedError
        except AttributeError:
            admitted = True  # not a mapping: said below
        if not admitted:
            return
        if type(payload) is not dict and not isinstance(payload, Mapping):
            raise TypeError(f"emit({event!r}): payload must be a mapping, got {type(payload).__name__}")
        lock = self._lock
        lock.acquire()  # not ``with``: its __enter__/__exit__ calls cost 0.1 µs an event
        try:
            if self._closed:
                raise LoggerClosedError(f"emit({event!r}) raced close(); the event was not logged")
            try:
                self._chain.run(EVENT_LEVELS.get(event, "info"), event, payload)
            except (HookError, SpeedtronicWarning):
                raise
            except Exception as error:
                self._write_failed(error, f"rendering {event!r}")
            # Earlier background failures are reported after this event is written: reporting may
            # raise (an escalated warning, a hook's SystemExit), and must not cost the event.
            if self._deferred or (self._delivery is not None and self._delivery.fatal is not None):
                self._report_deferred()
        finally:
            lock.release()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the hooks have received every event emitted so far, then report their failures.

        Returns ``False`` if ``timeout`` (seconds) ran out first. With ``background_hooks=False``
        there is nothing to wait for.
        """
        if self._closed:
            return True
        delivered = self._delivery.flush(timeout) if self._delivery is not None else True
        with self._lock:
            if not self._closed:
                self._report_deferred()
                self._text.flush()
        return delivered

    def close(self) -> None:
        """Deliver queued events, close every hook that has ``close()``, then the files. Idempotent.

        A failure on the way (a hook's close, a warning escalated to an error) doesn't stop the
        rest; the first one is raised once everything is closed.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._admits = self._refuse
            errors: list[BaseException] = []
            for step in (self._drain, self._report_deferred, self._close_hooks):
                try:
                    step()
                except BaseException as error:
                    errors.append(error)
            self._text.close()
            if self._json is not None:
                self._json.close()
            _exit_and_fork.forget(self)
        if errors:
            raise errors[0]

    def __enter__(self) -> MetricLogger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<MetricLogger {state} every_steps={self.every_steps} hooks={len(self._hooks)}>"

    # -- the event path -------------------------------------------------------------------------

    def _refuse(self, event: str, payload: Mapping[Any, Any]) -> bool:
        raise LoggerClosedError(f"emit({event!r}) on a closed MetricLogger; create a new one")

    def _drain(self) -> None:
        if self._delivery is None:
            return
        undelivered = self._delivery.close(self._close_timeout_s)
        if undelivered:
            self._report(
                "hook_error",
                {"hook": "*", "phase": "drain", "undelivered": undelivered,
                 "timeout_s": self._close_timeout_s},
            )
            warnings.warn(
                f"speedtronic: {undelivered} event(s) not delivered to hooks within "
                f"close_timeout_s={self._close_timeout_s}",
                LoggingFailureWarning,
                stacklevel=3,
            )

    # -- failures -----------------------------------------------------------------------------

    def _defer_failure(self, hook: object, error: Exception, during: str) -> None:
        """On the hook thread: keep the failure for the emitting thread, which reports it."""
        self._deferred.append((hook, error, during))

    def _report_deferred(self) -> None:
        while self._deferred:
            self._hook_failed(*self._deferred.popleft())
        fatal = self._delivery.fatal if self._delivery is not None else None
        if fatal is not None:
            self._delivery.fatal = None  # type: ignore[union-attr]  # not None: fatal came from it
            raise fatal

    def _close_hooks(self) -> None:
        seen: set[int] = set()
        for hook in list(self._hooks):
            if id(hook) in seen:
                continue
            seen.add(id(hook))
            try:
                close_hook(hook)
            except Exception as error:
                self._hook_failed(hook, error, "close")
        for name, failures in self._hook_errors.items():
            self._report("hook_error", {"hook": name, "phase": "total", "failures": failures})

    def _name_of(self, hook: object) -> str:
        known = self._hook_names.get(id(hook))
        if known is not None:
            return known[1]
        base = hook_name(hook)
        taken = {name for _, name in self._hook_names.values()}
        name = next(f"{base}#{n}" if n > 1 else base for n in itertools.count(1)
                    if (f"{base}#{n}" if n > 1 else base) not in taken)
        self._hook_names[id(hook)] = (hook, name)
        return name

    def _hook_failed(self, hook: object, error: Exception, during: str) -> None:
        """Count a hook's failure; report the 1st, 2nd, 4th, 8th... (the 1st with its traceback)."""
        name = self._name_of(hook)
        failures = self._hook_errors[name] = self._hook_errors.get(name, 0) + 1
        if _is_power_of_two(failures):
            fields: dict[str, Any] = {
                "hook": name,
                "phase": "close" if during == "close" else "on_event",
                "during": during,
                "error": f"{type(error).__name__}: {error}",
                "failures": failures,
            }
            if failures == 1:
                fields["traceback"] = "".join(traceback.format_exception(error))
            self._report("hook_error", fields)
        if self._strict_hooks:  # the HookError is the report; a warning would only repeat it
            raise HookError(f"hook {name!r} failed during {during!r}: {error}") from error
        if _is_power_of_two(failures):
            warnings.warn(
                f"speedtronic hook {name!r} failed ({failures} so far) during {during!r}: "
                f"{type(error).__name__}: {error}",
                HookFailureWarning,
                stacklevel=2,
            )

    def _write_failed(self, error: BaseException, where: str) -> None:
        """Count a lost record; warn on the 1st, 2nd, 4th, 8th... so a full disk is never silent."""
        self.write_errors += 1
        if _is_power_of_two(self.write_errors):
            warnings.warn(
                f"speedtronic could not write a record ({where}): {type(error).__name__}: {error}; "
                f"{self.write_errors} record(s) lost so far",
                LoggingFailureWarning,
                stacklevel=2,
            )

    def _report(self, event: str, fields: dict[str, Any]) -> None:
        """Write a record of the logger's own (never passed to hooks) to the text log and JSONL."""
        self._report_chain.run(level_for(event), event, fields)
