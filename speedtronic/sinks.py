"""Where rendered lines go: append-only line files (the JSONL record, a text log) and a text stream."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import select
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from speedtronic import _exit_and_fork
from speedtronic.errors import LoggingFailureWarning, warn_at_caller

__all__ = ["TORN_SETTLE_S", "LineFile", "PathEvents", "TextStream", "open_text_sink"]

OnWriteError = Callable[[BaseException, str, bool], None]
"""``(error, path, lost)``: told of every failed write: a line lost (``lost``), or written only in part
(to be finished when writing works again)."""
OnGap = Callable[[int, str, str], None]
"""``(lost_lines, last_error, path)``: ``lost_lines`` were lost and the file is about to be written
again; called with the file's lock held, before the next line, so the note it writes now (through
``write``, called again from it) lands where the lines are missing."""

TORN_SETTLE_S = 0.002
"""How long a tail that looks torn must stay unchanged to count as torn (see ``_ends_torn``)."""

_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)


class LineFile:
    """An append-only file receiving one whole line per ``write``, each reaching the OS at once.

    - Opened write-only with ``O_APPEND``: each line is one ``write(2)`` at the current end of the file,
      also after another process appended or logrotate truncated it (``copytruncate``: no NUL holes).
      A pipe or FIFO whose reader is gone fails with ``EPIPE``, reported like a full disk, never a hang.
    - Before a write, one ``stat`` of the path (before every write, or after inotify's events only:
      ``PathEvents``): when it names another file (logrotate ``create`` moved ours away) or none, the
      path is reopened, so a line emitted after the move goes to the new file. ``reopen()`` does the
      same on demand (logrotate's ``postrotate``, or SIGHUP).
    - The descriptor's number is the file's own from ``__init__`` to ``close()``: a reopen puts the new
      file under the same number (``dup2``), so no other file can be given that number while a write,
      interrupted by a signal handler or not, still holds it. And a file is reopened only between
      writes: ``reopen()`` from a signal handler that interrupted a write of this file on this thread
      marks the file, and the reopen happens right before its next write.
    - A file whose last line is torn (a killed writer) gets a newline first.
    - A failed write (disk full) is reported to ``on_error``; a line of which nothing was written is
      counted in ``lost``. A line written only in part is completed first when writing works again
      (also across ``reopen()`` of the same file), and is not lost, as long as the file still ends with
      its part: after a fork, whichever process writes first finishes it, once. A line given up (the
      file rotated away, closed, truncated or appended to by another writer first) is lost, counted
      and reported to ``on_error`` like a failed write; then ``on_gap`` is told how many
      lines were lost, and the note it writes (through ``write``) lands where they are missing, so the
      file never holds a broken line in its middle. A note that can't be written is not a lost line:
      it is due again at the next write, and that write's line is lost.
    """

    def __init__(
        self, path: str | os.PathLike[str], on_error: OnWriteError, on_gap: OnGap | None = None
    ) -> None:
        self.path = Path(path)
        self._path = str(self.path)
        # Opened, stat'ed and reopened by this absolute path: a later chdir (Hydra's) changes nothing.
        # Joined, not normalised, so that a ".." after a symbolic link means what it meant to open().
        self._where = os.path.join(os.getcwd(), self._path)
        self._on_error = on_error
        self._on_gap = on_gap
        self._lock = threading.RLock()
        self.lost = 0
        """Lines that could not be written, since the file was opened."""
        self._unnoted = 0  # lines lost since the last note
        self._noting = False  # on_gap is writing its note
        self._note_failure: OSError | None = None
        self._last_error = ""
        self._pending = b""  # the unwritten rest of a line written in part
        self._pending_at = -1  # the file's size right after that part (-1: not a regular file)
        self._unreported: list[OSError] = []  # lines lost outside a write's own report, to report
        self._fd: int | None = None
        self._busy = 0  # writes and reopens of this file in progress (on the thread holding the lock)
        self._reopen_due = False  # reopen() came during a write: reopen before the next one
        self._identity: tuple[int, int] | None = None
        self._watch = True  # a regular file: follow rotation by stat'ing its path
        self._events: PathEvents | None = None  # when the stat is due (None: before every write)
        self._arm = False  # make the watches at the next rotation check (after an open or a fork)
        self._torn = False
        self._retry_reopen_at = 0.0  # after a failed reopen at rotation: when to try again
        self._open()
        _exit_and_fork.guard_across_fork(self)

    def _open(self) -> None:
        """Open the path (creating its parent directories); raises ``OSError`` when it can't. A file
        already open is replaced under its descriptor's number (``dup2`` closes it as it does so).

        Opened non-blocking, then set blocking: a FIFO nobody reads (its shipper is gone) fails at
        once with ``ENXIO`` instead of waiting for a reader forever."""
        Path(self._where).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._where, _FLAGS | os.O_NONBLOCK, 0o644)
        try:
            os.set_blocking(fd, True)
            info = os.fstat(fd)
            if self._fd is not None:
                os.dup2(fd, self._fd, inheritable=False)
        except OSError:
            os.close(fd)
            raise
        if self._fd is None:
            self._fd = fd
        else:
            os.close(fd)
        self._reopen_due = False
        self._identity = (info.st_dev, info.st_ino)
        self._watch = stat.S_ISREG(info.st_mode)
        self._drop_events()
        self._torn = self._watch and _ends_torn(Path(self._where), info.st_size)

    def write(self, line: bytes | str) -> None:
        """Append ``line`` plus a newline; on failure, report it and keep the file whole.

        The common case (nothing to mend first, the whole line written at once) is one straight path:
        a ``poll`` of its events (or a ``stat`` of the path), one ``write(2)``. Mending first is in
        ``_write``; a short or failed write in ``_write_rest``."""
        data = (line.encode("utf-8", "backslashreplace") if isinstance(line, str) else line) + b"\n"
        with self._lock:
            fd = self._fd
            if fd is None:
                raise ValueError(f"{self.path} is closed")
            self._busy += 1
            try:
                events = self._events  # quiet: nothing happened to the path, no stat due (one poll)
                if self._busy == 1 and (  # not inside another write
                    self._reopen_due or ((events is None or not events.quiet()) and self._moved())
                ):
                    self._follow_rotation()
                if self._noting or self._pending or self._torn or self._unnoted:
                    failure, lost = self._write(data)
                else:
                    try:
                        written = os.write(fd, data)
                    except OSError:
                        written = 0
                    if written == len(data):
                        return
                    failure, lost = self._write_rest(data, written)
            finally:
                self._busy -= 1
        if failure is not None:
            self._on_error(failure, self._path, lost)
        if self._unreported:
            self._report_losses()

    def _write(self, data: bytes) -> tuple[OSError | None, bool]:
        """``write``'s work when a line is to be finished, a torn tail closed or a gap noted first
        (with the lock held): the failure to report, and whether the line is lost."""
        if self._noting:  # the note of a gap, from on_gap: never counted as a lost line
            failure = self._mend() if self._pending or self._torn else None
            self._note_failure = failure or self._begin(data, lost=False)
            return None, False
        lost_before = self.lost
        failure = self._mend() if self._pending or self._torn or self._unnoted else None
        if failure is None:
            failure = self._begin(data)
        else:  # the file still can't be mended: this line can't follow
            self._lose(failure)
        return failure, self.lost > lost_before

    def _write_rest(self, data: bytes, written: int) -> tuple[OSError | None, bool]:
        """The common case's line after its one ``write(2)`` wrote only part of it (the rest follows)
        or failed (``written == 0``: the line is tried once more, as ``_begin`` does): the failure to
        report, and whether the line is lost."""
        more, failure = self._write_all(data[written:])
        if failure is None:
            return None, False
        if written + more:  # part of the line is in the file: the rest is finished first next time
            self._keep_rest(data[written + more :])
            return failure, False
        self._lose(failure)
        return failure, True

    def reopen(self) -> None:
        """Close and reopen the path now (after logrotate moved or truncated it). If the path can't
        be opened, the error is reported and writing goes on to the file already open.

        Called while a write of this file is in progress on this thread (a signal handler that
        interrupted it: ``speedtronic.lifecycle.reopen_on_signals``), it leaves that write its file and
        reopens the path right before the next write instead."""
        with self._lock:
            if self._busy:
                self._reopen_due = True
                return
            self._busy += 1
            try:
                failure = self._reopen()
            finally:
                self._busy -= 1
        if failure is not None:
            self._on_error(failure, self._path, False)
        if self._unreported:
            self._report_losses()

    def _reopen(self) -> OSError | None:
        if self._fd is None:
            return None
        identity = self._identity
        self._finish_pending(self._fd)
        try:
            self._open()
        except OSError as error:
            return error
        if self._pending:
            if self._identity == identity:  # the same file: its tail is our line, finished at the
                self._torn = False  # next write (mending it as torn would split the line)
            else:  # a new file: the rest belongs to the old one, where the line stays cut
                self._pending = b""
                self._lose_silently("a line written in part was cut by the file's rotation")
        return None

    def close(self) -> None:
        with self._lock:
            self._drop_events()
            fd, self._fd = self._fd, None
            if fd is not None:
                if not self._finish_pending(fd):
                    self._lose_silently("a line written in part was cut when the file closed")
                os.close(fd)
        if self._unreported:
            self._report_losses()

    # -- internals -------------------------------------------------------------------------------

    def _forked(self) -> None:
        """In a forked child: the writes in progress were the parent's threads' (a fork that could
        not wait for them), not this process's, and the lines lost before the fork are the parent's to
        note. A line written in part stays to finish on both sides: whichever writes first finishes
        it, the other sees that it did (``_still_ours``)."""
        self._busy = 0
        self._unnoted = 0
        self._unreported.clear()
        self._drop_events()  # the parent's watches: their events are the parent's to read

    def _drop_events(self) -> None:
        """Close the watches; new ones are made at the next rotation check (a forked child that never
        writes, or a file closed, holds no inotify instance)."""
        events, self._events = self._events, None
        self._arm = self._watch
        if events is not None:
            events.close()

    def _follow_rotation(self) -> None:
        """Reopen the path when ``reopen()`` came during a write, or when the path names another file
        or none. When it can't be opened (a directory in its place, no permission), the lines go on to
        the file already open (nothing is lost), a ``LoggingFailureWarning`` says so once, and the
        reopen is tried again a second later."""
        now = time.monotonic()
        if now < self._retry_reopen_at:
            return
        failure = self._reopen()
        if failure is None:
            self._retry_reopen_at = 0.0
            return
        if not self._retry_reopen_at:
            warn_at_caller(
                f"speedtronic: {self.path} was rotated but can't be reopened ({failure}); "
                "writing on to the rotated file",
                LoggingFailureWarning,
            )
        self._retry_reopen_at = now + 1.0

    def _moved(self) -> bool:
        """Whether the path of a regular file names another file than ours, or none: a ``stat`` of
        the path, unless ``PathEvents`` says nothing happened to the file or its directories since the
        last one."""
        if not self._watch:
            return False
        if self._arm and self._fd is not None:  # watches made now start due: this check stats
            self._arm = False
            self._events = PathEvents.open(self._fd, self._where)
        events = self._events
        if events is not None and not events.changed():
            return False
        try:
            info = os.stat(self._where)
        except FileNotFoundError:
            moved = True
        except OSError:  # can't tell (no permission to a directory now): asked again at the next write
            if events is not None:
                events.stat_again()
            return False
        else:
            moved = (info.st_dev, info.st_ino) != self._identity
        if events is not None and moved:
            events.stat_again()  # until the path names our file again (a reopen that failed is retried)
        elif events is not None and events.fired:  # still ours, but its directories may be others now
            self._drop_events()
        return moved

    def _mend(self) -> OSError | None:
        """Finish a line written in part, close a torn tail, then have ``on_gap`` note lost lines; the
        error if any of it failed (what is not done stays to do at the next write)."""
        if self._pending:
            failure = self._finish_line()
            if failure is not None:
                return failure
        if self._torn:
            failure = self._close_torn_tail()
            if failure is not None:
                return failure
            self._torn = False
        if self._unnoted and self._on_gap is not None:  # the note, written through on_gap now
            gap, self._unnoted = self._unnoted, 0
            self._noting, self._note_failure = True, None
            try:
                self._on_gap(gap, self._last_error, self._path)
            finally:
                self._noting = False
            if self._note_failure is not None:  # due again at the next write
                self._unnoted += gap
                return self._note_failure
        self._unnoted = 0
        return None

    def _begin(self, data: bytes, *, lost: bool = True) -> OSError | None:
        """Write a whole line; when only part of it reached the file, keep the rest to finish first.
        A line of which nothing was written is counted as lost (when ``lost``)."""
        written, failure = self._write_all(data)
        if failure is not None:
            if written:
                self._keep_rest(data[written:])
            elif lost:
                self._lose(failure)
        return failure

    def _write_all(self, data: bytes) -> tuple[int, OSError | None]:
        assert self._fd is not None
        written = 0
        try:
            while written < len(data):  # one write(2) a line, but on a nearly full disk
                written += os.write(self._fd, data[written:])
        except OSError as error:
            self._last_error = f"{type(error).__name__}: {error}"
            return written, error
        return written, None

    def _lose(self, error: OSError) -> None:
        self._last_error = f"{type(error).__name__}: {error}"
        self._lose_line()

    def _lose_line(self) -> None:
        self.lost += 1
        self._unnoted += 1

    def _lose_silently(self, why: str) -> None:
        """A line lost outside a write (at a rotation, a close, another process's write): counted and
        noted as any lost line, and reported to ``on_error`` once the lock is let go."""
        self._last_error = why
        self._lose_line()
        self._unreported.append(OSError(errno.EIO, why))

    def _report_losses(self) -> None:
        with self._lock:
            losses, self._unreported = self._unreported, []
        for error in losses:
            self._on_error(error, self._path, True)

    def _keep_rest(self, rest: bytes, fd: int | None = None) -> None:
        """Keep the unwritten ``rest`` of a line to finish first, and where the file ended after its part."""
        fd = self._fd if fd is None else fd
        self._pending = rest
        self._pending_at = -1
        if self._watch and rest and fd is not None:
            with contextlib.suppress(OSError):
                self._pending_at = os.fstat(fd).st_size

    def _finish_line(self) -> OSError | None:
        """Write the rest of the line written in part, if it is still ours to finish; the error if
        it still can't be written (what is not written stays to do).

        A process that forked while a line was written in part shares the file and the line with its
        child: both hold the rest. A POSIX record lock on the file (one per process) lets one of them
        look and write at a time, so the rest is written once, by whichever comes first."""
        assert self._fd is not None
        with _record_lock(self._fd, self._watch):
            if not self._still_ours(self._fd):
                return None
            written, failure = self._write_all(self._pending)
            self._keep_rest(self._pending[written:])
        return failure

    def _still_ours(self, fd: int) -> bool:
        """Whether the file still ends with our part of the line (so the rest goes right after it).
        When it doesn't, the line is given up: finished already (its rest follows the part: the
        other side of a fork wrote it), or cut (the file truncated, or written after the part by
        another writer): lost, and the next line starts on a line of its own."""
        if self._pending_at < 0:
            return True
        try:
            size = os.fstat(fd).st_size
        except OSError:
            return True
        if size == self._pending_at:
            return True
        rest, at = self._pending, self._pending_at
        self._pending, self._pending_at = b"", -1
        if size < at + len(rest) or _read_at(self._where, self._identity, at, len(rest)) != rest:
            self._lose_silently("a line written in part was cut by another write to the file")
            self._torn = _ends_torn(Path(self._where), size)
        return False

    def _close_torn_tail(self) -> OSError | None:
        """End the torn last line with a newline, unless another process sharing the file (a fork's
        other side) did already."""
        assert self._fd is not None
        with _record_lock(self._fd, self._watch):
            try:
                size = os.fstat(self._fd).st_size
            except OSError:
                size = -1
            if size == 0 or (size > 0 and _read_at(self._where, self._identity, size - 1, 1) == b"\n"):
                return None
            return self._begin(b"\n", lost=False)

    def _finish_pending(self, fd: int) -> bool:
        """Try once to write the rest of a line written in part; whether none is left."""
        if self._pending:
            with contextlib.suppress(OSError), _record_lock(fd, self._watch):
                if self._still_ours(fd):
                    self._keep_rest(self._pending[os.write(fd, self._pending) :], fd)
        return not self._pending


@contextlib.contextmanager
def _record_lock(fd: int, regular: bool) -> Iterator[None]:
    """An exclusive POSIX record lock on the open file ``fd`` (a regular file; nothing otherwise),
    held by this process: other processes writing the file through a copy of the descriptor (a
    fork) wait for it; this process's threads are kept apart by the file's own lock. A file system
    without record locks lets the work go on unlocked."""
    locked = False
    if regular:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX)
            locked = True
        except OSError:
            pass
    try:
        yield
    finally:
        if locked:
            with contextlib.suppress(OSError):
                fcntl.lockf(fd, fcntl.LOCK_UN)


def _read_at(path: str, identity: tuple[int, int] | None, offset: int, size: int) -> bytes | None:
    """``size`` bytes at ``offset`` of the file at ``path`` if it is still the file ``identity``
    names (the sink's own descriptor is write-only), else ``None``."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != identity:
            return None
        return os.pread(fd, size, offset)
    except OSError:
        return None
    finally:
        os.close(fd)


def _ends_torn(path: Path, size: int) -> bool:
    """Whether the file ends in a line a writer that is gone left unfinished.

    A tail without its newline may also be another process's append in progress: that one is only
    torn if the file stays the same size for ``TORN_SETTLE_S`` (mending a live append would leave a
    blank line in the file).
    """
    if size == 0:
        return False
    try:
        with open(path, "rb") as reader:
            reader.seek(size - 1)
            if reader.read(1) == b"\n":
                return False
            time.sleep(TORN_SETTLE_S)
            now = os.fstat(reader.fileno()).st_size
            reader.seek(now - 1)
            return now == size and reader.read(1) != b"\n"
    except OSError:
        return False


class PathEvents:
    """Tells a ``LineFile`` when the ``stat`` of its path is due: after something happened to the file
    or to one of its directories (Linux's inotify), instead of before every write.

    The rotation rule stays the stat's: the path is stat'ed before the first write, and before the
    first write after any of these events, which are queued by the very system call that makes them
    (a ``rename``, an ``unlink``), before it returns: the file moved (``IN_MOVE_SELF``), unlinked or
    replaced by another file renamed onto its path (``IN_ATTRIB``: its link count), one of its
    directories moved or removed, a watch gone or the queue overflowed. So a line written after
    logrotate's ``rename`` goes to the new file, as with a stat before each write. Asking costs one
    ``poll(2)`` with no path to walk: a ``stat`` of a file just written costs about five times that.

    ``open`` gives ``None`` (the stat before every write) where the events can't tell all the stat
    does: on another OS than Linux, a path through a symbolic link (a link retargeted makes no event),
    a file or directory on a file system whose changes may come from another machine (NFS, SMB, FUSE,
    9p: only local file systems are trusted), when inotify is refused (its per-user limits), and for
    a path with a ``..`` (after a symbolic link it is where the link points, not what the text says).
    Not seen, unlike the stat: a file system mounted over the file's directory, or moved or detached
    under it, while it is written. ``LineFile`` makes the watches at the file's first write after it
    is opened or the process forked, so a child that never writes holds no inotify instance.
    """

    __slots__ = ("_due", "_fd", "_poll", "fired")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self.fired = False
        """Whether the last ``changed()`` read events (not only a stat asked for)."""
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        self._poll = poller.poll
        self._due = True  # the first write stats the path: what happened before the watches counts

    @classmethod
    def open(cls, fd: int, path: str) -> PathEvents | None:
        """Watches for the file open as ``fd`` at ``path`` (a regular file), or ``None`` where the stat
        must be taken before every write."""
        if sys.platform != "linux":
            return None
        try:
            directories = _watched_directories(path, os.fstat(fd).st_dev)
            if directories is None:
                return None
            inotify = _inotify()
            events = inotify.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if events < 0:
                return None
        except Exception:  # no libc to call, /proc not mounted: the stat before every write
            return None
        try:
            # the file by its descriptor (not by its path, which may name another file by now)
            watched = [(f"/proc/self/fd/{fd}", _IN_MOVE_SELF | _IN_DELETE_SELF | _IN_ATTRIB)]
            watched += [(name, _IN_MOVE_SELF | _IN_DELETE_SELF | _IN_ONLYDIR) for name in directories]
            for name, mask in watched:
                if inotify.inotify_add_watch(events, os.fsencode(name), mask) < 0:
                    os.close(events)
                    return None
        except BaseException:
            os.close(events)
            raise
        return cls(events)

    def changed(self) -> bool:
        """Whether the path is to be stat'ed now: something happened since the last time this said so
        (the events are read, and ``fired`` says so), or ``stat_again`` asked for it."""
        if not self._due and not self._poll(0):
            return False
        self._due = False
        self.fired = False
        # One read, which poll said won't block: events left make the next poll say so again.
        with contextlib.suppress(OSError):  # BlockingIOError: nothing was queued
            self.fired = bool(os.read(self._fd, 65536))
        return True

    def quiet(self) -> bool:
        """Whether nothing is due: no event queued since the last ``changed()`` (one ``poll``, nothing
        read) and no stat asked for. ``changed()`` reads the events when it is not."""
        return not self._due and not self._poll(0)

    def stat_again(self) -> None:
        """Have the next ``changed()`` say so whatever happens meanwhile."""
        self._due = True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


_IN_ATTRIB = 0x00000004
_IN_DELETE_SELF = 0x00000400
_IN_MOVE_SELF = 0x00000800
_IN_ONLYDIR = 0x01000000
_LOCAL_FILE_SYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "overlay", "zfs", "f2fs", "bcachefs", "jfs"}
)
"""File systems whose every change is made by this machine's kernel, so inotify sees it."""


