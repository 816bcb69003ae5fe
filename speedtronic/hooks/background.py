"""``BackgroundHooks``: hooks called on a worker thread, for hooks that may be slow or may block."""

from __future__ import annotations

import atexit
import contextvars
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from speedtronic.checks import check_count, check_seconds
from speedtronic.hooks.dispatch import DispatchHooks, HookFailures, OnError, close_hook

__all__ = [
    "DEFAULT_CLOSE_TIMEOUT_S",
    "DEFAULT_PUT_TIMEOUT_S",
    "DEFAULT_QUEUE_SIZE",
    "BackgroundHooks",
    "HooksStalled",
    "background",
    "check_options",
]

DEFAULT_QUEUE_SIZE = 10_000
"""Events waiting for the worker, by default, before ``on_event`` waits for room."""

DEFAULT_PUT_TIMEOUT_S = 1.0
"""Longest ``emit`` waits for room in a full queue before dropping the event for the hooks."""

DEFAULT_CLOSE_TIMEOUT_S = 30.0
"""Longest ``close()`` waits for the worker to deliver what is queued (``MetricLogger``'s default too)."""

_STOP = object()
_live: weakref.WeakSet[BackgroundHooks] = weakref.WeakSet()


class HooksStalled(RuntimeError):
    """The hooks' queue was full (for ``put_timeout_s``, or still, with no event taken since): this event
    was not delivered to them."""


def check_options(
    queue_size: object,
    put_timeout_s: object,
    close_timeout_s: object,
    names: tuple[str, str, str] = ("queue_size", "put_timeout_s", "close_timeout_s"),
) -> None:
    """Check a worker's options (``ValueError`` naming the argument): the one check of them, for
    ``BackgroundHooks`` and for ``MetricLogger``'s ``hook_queue_size``/``hook_put_timeout_s``/
    ``close_timeout_s``, which it checks before opening a file, whether or not it runs a worker."""
    check_count(names[0], queue_size)
    check_seconds(names[1], put_timeout_s)
    check_seconds(names[2], close_timeout_s)


