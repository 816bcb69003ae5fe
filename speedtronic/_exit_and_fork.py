"""The library's process state: loggers still open at exit (closed before an SDK's own exit handler
runs), and the locks that must survive a fork (taken before it, new in the child)."""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import weakref
from typing import Any, Protocol

__all__ = [
    "FORK_WAIT_S",
    "close_all",
    "close_loggers_first_at_exit",
    "forget",
    "guard_across_fork",
    "remember",
    "reopen_all",
]

FORK_WAIT_S = 1.0
"""How long a fork waits for each guarded lock before going ahead without it."""


class _Closable(Protocol):
    def close(self) -> None: ...

    def close_now(self) -> None: ...

    def reopen(self) -> None: ...


class _Locked(Protocol):
    _lock: Any


_open: weakref.WeakSet[_Closable] = weakref.WeakSet()
_guarded: weakref.WeakKeyDictionary[_Locked, None] = weakref.WeakKeyDictionary()
_held: list[Any] = []


def remember(logger: _Closable) -> None:
    _open.add(logger)
    close_loggers_first_at_exit()


# atexit runs handlers last-registered-first, and an SDK registers its own when its run starts: the
# loggers must be closed (files flushed, queued events delivered, hooks finished) before the SDK is
# torn down, so each new logger, and each SDK-backed hook after registering, moves ours to the front.
def close_loggers_first_at_exit() -> None:
    """Make closing the open loggers the next exit handler to run (before those registered so far)."""
    atexit.unregister(close_all)
    atexit.register(close_all)


def forget(logger: _Closable) -> None:
    _open.discard(logger)


def guard_across_fork(owner: _Locked) -> None:
    """Take ``owner._lock`` (an ``RLock``) around every fork, and give the child a new one."""
    _guarded[owner] = None


@atexit.register
def close_all() -> None:
    """Close every logger still open (at exit, or from ``speedtronic.lifecycle.close_on_signals``),
    also one whose ``emit`` the signal interrupted: the process ends right after."""
    for logger in list(_open):
        with contextlib.suppress(Exception):  # a failing close must not stop the others
            logger.close_now()


def reopen_all() -> None:
    """Reopen every open logger's files (from ``speedtronic.lifecycle.reopen_on_signals``)."""
    for logger in list(_open):
        with contextlib.suppress(Exception):  # a failing reopen must not stop the others
            logger.reopen()


# os.fork copies only the forking thread: a lock another thread held at that moment would stay held in
# the child forever. So each guarded lock is taken before the fork (at most FORK_WAIT_S for an emit in
# flight: the child sees no half-written state) and is new in the child. The child also forgets the
# parent's loggers: its exit never finishes the parent's W&B run or writes a TensorBoard buffer again.
def _before_fork() -> None:
    # Newest first: a logger is guarded after its files, and emit takes the logger's lock first.
    for owner in reversed(list(_guarded)):
        lock = owner._lock
        if lock.acquire(timeout=FORK_WAIT_S):
            _held.append(lock)


def _after_fork_in_parent() -> None:
    while _held:
        _held.pop().release()


def _after_fork_in_child() -> None:
    _held.clear()
    for owner in list(_guarded):
        owner._lock = threading.RLock()
        forked = getattr(owner, "_forked", None)  # state that belonged to the parent's threads
        if callable(forked):
            forked()
    _open.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
    )
