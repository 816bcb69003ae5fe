"""The library's one piece of process state: loggers still open when the interpreter exits.

Each open ``MetricLogger`` is held weakly; at exit, the ones the user forgot are closed, so their
files are flushed, their queued events delivered and their hooks (a W&B run, a TensorBoard writer)
finished. That has to happen before an SDK's own exit handler tears the SDK down; ``atexit`` runs
handlers last-registered-first, so ``run_first_at_exit()`` moves ours to the front again. It runs
whenever a logger is created, and SDK-backed hooks call it after registering their own handler.
"""

from __future__ import annotations

import atexit
import contextlib
import weakref
from typing import Protocol

__all__ = ["forget", "remember", "run_first_at_exit"]


class _Closable(Protocol):
    def close(self) -> None: ...


_open: weakref.WeakSet[_Closable] = weakref.WeakSet()


def remember(logger: _Closable) -> None:
    _open.add(logger)
    run_first_at_exit()


def run_first_at_exit() -> None:
    """Make closing the open loggers the next exit handler to run (before those registered so far)."""
    atexit.unregister(_close_open_loggers)
    atexit.register(_close_open_loggers)


def forget(logger: _Closable) -> None:
    _open.discard(logger)


def _close_open_loggers() -> None:
    for logger in list(_open):
        with contextlib.suppress(Exception):  # at exit, a failing close must not stop the others
            logger.close()