class BackgroundHooks:
    """A hook that hands each event to a worker thread, which calls ``hooks`` in order.

    Args:
        hooks: the hooks to call (any sequence; a list you keep changing is read at each event).
        on_error: receives ``(hook, error, event)`` for a hook's ``Exception`` (default: a
            ``HookFailures``, which counts and warns; added to a ``MetricLogger``'s hooks, the
            logger's failure policy: ``report_to``).
        queue_size: events waiting for the worker before ``on_event`` waits for room.
        put_timeout_s: how long ``on_event`` waits for room before dropping the event for these hooks
            (``HooksStalled``); once per stall, as the module says.
        close_timeout_s: how long ``close()`` waits for the worker when not given a timeout (a logger
            closing this hook calls ``close()``): a stalled hook never makes closing hang.
        name: the worker thread's name.

    A hook's ``BaseException`` (``SystemExit``) is raised from the next ``on_event``, ``flush`` or
    ``close`` on the emitting side. ``close`` closes the hooks only once the worker has finished with
    them: a hook still inside ``on_event`` past the timeout is left open and reported.
    """

    def __init__(
        self,
        hooks: Iterable[Any],
        *,
        on_error: Callable[[object, Exception, str | None], None] | None = None,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        put_timeout_s: float = DEFAULT_PUT_TIMEOUT_S,
        close_timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S,
        name: str = "speedtronic-hooks",
    ) -> None:
        check_options(queue_size, put_timeout_s, close_timeout_s)
        self._close_timeout_s = close_timeout_s
        self._on_error: OnError = on_error or HookFailures()
        self._own_on_error = on_error is not None
        self.hooks = hooks if isinstance(hooks, list) else list(hooks)
        self._dispatch = DispatchHooks(self.hooks, on_error=self._failed, consume=False)
        self._queue_size = queue_size
        self._put_timeout_s = put_timeout_s
        self._name = name
        self.dropped = 0
        """Events dropped for these hooks because the queue stayed full (or arrived after ``close``)."""
        self.fatal: BaseException | None = None
        self._reset()
        _live.add(self)

    @property
    def close_timeout_s(self) -> float:
        """How long ``close()`` waits for the worker when not given a timeout."""
        return self._close_timeout_s

    def report_to(self, on_error: OnError) -> None:
        """Send the hooks' failures to ``on_error`` (the logger these hooks were added to:
        ``MetricLogger.hooks``), unless this was made with an ``on_error`` of its own."""
        if not self._own_on_error:
            self._on_error = on_error

    def _failed(self, hook: object, error: Exception, during: str | None) -> None:
        self._on_error(hook, error, during)

    @property
    def writes_console(self) -> bool:
        """Whether one of ``hooks`` prints each event through the app's own logger
        (``StructlogHook.writes_console``): the logger's default console then stays silent, as it does
        for such a hook called inline."""
        return any(getattr(hook, "writes_console", False) for hook in self.hooks)

    def _reset(self) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(self._queue_size)
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()
        self._closed = getattr(self, "_closed", False)  # closed in a parent: closed in its child too
        self._abandoned = False  # close() timed out: the worker delivers nothing more
        self._close_after_event = False  # close() from the worker: close the hooks after this event
        self._taken = 0  # events the worker has taken from the queue: its progress
        self._stalled_at = -1  # ``_taken`` when a put last timed out: no waiting again until it moves
        self._in_queue = 0  # the thread inside a queue call here (it may hold the queue's lock)

    def on_event(self, event: str, payload: dict[str, Any], *, level: str = "info") -> None:
        """Queue the event for the worker (waiting at most ``put_timeout_s`` for room); ``level`` is
        passed on to the hooks that take it."""
        self._raise_fatal()
        if self._closed:
            self.dropped += 1
            return
        if self._in_queue == threading.get_ident():  # a signal handler interrupted our own hand-over
            self.dropped += 1
            raise HooksStalled(
                f"{event!r} emitted from a signal handler that interrupted this thread's hand-over "
                f"to the hooks: not delivered to them ({self.dropped} dropped so far)"
            )
        self._in_queue = threading.get_ident()
        try:
            thread = self._thread or self._start()
            item = (contextvars.copy_context(), event, payload, level)
            # No waiting on ourselves (a hook emitting), nor again while the worker has taken nothing
            # since the last wait ran out (a stalled hook costs put_timeout_s once, not per event).
            waits = thread is not threading.current_thread() and self._stalled_at != self._taken
            if waits:
                self._queue.put(item, timeout=self._put_timeout_s)
            else:
                self._queue.put_nowait(item)
        except queue.Full:
            self._stalled_at = self._taken
            self.dropped += 1
            waited = f"for {self._put_timeout_s} s" if waits else "and no event taken since"
            raise HooksStalled(
                f"hooks' queue full {waited} (a hook is stalled or slow): "
                f"{event!r} not delivered to them ({self.dropped} dropped so far)"
            ) from None
        finally:
            self._in_queue = 0

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued event is delivered; ``False`` if ``timeout`` (seconds) ran out.

        Returns at once on the worker itself (a hook flushing its own logger).
        """
        thread = self._thread
        interrupted = self._in_queue == threading.get_ident()  # a signal handler: don't take the lock
        if interrupted or thread is None or thread is threading.current_thread() or not thread.is_alive():
            done = self._queue.unfinished_tasks == 0
        else:
            self._in_queue = threading.get_ident()
            try:
                with self._queue.all_tasks_done:
                    done = self._queue.all_tasks_done.wait_for(
                        lambda: self._queue.unfinished_tasks == 0, timeout
                    )
            finally:
                self._in_queue = 0
        self._raise_fatal()
        return done

    def close(self, timeout: float | None = None) -> int:
        """Deliver what is queued (within ``timeout`` seconds, default ``close_timeout_s``), stop the
        worker, close the hooks.

        Returns how many events were not delivered. Past the timeout, nothing more is delivered and the
        hooks are not closed (one may still be running); each is reported to ``on_error`` as not closed.
        """
        if self._closed:
            return 0
        self._closed = True
        timeout = self._close_timeout_s if timeout is None else timeout
        thread = self._thread
        undelivered = 0
        if thread is not None and self._in_queue == threading.get_ident():  # from a signal handler
            self._abandoned = True  # that interrupted a hand-over: the worker delivers nothing more
            undelivered = self._queue.unfinished_tasks  # read without the lock the frame may hold
            for hook in self.hooks:
                self._on_error(hook, RuntimeError("closed from a signal handler: not closed"), None)
            return undelivered
        if thread is not None and thread is not threading.current_thread():
            deadline = time.monotonic() + timeout
            try:  # the worker stops at the deadline either way
                self._queue.put(_STOP, timeout=timeout)
                stop_queued = 1
            except queue.Full:
                stop_queued = 0
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                self._abandoned = True
                self._dispatch.stop()  # no hook after the one still running is called
                # what is queued, less the stop marker, plus the event being delivered, still running
                undelivered = self._queue.unfinished_tasks - stop_queued
                for hook in self.hooks:
                    self._on_error(hook, TimeoutError(f"still running after {timeout} s: not closed"), None)
                return max(undelivered, 0)
        elif thread is not None:  # a hook closing its logger from this worker: what is queued stays
            undelivered = self._queue.qsize()  # undelivered, never handed to closed hooks, and the
            self._abandoned = True  # hooks are closed once the event being delivered is done (_run)
            self._close_after_event = True
            return undelivered
        self._close_hooks()
        self._raise_fatal()
        return undelivered

    def _close_hooks(self) -> None:
        for hook in list(self.hooks):
            try:
                close_hook(hook)
            except Exception as error:
                self._on_error(hook, error, None)

    def _start(self) -> threading.Thread:
        with self._starting:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                thread.start()
                self._thread = thread
            return self._thread

    def _run(self) -> None:
        get, done = self._queue.get, self._queue.task_done
        while True:
            item = get()
            self._taken += 1
            try:
                if item is _STOP:
                    return
                if self._abandoned:
                    continue
                context, event, payload, level = item
                try:
                    context.run(self._dispatch, None, level, {**payload, "event": event})
                except BaseException as error:  # a hook's SystemExit: for the emitting side to raise
                    self.fatal = error
                if self._close_after_event:  # a hook closed its logger during this event
                    self._close_hooks()
                    return
            finally:
                done()

    def _raise_fatal(self) -> None:
        fatal, self.fatal = self.fatal, None
        if fatal is not None:
            raise fatal


def background(hook: Any, **options: Any) -> BackgroundHooks:
    """``hook`` called on a worker thread of its own: ``BackgroundHooks([hook], **options)``."""
    return BackgroundHooks([hook], **options)


def _flush_at_exit() -> None:
    """Deliver what is queued before the interpreter ends (a forked child's last events too)."""
    for hooks in list(_live):
        if not hooks._closed:
            hooks.flush(hooks._put_timeout_s)


def _after_fork_in_child() -> None:
    # The worker did not survive the fork, and what the parent had queued is the parent's to deliver.
    for hooks in list(_live):
        hooks._reset()


atexit.register(_flush_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
