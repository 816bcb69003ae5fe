"""``MetricLogger``: one training event in, a text line, a JSONL record and hook calls out.

This module is the logger's lifecycle: it opens the files, builds its chain (``speedtronic.chain``),
emits, flushes, reopens and closes."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

from structlog.typing import Processor

from speedtronic import _exit_and_fork
from speedtronic.chain import Chain, build_chain
from speedtronic.chain import build_processors as build_processors  # the old path (deprecated)
from speedtronic.distributed import RankInfo, detect_rank, is_lead
from speedtronic.errors import (
    EventPayloadError,
    HookError,
    LoggerClosedError,
    SpeedtronicWarning,
)
from speedtronic.events import level_for
from speedtronic.failures import FailurePolicy
from speedtronic.hooks import HookList
from speedtronic.hooks.background import (
    DEFAULT_CLOSE_TIMEOUT_S,
    DEFAULT_PUT_TIMEOUT_S,
    DEFAULT_QUEUE_SIZE,
    BackgroundHooks,
    check_options,
)
from speedtronic.hooks.dispatch import close_hook, flush_hook
from speedtronic.levels import method_for, threshold
from speedtronic.processors import DEFAULT_MAX_LINE_BYTES
from speedtronic.processors.memory import memory_usage_bytes
from speedtronic.record import rank_path
from speedtronic.record.text import DEFAULT_FLOAT_DIGITS
from speedtronic.sinks import LineFile, TextStream, open_text_sink

if TYPE_CHECKING:  # imported where used: only a logger with rules or a stack signal needs them
    from speedtronic.alerts import Rule, RuleSet
    from speedtronic.stacks import StackDump

__all__ = ["MetricLogger", "memory_usage_bytes"]


class MetricLogger:
    """Turns training events into a text log, a JSONL record and hook calls.

    Args:
        level: threshold of the text log (``"DEBUG"`` ... ``"CRITICAL"``); the JSONL record and the
            hooks get every event regardless.
        file: append the text log here instead of writing it to ``stream``.
        json_file: append one JSON object per event here (parent directories are created).
        every_steps: log a ``train_step`` only when its ``step`` is a multiple of this.
        stream: text stream for the text log when ``file`` is not given. By default, whatever
            ``sys.stdout`` is at each line (as for ``print()``: rich's and tqdm's redirects take the
            lines too), and nothing while a hook such as ``StructlogHook`` writes the console.
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
        max_line_bytes: longest text line and JSONL line (newline included). A wider JSONL record is
            written in parts, every field kept (``speedtronic.record``); a wider text line keeps the
            fields that fit and counts the others; a single value larger than that is truncated with a
            marker. ``None`` or ``0``: no limit.
        float_digits: significant digits of floats in the text line (``None``: all of them); the
            JSONL record keeps every digit.
        local_time: write the text line's time in the machine's time zone, with its offset
            (``2026-01-01 07:00:00-05:00``); by default both the text line and the JSONL record are
            in UTC, and name the same instant.
        clock: the wall clock, seconds since the epoch (``time.time``): for tests needing fixed time.
        stack_signal: a signal (``signal.SIGUSR2``) that makes this process write every thread's
            Python stack to ``stacks/rank<r>-<time>.txt`` beside ``json_file`` (``faulthandler``, so
            also while a thread holds the GIL); ``stack_notes`` holds the keys to put in your
            ``train_start`` for ``speedtronic tail --dump-stacks``. Unregistered at ``close()``.
        alerts: rules run on every logged record (``speedtronic.alerts``: built-in rules, your own,
            or a ``RuleSet``); each alert is an ``alert`` record written and delivered right after
            the record that raised it, in the same ``emit``. None by default.

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
        hook_queue_size: int = DEFAULT_QUEUE_SIZE,
        hook_put_timeout_s: float = DEFAULT_PUT_TIMEOUT_S,
        close_timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S,
        rank: RankInfo | None = None,
        lead_rank: int | None = 0,
        redact: bool | Iterable[str] = True,
        max_line_bytes: int | None = DEFAULT_MAX_LINE_BYTES,
        float_digits: int | None = DEFAULT_FLOAT_DIGITS,
        local_time: bool = False,
        clock: Callable[[], float] = time.time,
        alerts: RuleSet | Iterable[Rule] | None = None,
        stack_signal: int | None = None,
    ) -> None:
        # Every argument is checked before any file is opened.
        if stack_signal is not None and (
            not isinstance(stack_signal, int) or isinstance(stack_signal, bool) or json_file is None
        ):
            raise ValueError(
                f"MetricLogger(stack_signal={stack_signal!r}): expected a signal number, with json_file= "
                "(the stacks go to stacks/ beside it)"
            )
        levelno = threshold(level)
        check_options(
            hook_queue_size, hook_put_timeout_s, close_timeout_s,
            names=("MetricLogger(hook_queue_size=...)", "MetricLogger(hook_put_timeout_s=...)",
                   "MetricLogger(close_timeout_s=...)"),
        )  # fmt: skip
        if file is not None and stream is not None:
            raise ValueError("MetricLogger: pass either file= or stream= for the text log, not both")
        self.rank = rank if rank is not None else detect_rank()
        _check_ranks(self.rank, lead_rank)
        self.is_lead = is_lead(self.rank, lead_rank)
        """Whether this process writes the text log and calls the hooks."""
        self._lock = threading.RLock()
        self._failures = FailurePolicy(self._lock, strict=strict_hooks)
        self._hooks = HookList(hooks or (), on_error=self._failures.hook_failed)
        self._background: BackgroundHooks | None = None
        if self.is_lead and background_hooks and not strict_hooks:
            self._background = BackgroundHooks(
                self._hooks,
                on_error=self._failures.hook_failed,
                queue_size=hook_queue_size,
                put_timeout_s=hook_put_timeout_s,
                close_timeout_s=close_timeout_s,
                name=f"speedtronic-hooks-{id(self):x}",
            )
        called: Sequence[Any] = self._hooks if self._background is None else [self._background]

        self._closed = False
        self._depth = 0  # emits in progress on the thread holding the lock (a hook may emit)
        self._close_requested = False
        self._owner = 0  # the thread inside emit, while _depth > 0
        self._stuck = False  # close() could not get the logger from a thread stuck inside emit
        self._close_timeout_s = close_timeout_s
        self._text, self._json, created = self._open_sinks(file, stream, json_file)
        text: Callable[[str], object] | None = None
        if self._text is not None:  # the default console: silent while a hook writes the console
            text = _console(self._text, self._hooks) if file is None and stream is None else self._text.write
        try:
            self.chain: Chain = build_chain(
                text=text,
                json=self._json.write if self._json is not None else None,
                hooks=called if self.is_lead else [],
                on_hook_error=self._failures.hook_failed,
                every_steps=every_steps,
                redact=redact,
                device=device,
                rank=self.rank,
                clock=clock,
                processors=processors,
                text_level=levelno,
                max_line_bytes=max_line_bytes,
                float_digits=float_digits,
                local_time=local_time,
                alerts=alerts,
                caller="MetricLogger",
            )
            """The chain's stages by name (``speedtronic.chain.Chain``); ``chain.processors`` lists them."""
        except BaseException:  # an option the chain refused: no file is left behind for it
            _release(self._text, self._json)
            for path in created:
                path.unlink(missing_ok=True)
            raise
        self._failures.write_through(
            self.chain,
            [
                (sink, output)
                for sink, output in ((self._text, self.chain.text), (self._json, self.chain.json))
                if sink is not None and output is not None
            ],
        )
        _exit_and_fork.remember(self)
        _exit_and_fork.guard_across_fork(self)
        # A logger nobody closed releases its files and closes its hooks when it is collected; one
        # still open at exit is closed by _exit_and_fork first (so not by this finalizer).
        owned = [self._background] if self._background is not None else self._hooks if self.is_lead else []
        self._finalizer = weakref.finalize(self, _release, self._text, self._json, owned)
        self._finalizer.atexit = False
        self._stacks: StackDump | None = None
        self.stack_notes: dict[str, Any] = {}
        """With ``stack_signal``: ``pid``, ``stack_signal`` and ``stacks`` (``speedtronic.stacks``), the
        keys to put in your ``train_start`` so ``speedtronic tail --dump-stacks`` can ask for stacks."""
        if stack_signal is not None and json_file is not None:
            from speedtronic.stacks import register_stack_dump

            try:
                self._stacks = register_stack_dump(Path(json_file).parent, self.rank.rank, int(stack_signal))
            except ValueError:
                self.close()
                raise
            self.stack_notes = dict(self._stacks.notes)

    def _open_sinks(
        self,
        file: str | os.PathLike[str] | None,
        stream: IO[str] | None,
        json_file: str | os.PathLike[str] | None,
    ) -> tuple[LineFile | TextStream | None, LineFile | None, list[Path]]:
        """The text log's sink and the JSONL file's, and the files they created (not there before)."""
        on_error, on_gap = self._failures.sink_failed, self._failures.sink_gap
        text: LineFile | TextStream | None = None
        paths = [Path(p) for p in (file if self.is_lead else None, json_file) if p is not None]
        if json_file is not None:
            paths[-1] = rank_path(json_file, self.rank.rank)
        created = [path for path in paths if not path.exists()]
        try:
            text = open_text_sink(file, stream, on_error, on_gap) if self.is_lead else None
            if json_file is None:
                return text, None, created
            json_file = rank_path(json_file, self.rank.rank)
            return text, LineFile(json_file, on_error, on_gap), created
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
        return self._failures.hook_errors

    @property
    def write_errors(self) -> int:
        """Records that could not be written or rendered, over every sink; each is also reported."""
        return self._failures.write_errors

    @property
    def lost_records(self) -> Mapping[str, int]:
        """Records that could not be written, per sink (its path, or the stream's name)."""
        return self._failures.lost

    @property
    def processors(self) -> tuple[Processor, ...]:
        """The chain's stages, in order (``chain.processors``): ``CadenceFilter`` first."""
        return tuple(self.chain.processors)

    @property
    def every_steps(self) -> int:
        return self.chain.cadence.every_steps

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
        chain = self.chain
        if not chain.cadence.admits(event, payload):
            return False
        if type(payload) is not dict and not isinstance(payload, Mapping):
            raise TypeError(f"emit({event!r}): payload must be a mapping, got {type(payload).__name__}")
        method = level_for(event) if level is None else method_for(event, level)
        if self._closed:  # before the lock too: close() may have given up on an emit stuck holding it
            raise LoggerClosedError(f"emit({event!r}) on a closed MetricLogger; create a new one")
        with self._lock:
            if self._closed:
                raise LoggerClosedError(f"emit({event!r}) on a closed MetricLogger; create a new one")
            self._depth += 1
            self._owner = threading.get_ident()
            try:
                chain.run(method, event, payload)  # a payload that can't be read: reported below
            except (HookError, SpeedtronicWarning, EventPayloadError):
                raise
            except Exception as error:
                self._failures.record_failed(error, f"rendering {event!r}")
            finally:
                self._depth -= 1
                close_now = self._close_requested and not self._depth
        if close_now:  # a hook asked for close() during this event, which is now done
            self.close()
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until background hooks (``background_hooks=True``, and each ``background(hook)`` among
        the hooks) have received every event emitted so far, then until every hook that has
        ``flush(timeout)`` (``TensorboardHook``, ``OtelHook``) has its output on disk or sent;
        ``False`` if ``timeout`` (seconds, over all of them) ran out first. Every record is already
        written when ``emit`` returns. A hook's failing ``flush`` is reported as its failure
        (``hook_error``, during ``flush``) and not raised, unless ``strict_hooks`` asks for it
        (``HookError``), as for a failing ``on_event``."""
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
        for hook in self._hooks:
            for inner in hook.hooks if isinstance(hook, BackgroundHooks) else (hook,):
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    done = flush_hook(inner, left) and done
                except Exception as error:
                    self._failures.hook_failed(inner, error, "flush")
        return done

    def reopen(self) -> None:
        """Reopen the text log and JSONL files at their paths: for logrotate's ``postrotate`` (or
        ``speedtronic.lifecycle.reopen_on_signals``). Each write already follows a file moved or
        removed under it; this also lets go of the old file at once (called from a signal handler
        that interrupted a write of that file: right before its next write)."""
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
        if self._stuck:
            self._failures.stuck()  # the reports below must not wait for the lock either
        self.chain.dispatch.stop()  # an inline hook running in a stuck emit: no hook after it is called
        errors: list[BaseException] = []
        for step in (self._close_hooks, self._failures.report_totals):
            try:
                step()
            except BaseException as error:
                errors.append(error)
        self._finalizer.detach()
        self._failures.release()
        _release(self._text, self._json)
        if self._stacks is not None:
            self._stacks.close()
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
        """In a forked child: the lock is new, and no other thread of the parent is inside ``emit``
        here. The thread that forked may be (a hook forked): its ``emit`` ends in the child too."""
        if self._owner != threading.get_ident():
            self._depth, self._owner = 0, 0
        self._close_requested = False
        self._failures.forked(self._lock)

    # -- closing --------------------------------------------------------------------------------

    def _close_hooks(self) -> None:
        if self._background is not None:
            self._close_background(self._background)
            return
        if not self.is_lead:
            return
        if self._stuck:  # a hook may still be running inside another thread's emit: none is closed
            self._failures.hooks_stuck(list(self._hooks), self._close_timeout_s)
            return
        for hook in _unique(self._hooks):
            try:
                if isinstance(hook, BackgroundHooks):
                    self._close_background(hook)
                else:
                    close_hook(hook)
            except Exception as error:
                self._failures.hook_failed(hook, error, None)

    def _close_background(self, hooks: BackgroundHooks) -> None:
        """Close background hooks within their own ``close_timeout_s``; what they could not deliver
        is the failure policy's to report."""
        undelivered = hooks.close()
        if undelivered:
            self._failures.hooks_undelivered(undelivered, hooks.close_timeout_s)


