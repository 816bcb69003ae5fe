"""Where rendered lines go: the JSONL file and the text log (a file or a stream).

Both files are a ``LineFile``: ``O_APPEND``, one ``write(2)`` per line straight to the OS (no
user-space buffer, so a killed or forked process never loses or repeats a buffered line), a torn tail
mended with a newline, a file rotated away by logrotate followed, and I/O failures reported to a
callback instead of raised: a full disk must not end a training run.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from speedtronic import _exit_and_fork
from speedtronic.processors import JSONLRenderer, TextRenderer

__all__ = [
    "ROTATION_CHECK_S", "TORN_SETTLE_S", "JSONLFile", "LineFile", "TextFile", "TextStream", "open_text_sink"
]

OnWriteError = Callable[[OSError, str], None]
RenderNote = Callable[[int, str], bytes]
"""``(lost_records, error) -> line``: the note written where records were lost."""

ROTATION_CHECK_S = 1.0
"""How often a ``LineFile`` compares its path's inode with its open file's (one ``stat`` each)."""

_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
_INF = float("inf")


def _json_note(lost: int, error: str) -> bytes:
    fields = {"event": "logging_error", "error": error, "lost_records": lost}
    return bytes(JSONLRenderer(as_bytes=True)(None, "error", fields))


def _text_note(lost: int, error: str) -> bytes:
    fields = {"event": "logging_error", "error": error, "lost_records": lost}
    return bytes(TextRenderer(as_bytes=True)(None, "error", fields))


class LineFile:
    """An append-only file receiving one whole line per ``write``, each reaching the OS at once.

    - Opened with ``O_APPEND``, so each line is one ``write(2)`` at the current end of the file, also
      after another process appended or logrotate truncated it (``copytruncate``: no NUL holes).
    - A file whose last line is torn (a killed writer) gets a newline first.
    - Every ``ROTATION_CHECK_S`` seconds, one ``stat`` of the path: when it names another file (logrotate
      ``create`` moved ours away) or none, the path is reopened; lines written in between went to the
      moved file, so none is lost.
    - A failed write (disk full) is reported to ``on_error`` and the line counted as lost; the bytes of
      a line written only in part are kept and completed first when writing works again, followed by
      a ``note`` line saying how many lines were lost, so the file never holds a broken line in its
      middle.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        on_error: OnWriteError,
        note: RenderNote = _json_note,
        *,
        check_every_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self._on_error = on_error
        self._note = note
        self._every = ROTATION_CHECK_S if check_every_s is None else check_every_s
        self._clock = clock
        self._lock = threading.RLock()
        self._pending = b""  # the unwritten rest of a line written in part
        self._lost = 0  # lines dropped since the last successful write
        self._error = ""  # the error of the last write, "" when it succeeded
        self._unreported: list[OSError] = []  # failures of this write, for on_error once it is done
        self._last_error = ""
        self._fd: int | None = self._open()
        self._identity = _identity(os.fstat(self._fd))
        self._torn = _ends_torn(self._fd)
        self._next_check = clock() + self._every
        # Until this time, a write takes the fast path: no rotation check due, nothing to mend.
        # Anything that leaves something to mend (or closes the file) sets it to -inf.
        self._fast_until = -_INF if self._torn else self._next_check
        _exit_and_fork.guard_across_fork(self)

    def _open(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(self.path, _FLAGS, 0o644)

    def write(self, line: bytes) -> None:
        """Append ``line`` plus a newline; on failure, report it and keep the file whole."""
        with self._lock:
            self.write_held(line)

    def write_held(self, line: bytes) -> None:
        """``write`` for an owner whose own lock serialises every write (``MetricLogger``'s)."""
        data = line + b"\n"
        if self._clock() >= self._fast_until:  # a rotation check is due, or something to mend
            self._write_slowly(data)
            return
        fd: int = self._fd  # type: ignore[assignment]  # not None: closing ends the fast path
        try:
            written = os.write(fd, data)
        except OSError as error:
            self._lost += 1
            self._failed(error, b"")
            self._settle()
            return
        if written != len(data):  # a short write (a nearly full disk): finish the line or keep its rest
            self._put_rest(fd, data, written)
            self._settle()

    def _write_slowly(self, data: bytes) -> None:
        """``write_held`` off its fast path: check for rotation when due, mend what a failed write or
        a killed writer left, then open the fast path again if nothing is left to mend."""
        fd = self._fd
        if fd is None:
            raise ValueError(f"{self.path} is closed")
        if self._clock() >= self._next_check:
            fd = self._follow_rotation(fd)
        self._write_carefully(fd, data)
        self._settle()

    def _settle(self) -> None:
        """After a write off the plain path: open the fast path again if nothing is left to mend,
        then report this write's failures (reporting may raise, so the state comes first)."""
        self._fast_until = -_INF if self._pending or self._lost or self._torn else self._next_check
        self._report()

    def _write_carefully(self, fd: int, data: bytes) -> None:
        """``write`` dealing first with what there is to mend: a line written in part, lost lines, a
        torn tail (with nothing to mend, the line is simply written)."""
        if (self._pending or self._lost) and not self._recover(fd):
            self._lost += 1
            return
        if self._torn:  # looked torn when opened: look again now, another process may have
            self._torn = _ends_torn(fd)  # been mid-append then and finished since
        self._put_rest(fd, b"\n" + data if self._torn else data, 0)

    def _put_rest(self, fd: int, data: bytes, written: int) -> None:
        """Write ``data`` past its first ``written`` bytes; on failure, count the line as lost, or keep
        its rest pending when part of it is already in the file."""
        rest = data[written:]
        if self._put(fd, rest) == 0 and self._error:
            if written:
                self._pending = rest
            else:
                self._lost += 1

    def _recover(self, fd: int) -> bool:
        """Finish a line written in part, then write the note of what was lost; True when done."""
        if self._pending and not self._finish_pending(fd):
            return False
        if self._lost:
            lost, self._lost = self._lost, 0
            if self._put(fd, self._note(lost, self._last_error) + b"\n") == 0 and self._error:
                self._lost = lost  # the note failed whole: still that many lost
            if self._error:  # the rest of a note written in part is pending, like a line's
                return False
        return True

    def _finish_pending(self, fd: int) -> bool:
        pending, self._pending = self._pending, b""
        if self._put(fd, pending) == 0 and self._error:
            self._pending = pending
        return not self._error

    def _put(self, fd: int, data: bytes) -> int:
        """Write all of ``data``; on an error keep what was not written in ``_pending`` and report."""
        written = 0
        self._error = ""
        try:
            while written < len(data):
                written += os.write(fd, data[written:])
        except OSError as error:
            self._failed(error, data[written:] if written else b"")
        else:
            self._torn = False
        return written

    def _failed(self, error: OSError, rest: bytes) -> None:
        """Note a failed write for ``_report``; ``rest``, when given, is the unwritten end of a line
        begun in the file."""
        self._error = self._last_error = f"{type(error).__name__}: {error}"
        if rest:
            self._pending = rest
        self._unreported.append(error)

    def _report(self) -> None:
        """Hand this write's failures to ``on_error``, once the file's state is settled: reporting may
        raise (a warning escalated to an error), and must not leave a line half-mended."""
        while self._unreported:
            self._on_error(self._unreported.pop(0), str(self.path))

    def _follow_rotation(self, fd: int) -> int:
        self._next_check = self._clock() + self._every
        try:
            if _identity(os.stat(self.path)) == self._identity:
                return fd
        except FileNotFoundError:
            pass
        except OSError:
            return fd
        try:
            new = self._open()
        except OSError:
            return fd  # keep writing to the moved file; try again at the next check
        if self._pending:
            self._finish_pending(fd)
            self._pending = b""
        self._fd = new
        os.close(fd)
        self._identity = _identity(os.fstat(new))
        self._torn = _ends_torn(new)
        return new

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
            self._fast_until = -_INF
            if fd is not None:
                if self._pending:
                    self._finish_pending(fd)
                os.close(fd)
            self._report()


class JSONLFile(LineFile):
    """The JSONL file: a ``LineFile`` whose note of lost records is a ``logging_error`` record."""

    def __init__(self, path: str | os.PathLike[str], on_error: OnWriteError) -> None:
        super().__init__(path, on_error, _json_note)


def _identity(stat: os.stat_result) -> tuple[int, int]:
    return stat.st_dev, stat.st_ino


TORN_SETTLE_S = 0.002
"""How long a tail that looks torn must stay unchanged to count as torn (see ``_ends_torn``)."""


def _ends_torn(fd: int) -> bool:
    """Whether the file ends in a line a writer that is gone left unfinished.

    A tail without its newline may also be another process's append in progress (the file grows
    page by page during a large write): that one is only torn if the file stays the same size for
    ``TORN_SETTLE_S``. Mending a live append would leave a blank line in the file.
    """
    try:
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return False
        time.sleep(TORN_SETTLE_S)
        return os.fstat(fd).st_size == size and os.pread(fd, 1, size - 1) != b"\n"
    except OSError:  # write-only or not seekable (a pipe, /dev/full): nothing to mend
        return False


class TextFile(LineFile):
    """The text log in a file: a ``LineFile`` whose note of lost lines is a text line."""

    def __init__(self, path: str | os.PathLike[str], on_error: OnWriteError) -> None:
        super().__init__(path, on_error, _text_note)

    accepts_bytes = True
    put = LineFile.write_held
    """Append a rendered line (UTF-8 bytes, no newline); the caller serialises calls."""

    def flush(self) -> None:
        """Nothing to do: every line reached the OS when it was written."""


class TextStream:
    """The text log on a text stream (default stdout): one ``write`` and a ``flush`` per line.

    A failing stream (closed, a broken pipe) is reported to ``on_error``, never raised. The stream is
    the caller's: ``close`` flushes it and leaves it open.
    """

    def __init__(self, stream: IO[str], on_error: OnWriteError) -> None:
        self._stream = stream
        self._on_error = on_error
        self._name = str(getattr(stream, "name", "<stream>"))

    accepts_bytes = False

    def put(self, line: str) -> None:
        """Write a rendered line and a newline, then flush; the caller serialises calls."""
        try:
            self._stream.write(line + "\n")
            self._stream.flush()
        except Exception as error:
            self._failed(error)

    def flush(self) -> None:
        """Flush the stream; a failure here loses nothing (``put`` flushed every line and reported
        its own failures), so it is not counted."""
        with contextlib.suppress(Exception):
            self._stream.flush()

    def close(self) -> None:
        self.flush()

    def _failed(self, error: Exception) -> None:
        self._on_error(error if isinstance(error, OSError) else OSError(str(error)), self._name)


def open_text_sink(
    file: str | os.PathLike[str] | None, stream: IO[str] | None, on_error: OnWriteError
) -> TextFile | TextStream:
    """Where the text log goes: ``file`` (appended, UTF-8, parent directories created) or ``stream``
    (default stdout). No stdlib logger is involved: the lines never reach logging's handlers."""
    if file is not None:
        return TextFile(file, on_error)
    return TextStream(stream if stream is not None else sys.stdout, on_error)
