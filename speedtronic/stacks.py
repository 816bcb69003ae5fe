"""Stacks on demand: ``register_stack_dump`` makes a signal write every thread's Python stack to a file in
the run directory, for ``speedtronic tail --dump-stacks`` or ``kill -USR2 PID``."""

from __future__ import annotations

import faulthandler
import os
import signal
import time
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_STACK_SIGNAL", "StackDump", "register_stack_dump"]

DEFAULT_STACK_SIGNAL = int(getattr(signal, "SIGUSR2", 0))
"""The signal the reference trainer registers (``SIGUSR2``; none on Windows)."""


class StackDump:
    """A registered stack signal and its open file; ``close()`` unregisters the signal and closes it."""

    __slots__ = ("_file", "notes", "path", "signum")

    def __init__(self, path: Path, signum: int, file: Any) -> None:
        self.path, self.signum, self._file = path, signum, file
        relative = f"{path.parent.name}/{path.name}"
        self.notes: dict[str, Any] = {"pid": os.getpid(), "stack_signal": signum, "stacks": relative}
        """The keys a ``train_start`` record carries so a watcher can ask: ``pid``, ``stack_signal``,
        ``stacks`` (the file, relative to the run directory: ``stacks/rank<r>-<time>.txt``)."""

    def close(self) -> None:
        if self._file.closed:
            return
        faulthandler.unregister(self.signum)
        self._file.close()


def register_stack_dump(
    run_dir: str | os.PathLike[str], rank: int = 0, signum: int = DEFAULT_STACK_SIGNAL
) -> StackDump:
    """Register ``signum`` with ``faulthandler`` to write every thread's stack to
    ``<run_dir>/stacks/rank<rank>-<time>.txt`` until ``close()``. ``ValueError`` for a signal that
    can't be used (none on this platform; ``faulthandler.register`` refuses SIGSEGV and the like)."""
    if not signum:
        raise ValueError("register_stack_dump: no signal to register on this platform")
    folder = Path(run_dir) / "stacks"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rank{rank}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.txt"
    file = path.open("a", encoding="utf-8")  # kept open: faulthandler writes to its descriptor
    try:
        faulthandler.register(signum, file=file, all_threads=True, chain=False)
    except (ValueError, RuntimeError, OSError) as error:
        file.close()
        raise ValueError(f"register_stack_dump: can't register signal {signum}: {error}") from None
    return StackDump(path, signum, file)