def _watched_directories(path: str, device: int) -> list[str] | None:
    """The directories above ``path`` to watch (each but ``/``), or ``None`` when the path goes through
    a symbolic link, or when the file (on ``device``) or a directory is on no local file system."""
    if ".." in Path(path).parts:  # "link/.." is where the link points, not what the text says
        return None
    absolute = os.path.abspath(path)
    if os.path.realpath(absolute) != absolute:
        return None
    directories = []
    directory = os.path.dirname(absolute)
    while directory != os.path.dirname(directory):
        directories.append(directory)
        directory = os.path.dirname(directory)
    kinds = _file_system_kinds()
    devices = {device, *(os.stat(d).st_dev for d in directories)}
    if not all(kinds.get((os.major(dev), os.minor(dev))) in _LOCAL_FILE_SYSTEMS for dev in devices):
        return None
    return directories


def _file_system_kinds() -> dict[tuple[int, int], str]:
    """Each mounted device's file system type (``/proc/self/mountinfo``), by its major and minor."""
    kinds: dict[tuple[int, int], str] = {}
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
        for line in mounts:
            fields, _, rest = line.partition(" - ")
            major, _, minor = fields.split()[2].partition(":")
            kinds.setdefault((int(major), int(minor)), rest.split()[0])
    return kinds


