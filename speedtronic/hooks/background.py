"""Background hook delivery: slow hooks (a TensorBoard writer, W&B) run off the training thread.

One worker thread per logger calls the hooks, so they still never run concurrently and see events
in the order they were emitted. Submitting is a ``deque.append``: the worker is not woken per event
(each wake-up costs the submitting thread a lock and, in a tight loop, a GIL hand-off; measured:
waking it at most once a millisecond made both a tight loop and a TensorBoard run slower) but when
``WAKE_BATCH`` events are waiting or every ``WAKE_INTERVAL_S``, and then delivers everything queued.
The queue is bounded: when
it is full, ``submit`` blocks until there is room (it never drops). ``close`` drains within a
timeout and says how many events it could not deliver.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["WAKE_BATCH", "WAKE_INTERVAL_S", "BackgroundDelivery"]

WAKE_INTERVAL_S = 0.05
"""Longest a delivered event waits before its hooks see it (``flush()`` doesn't wait for it)."""

WAKE_BATCH = 256
"""Events waiting that wake the worker before the interval is up."""

_STOP = object()


class _Flushed(threading.Event):
    """Queued by ``flush``: set by the worker once everything before it is delivered."""
_live: weakref.WeakSet[BackgroundDelivery] = weakref.WeakSet()


class BackgroundDelivery:
    """Runs each submitted ``(context, hooks, event_dict)`` as ``context.run(deliver, hooks,
    event_dict)``, in order, on a worker thread of its own.

    ``context`` is a ``contextvars.Context`` (the submitter's copy). ``deliver`` must not raise
    ``Exception`` (the hook stage catches those); anything else it raises is kept in ``fatal`` for the
    submitting side to re-raise, and delivery goes on.
    """

    def __init__(self, deliver: Callable[..., None], maxsize: int, name: str) -> None:
        # maxsize is MetricLogger(hook_queue_size=...), checked there before any file is opened.
        self._deliver, self._maxsize, self._name = deliver, maxsize, name
        self._batch = min(WAKE_BATCH, max(1, maxsize // 2))
        self.fatal: BaseException | None = None
        self._reset()
        _live.add(self)

    def _reset(self) -> None:
        self._queue: collections.deque[Any] = collections.deque()
        self._wake = threading.Event()
        self._room = threading.Event()
        self._stopping = False  # close() was called: flush() no longer waits
        self._stopped = False  # close() timed out: the worker delivers nothing more
        self._submitted = 0  # written by submitters only (under the logger's lock)
        self._delivered = 0  # written by the worker only
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> int:
        """Items submitted but not yet delivered."""
        return self._submitted - self._delivered

    def submit(self, item: tuple[Any, Any, Any]) -> None:
        """Queue ``(context, hooks, event_dict)``; blocks while ``maxsize`` items are waiting."""
        if self._thread is None:
            self._start()
        queue = self._queue
        if len(queue) >= self._maxsize:
            self._wait_for_room()
        queue.append(item)
        self._submitted += 1
        if len(queue) == self._batch:  # once per crossing: Event.set takes a lock
            self._wake.set()

    def flush(self, timeout: float | None) -> bool:
        """Wait until everything submitted so far is delivered; False if ``timeout`` ran out.

        Doesn't wait where waiting could never end: with no worker, once ``close`` has been called,
        or on the worker itself (a hook that flushes its own logger).
        """
        thread = self._thread
        if thread is None or self._stopping or not thread.is_alive() or thread is threading.current_thread():
            return self.pending == 0
        done = _Flushed()
        self._queue.append(done)
        self._wake.set()
        return done.wait(timeout)

    def close(self, timeout: float | None) -> int:
        """Deliver what is queued (up to ``timeout`` seconds), stop the worker; return undelivered.

        Past the timeout the worker delivers nothing more: what is still queued is dropped and
        counted, so no hook receives an event after ``close`` returns (a hook still inside
        ``on_event`` finishes that one call).
        """
        thread = self._thread
        self._stopping = True
        if thread is None:
            return 0
        self._queue.append(_STOP)
        self._wake.set()
        thread.join(timeout)
        if not thread.is_alive():
            return 0
        self._stopped = True
        self._queue.clear()
        return self.pending

    def _wait_for_room(self) -> None:
        while len(self._queue) >= self._maxsize and self._thread is not None:
            self._room.clear()
            self._wake.set()
            self._room.wait(WAKE_INTERVAL_S)

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        queue, wake, room, deliver = self._queue, self._wake, self._room, self._deliver
        while True:
            wake.wait(WAKE_INTERVAL_S)
            wake.clear()
            while queue:
                item = queue.popleft()
                if self._stopped:
                    return
                if type(item) is not tuple:  # a flush's marker, or _STOP
                    if item is _STOP:
                        return
                    item.set()
                    continue
                context, hooks, event_dict = item
                try:
                    context.run(deliver, hooks, event_dict)
                except BaseException as error:  # a hook's SystemExit: hand it to the emitting thread
                    self.fatal = error
                self._delivered += 1
            room.set()
            if self._stopped:
                return


def _after_fork_in_child() -> None:
    # The worker thread did not survive the fork, and what the parent had queued is the parent's
    # to deliver: start empty, so nothing is delivered twice.
    for delivery in list(_live):
        delivery._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
