"""Opt-in process lifecycle helpers: close every open logger on SIGTERM/SIGINT, reopen its files on
SIGHUP. speedtronic installs no signal handler unless asked to."""

from __future__ import annotations

import functools
import os
import signal
import threading
from types import FrameType
from typing import Any

from speedtronic import _exit_and_fork
from speedtronic._exit_and_fork import close_loggers_first_at_exit

__all__ = ["close_loggers_first_at_exit", "close_on_signals", "reopen_on_signals"]


def close_on_signals(*signums: int) -> None:
    """On SIGTERM (or each of ``signums``), close every open ``MetricLogger``, then do what the signal
    would have done without this: call the previous Python handler, or end the process by the signal
    itself (so a scheduler still sees "killed by SIGTERM"). An ignored signal stays ignored.

    Call it from the main thread (Python's rule for signal handlers). Don't chain it onto a handler that
    keeps training after the signal: the loggers are closed by then.
    """
    for signum in signums or (signal.SIGTERM,):
        previous = signal.getsignal(signum)
        signal.signal(signum, functools.partial(_close_then, previous))


def _close_then(previous: Any, signum: int, frame: FrameType | None) -> None:
    if previous == signal.SIG_IGN:
        return
    _exit_and_fork.close_all()
    if callable(previous):
        previous(signum, frame)
        return
    signal.signal(signum, signal.SIG_DFL)
    signal.pthread_kill(threading.get_ident(), signum)  # delivered to this thread, before returning
    os._exit(128 + signum)  # reached only if the signal is blocked; the loggers are closed already


def reopen_on_signals(*signums: int) -> None:
    """On SIGHUP (or each of ``signums``), reopen every open ``MetricLogger``'s files, then call the
    previous Python handler if there was one: logrotate's ``postrotate`` can send ``kill -HUP``.

    The handler only reopens files: it never ends the process. A file whose write the signal
    interrupted is left to that write and reopened right before its next one (``LineFile.reopen``).
    Call it from the main thread.
    """
    for signum in signums or (signal.SIGHUP,):
        previous = signal.getsignal(signum)
        signal.signal(signum, functools.partial(_reopen_then, previous))


def _reopen_then(previous: Any, signum: int, frame: FrameType | None) -> None:
    _exit_and_fork.reopen_all()
    if callable(previous):
        previous(signum, frame)