@functools.cache
def _inotify() -> Any:
    """The C library, for its inotify calls (``ctypes``, imported when a file is first opened)."""
    import ctypes  # here, not at import: most processes that import speedtronic open no file

    return ctypes.CDLL(None, use_errno=True)


class TextStream:
    """The text log on a text stream: one ``write`` and a ``flush`` per line.

    ``stream=None`` writes each line to whatever ``sys.stdout`` is at that moment, as ``print()`` does,
    so a redirect in force (rich's ``Progress``, ``contextlib.redirect_stdout`` with tqdm's
    ``DummyTqdmFile``) takes the lines too; a stream passed explicitly keeps receiving them. A line
    the stream's encoding can't hold (``PYTHONIOENCODING=ascii``) is written with backslash escapes
    instead of being lost. A failing stream (closed, a broken pipe) is reported to ``on_error`` and
    counted in ``lost``, never raised. Once its pipe's reader is gone, every later line is lost too,
    and counted and reported as such without being written. The stream is the caller's: ``close``
    flushes it and leaves it open.
    """

    def __init__(self, stream: IO[str] | None, on_error: OnWriteError) -> None:
        self._stream = stream
        self._on_error = on_error
        self._lock = threading.RLock()
        self.path = str(getattr(stream, "name", "<stream>")) if stream is not None else "<stdout>"
        self.lost = 0
        self._broken: BrokenPipeError | None = None  # the reader left: nothing written can be read
        _exit_and_fork.guard_across_fork(self)

    def write(self, line: str | bytes) -> None:
        """Write a rendered line and a newline, then flush."""
        if self._broken is not None:
            self.lost += 1
            self._on_error(self._broken, self.path, True)
            return
        text = line.decode("utf-8", "backslashreplace") if isinstance(line, bytes) else line
        stream = self._stream if self._stream is not None else sys.stdout
        try:
            with self._lock:
                try:
                    stream.write(text + "\n")
                except UnicodeEncodeError:
                    encoding = getattr(stream, "encoding", None) or "ascii"
                    stream.write(text.encode(encoding, "backslashreplace").decode(encoding) + "\n")
                stream.flush()
        except Exception as error:
            self.lost += 1
            if isinstance(error, BrokenPipeError):
                self._broken = error
                self._drop_unreadable(stream)
            self._on_error(error, self.path, True)

    def _drop_unreadable(self, stream: IO[str]) -> None:
        """The pipe's reader is gone (``stdout`` into ``head``): point the stream's descriptor at
        ``/dev/null``, as Python's docs advise for SIGPIPE, so the line left in its buffer can't fail
        again at exit (exit code 120). Later lines are counted lost, not written there."""
        with contextlib.suppress(Exception):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)

    def flush(self) -> None:
        """Flush the stream; a failure here loses nothing (``write`` flushed every line)."""
        with contextlib.suppress(Exception):
            (self._stream if self._stream is not None else sys.stdout).flush()

    def close(self) -> None:
        self.flush()


def open_text_sink(
    file: str | os.PathLike[str] | None,
    stream: IO[str] | None,
    on_error: OnWriteError,
    on_gap: OnGap | None = None,
) -> LineFile | TextStream:
    """Where the text log goes: ``file`` (appended, UTF-8, parent directories created), else
    ``stream``, else whatever ``sys.stdout`` is at each line (``TextStream``). No stdlib logger is
    involved: the lines never reach logging's handlers."""
    if file is not None:
        return LineFile(file, on_error, on_gap)
    return TextStream(stream, on_error)
