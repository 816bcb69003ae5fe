"""Background hook delivery: slow hooks (a TensorBoard writer, W&B) run off the training thread.

One worker thread per logger calls the hooks, so they still never run concurrently and see events
in the order they were emitted. The queue is bounded: when it is full, ``submit`` blocks (it never
drops). ``close`` drains within a timeout and says how many events it could not deliver.
"""

from __future__ import annotations

import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["BackgroundDelivery"]

_STOP = object()
_live: weakref.WeakSet[BackgroundDelivery] = weakref.WeakSet()


class BackgroundDelivery:
    """Calls ``deliver(item)`` for each submitted item, in order, on a worker thread of its own.

    ``deliver`` must not raise ``Exception`` (the hook stage catches those); anything else it raises
    is kept in ``fatal`` for the submitting side to re-raise, and delivery goes on.
    """

    def __init__(self, deliver: Callable[[Any], None], maxsize: int, name: str) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise ValueError(f"hook_queue_size must be an integer >= 1, got {maxsize!r}")
        self._deliver, self._maxsize, self._name = deliver, maxsize, name
        self.fatal: BaseException | None = None
        self._reset()
        _live.add(self)

    def _reset(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._slots = threading.Semaphore(self._maxsize)
        self._submitted = 0  # written by submitters only (under the logger's lock)
        self._delivered = 0  # written by the worker only
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> int:
        """Items submitted but not yet delivered."""
        return self._submitted - self._delivered

    def submit(self, item: Any) -> None:
        """Queue ``item``; blocks while ``maxsize`` items are waiting."""
        if self._thread is None:
            self._start()
        self._slots.acquire()
        self._submitted += 1
        self._queue.put(item)

    def flush(self, timeout: float | None) -> bool:
        """Wait until everything submitted so far is delivered; False if ``timeout`` ran out."""
        if self._thread is None:
            return True
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout)

    def close(self, timeout: float | None) -> int:
        """Deliver what is queued (up to ``timeout`` seconds), stop the worker; return undelivered."""
        thread = self._thread
        if thread is None:
            return 0
        self._queue.put(_STOP)
        thread.join(timeout)
        return self.pending if thread.is_alive() else 0

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        get, deliver, release = self._queue.get, self._deliver, self._slots.release
        while True:
            item = get()
            if item is _STOP:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                deliver(item)
            except BaseException as error:  # a hook's SystemExit: hand it to the emitting thread
                self.fatal = error
            finally:
                self._delivered += 1
                release()


def _after_fork_in_child() -> None:
    # The worker thread did not survive the fork, and what the parent had queued is the parent's
    # to deliver: start empty, so nothing is delivered twice.
    for delivery in list(_live):
        delivery._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
