"""The library's one piece of process state: loggers still open when the interpreter exits.

Each open ``MetricLogger`` is held weakly; at exit, the ones the user forgot are closed, so their
files are flushed and their hooks (a W&B run, a TensorBoard writer) are finished.
"""

from __future__ import annotations

import atexit
import contextlib
import weakref
from typing import Protocol

__all__ = ["forget", "remember"]


class _Closable(Protocol):
    def close(self) -> None: ...


_open: weakref.WeakSet[_Closable] = weakref.WeakSet()


def remember(logger: _Closable) -> None:
    _open.add(logger)


def forget(logger: _Closable) -> None:
    _open.discard(logger)


@atexit.register
def _close_open_loggers() -> None:
    for logger in list(_open):
        with contextlib.suppress(Exception):  # at exit, a failing close must not stop the others
            logger.close()