def _check_ranks(rank: Any, lead_rank: Any) -> None:
    """``TypeError``/``ValueError`` naming the argument unless ``rank`` is a ``RankInfo`` of ints
    (``0 <= rank < world_size``) and ``lead_rank`` an int >= 0 or ``None``: a rank read from the
    environment (``"0"``) would match no process and silently turn off the text log and the hooks."""
    if not isinstance(rank, RankInfo):
        raise TypeError(f"MetricLogger(rank=...): expected a speedtronic.distributed.RankInfo, got {rank!r}")
    numbers = (rank.rank, rank.world_size)
    if any(type(n) is not int for n in numbers) or not 0 <= rank.rank < rank.world_size:
        raise ValueError(
            f"MetricLogger(rank={rank!r}): rank and world_size must be ints, 0 <= rank < world_size"
        )
    if lead_rank is not None and (type(lead_rank) is not int or lead_rank < 0):
        raise ValueError(
            f"MetricLogger(lead_rank={lead_rank!r}): expected an int >= 0 or None "
            "(a rank read from the environment is a string: pass int(...))"
        )


def _unique(hooks: Iterable[Any]) -> list[Any]:
    """``hooks`` without repeats (one hook registered twice is closed once), in order."""
    unique: dict[int, Any] = {}
    for hook in hooks:
        unique.setdefault(id(hook), hook)
    return list(unique.values())


def _console(sink: LineFile | TextStream, hooks: Sequence[Any]) -> Callable[[str], None]:
    """The default console's writer: each line to ``sink``, unless one of ``hooks`` writes the console
    (``writes_console``: ``StructlogHook`` prints each event through the app's own logger and its
    level filter; a line here would print the event twice). The hooks are read at each line, so a
    hook appended later counts from the next event."""

    def write(line: str) -> None:
        if not any(getattr(hook, "writes_console", False) for hook in hooks):
            sink.write(line)

    return write


def _release(text: LineFile | TextStream | None, json: LineFile | None, hooks: Iterable[Any] = ()) -> None:
    """Close a logger's files (and, for a logger collected without ``close()``, its hooks)."""
    for hook in _unique(hooks):
        with contextlib.suppress(Exception):
            close_hook(hook)
    for sink in (text, json):
        if sink is not None:
            sink.close()
