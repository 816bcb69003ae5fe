"""Following a run as it is written: ``Follower`` yields each new record once, whole, in file order,
across rotation and truncation."""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from speedtronic.record import rank_of_name
from speedtronic.runs.reader import MAX_LINE_BYTES, Record, RunError, Skipped, parse_record

__all__ = ["NETWORK_FILE_SYSTEMS", "Follower", "Position", "inotify_supported", "position_holds", "run_home"]

NETWORK_FILE_SYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "fuse", "9p", "afs"}
)
"""File systems whose writes from other hosts inotify does not see: followed by polling."""

Position = tuple[int, int, int, int, int, bool, str]
"""Where a file was read to: ``(device, inode, offset, lines, segment, started, fingerprint)``; the
fingerprint (a digest of the bytes before the offset) tells a resumed follower whether the file was
truncated since. A position without it (six items, saved before it existed) is taken on trust."""

_FINGERPRINT = 64  # bytes before the offset that must be unchanged for the offset to still hold
_READ_MAX = 4 * 1024 * 1024  # bytes read from one file at one pass
_RETIRE_S = 5.0  # how long an old (rotated-away, deleted) file is read on after it last grew


class _Tail:
    """One open file being read: its identity, where it was read to, and how its records number."""

    __slots__ = ("fd", "grew_at", "ident", "last", "lines", "lost", "offset", "path", "segment", "started")

    def __init__(self, path: Path, fd: int, ident: tuple[int, int], position: Position | None) -> None:
        self.path, self.fd, self.ident = path, fd, ident
        self.offset, self.lines, self.segment, self.started = 0, 0, 0, False
        self.lost = ""  # the saved fingerprint, when the bytes before the offset no longer match it
        mine = position is not None and (position[0], position[1]) == ident
        if position is not None and mine:
            _, _, self.offset, self.lines, self.segment, self.started = position[:6]
        self.last = b""
        if self.offset:
            self.last = _before(fd, self.offset)
            if position is not None and len(position) > 6 and position[6] != _digest(self.last):
                self.lost = str(position[6])  # truncated (copytruncate) while no follower read it
        self.grew_at = 0.0

    def position(self) -> Position:
        return (*self.ident, self.offset, self.lines, self.segment, self.started, _digest(self.last))


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def _before(fd: int, offset: int) -> bytes:
    """The bytes of ``fd`` just before ``offset`` that tell whether it still holds what was read to
    there (``_FINGERPRINT`` at most): what a follower keeps, compares and saves a digest of."""
    size = min(_FINGERPRINT, offset)
    return os.pread(fd, size, offset - size)


def inotify_supported(path: str | os.PathLike[str]) -> bool:
    """Whether changes under ``path`` can be waited for with inotify: Linux, ``inotify_simple``
    installed, and a local file system (not one of ``NETWORK_FILE_SYSTEMS``)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import inotify_simple  # noqa: F401  (only whether it is installed)
    except ImportError:
        return False
    return _file_system(Path(path)) not in NETWORK_FILE_SYSTEMS


def _file_system(path: Path) -> str:
    """The type of the file system ``path`` is on (``/proc/mounts``' longest mount point above it)."""
    try:
        target = str(path.resolve())
        best, kind = "", ""
        for line in Path("/proc/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) < 3:
                continue
            point = fields[1].replace("\\040", " ")
            inside = target == point or target.startswith(point.rstrip("/") + "/")
            if inside and len(point) > len(best):
                best, kind = point, fields[2]
        return kind.split(".")[0]  # fuse.sshfs -> fuse
    except OSError:
        return ""


def run_home(path: str | os.PathLike[str]) -> Path:
    """The directory a followed run's files are named from (``Follower.positions()``' keys) and its
    watchers' state is kept in: the run directory itself, or a file's directory."""
    run = Path(path)
    return run if run.is_dir() else run.parent


def position_holds(directory: str | os.PathLike[str], key: str, position: Position) -> bool:
    """Whether the file ``position`` was saved for (``Follower.positions()``' ``key`` below
    ``directory``) is still there, at its path or rotated beside it (``<name>.1``, ``<name>-<date>``):
    a file holding the bytes read before the offset (its fingerprint; the same device and inode for a
    position saved without one)."""
    path = Path(directory) / key
    for candidate in [str(path), *Follower._siblings(path)]:
        try:
            with open(candidate, "rb") as file:
                if len(position) < 7:
                    stat = os.fstat(file.fileno())
                    if (stat.st_dev, stat.st_ino) == (position[0], position[1]):
                        return True
                    continue
                if _digest(_before(file.fileno(), position[2])) == position[6]:
                    return True
        except OSError:
            continue
    return False


class Follower:
    """New records of the run at ``path``, each once: call ``read()`` for what was written since the
    last call, ``wait()`` to block until something may have changed.

    ``poll``: ``None`` chooses (inotify where ``inotify_supported``), ``True`` polls, ``False`` insists
    on inotify (``RunError`` where it can't be had). ``positions`` (from ``positions()`` of an earlier
    follower) resumes each file where it was read to, as long as it is the same file (device and inode).
    Raises ``RunError`` for a path that does not exist.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        poll: bool | None = None,
        interval: float = 0.25,
        positions: dict[str, Position] | None = None,
        skipped: Skipped | None = None,
    ) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise RunError(f"{self.path}: no such file or directory")
        if not interval > 0:
            raise ValueError(f"interval: expected seconds > 0, got {interval!r}")
        self.interval = interval
        self.skipped = skipped if skipped is not None else Skipped()
        self._saved = dict(positions or {})
        self._tails: dict[Path, _Tail] = {}
        self._retired: list[_Tail] = []
        self._inotify: Any = None
        self._watched: set[Path] = set()
        self._scanned_at = 0.0
        if poll is None:
            poll = not inotify_supported(self.path)
        elif not poll and not inotify_supported(self.path):
            raise RunError(
                f"{self.path}: inotify is not available here (Linux, a local file system, "
                "and inotify_simple: pip install 'speedtronic[watch]'); use polling"
            )
        self.mode = "poll" if poll else "inotify"
        if not poll:
            import inotify_simple

            self._inotify = inotify_simple.INotify()
            self._flags = inotify_simple.flags
            self._watch(run_home(self.path))

    # -- which files ------------------------------------------------------------------------------------

    def files(self) -> list[Path]:
        """The run files now under the followed path: a file itself (while it exists); a run directory's
        run files; for a directory without any (a folder of runs), those of each directory in it."""
        if not self.path.is_dir():
            return [self.path] if self.path.exists() else []
        found, folders = [], []
        try:
            entries = list(os.scandir(self.path))
        except OSError:
            return []
        for entry in entries:
            if _is_run_file(entry.name) and entry.is_file():
                found.append(Path(entry.path))
            elif entry.is_dir() and not entry.name.startswith("."):
                folders.append(Path(entry.path))
        if found:  # a run directory: its checkpoints/, stacks/, tensorboard/ are no runs
            return sorted(found)
        for folder in folders:
            self._watch(folder)
            try:
                found += [Path(one.path) for one in os.scandir(folder) if _is_run_file(one.name)]
            except OSError:
                continue
        return sorted(found)

    def _watch(self, directory: Path) -> None:
        if self._inotify is None or directory in self._watched:
            return
        f = self._flags
        mask = f.CREATE | f.MODIFY | f.MOVED_FROM | f.MOVED_TO | f.DELETE | f.CLOSE_WRITE | f.ATTRIB
        try:
            self._inotify.add_watch(str(directory), mask)
            self._watched.add(directory)
        except OSError:
            pass  # a directory gone already; the next scan finds what is there

    # -- reading ----------------------------------------------------------------------------------------

    def read(self) -> list[Record]:
        """Every whole record written since the last call, file by file, in each file's order."""
        out: list[Record] = []
        for old in list(self._retired):
            self._read(old, out)
            if time.monotonic() - old.grew_at > _RETIRE_S:
                self._retired.remove(old)
                os.close(old.fd)
        present = set()
        for path in self.files():
            present.add(path)
            try:
                stat = os.stat(path)
            except OSError:
                continue
            ident = (stat.st_dev, stat.st_ino)
            tail = self._tails.get(path)
            previous = None
            if tail is not None and tail.ident != ident:  # rotated away, replaced: read the old one out
                self._retire(tail, out)
                previous, tail = tail, None
            if tail is None:
                # The same file to its readers: segments count on from the one it replaced.
                carried = None if previous is None else (previous.segment, previous.started)
                saved = self._saved.get(self._key(path))
                if saved is not None and (saved[0], saved[1]) != ident:  # rotated while no one followed
                    carried = self._read_out_saved(path, self._saved.pop(self._key(path)), out)
                tail = self._open(path, ident)
                if tail is None:
                    continue
                if carried is not None:
                    tail.segment, tail.started = carried
            self._read(tail, out)
        for path in [path for path in self._tails if path not in present]:  # deleted or moved away
            self._retire(self._tails[path], out)
        self._scanned_at = time.monotonic()
        return out

    def _open(self, path: Path, ident: tuple[int, int]) -> _Tail | None:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        if (os.fstat(fd).st_dev, os.fstat(fd).st_ino) != ident:  # replaced between stat and open
            os.close(fd)
            return None
        tail = self._tails[path] = _Tail(path, fd, ident, self._saved.pop(self._key(path), None))
        tail.grew_at = time.monotonic()
        return tail

    def _read_out_saved(self, path: Path, saved: Position, out: list[Record]) -> tuple[int, bool]:
        """The file an earlier follower read to ``saved`` is no longer at ``path`` (a restarted watcher):
        read it out from where it was rotated to (``<name>.1``, ``<name>-<date>``), when it is there.
        The segment and ``started`` the file now at ``path`` goes on from."""
        for sibling in self._siblings(path):
            try:
                fd = os.open(sibling, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                continue
            info = os.fstat(fd)
            ident = (info.st_dev, info.st_ino)
            if ident != (saved[0], saved[1]):
                os.close(fd)
                continue
            old = _Tail(path, fd, ident, saved)  # read as the file it was: its records' source is path
            self._read(old, out)
            old.grew_at = time.monotonic()
            self._retired.append(old)  # read on a while, as a file rotated under a follower is
            return old.segment, old.started
        return saved[4], saved[5]

    def _retire(self, tail: _Tail, out: list[Record]) -> None:
        del self._tails[tail.path]
        self._read(tail, out)
        tail.grew_at = time.monotonic()
        self._retired.append(tail)

    def _read(self, tail: _Tail, out: list[Record]) -> None:
        size = os.fstat(tail.fd).st_size
        if (
            tail.lost
            or size < tail.offset
            or (tail.last and os.pread(tail.fd, len(tail.last), tail.offset - len(tail.last)) != tail.last)
        ):
            self._truncated(tail, out)
            size = os.fstat(tail.fd).st_size
        while size > tail.offset:
            data = os.pread(tail.fd, min(size - tail.offset, _READ_MAX), tail.offset)
            end = data.rfind(b"\n")
            if end < 0:
                if len(data) >= MAX_LINE_BYTES:  # no newline for too long: skip it, as the reader does
                    tail.lines += 1
                    self.skipped.add_line(tail.path, tail.lines, f"line over {MAX_LINE_BYTES:,} bytes")
                    self._advance(tail, data, len(data))
                    continue
                return  # a line not finished yet
            self._consume(tail, data[:end], out)
            self._advance(tail, data, end + 1)
            tail.grew_at = time.monotonic()

    def _advance(self, tail: _Tail, data: bytes, count: int) -> None:
        tail.offset += count
        tail.last = (tail.last + data[:count])[-_FINGERPRINT:]

    def _consume(self, tail: _Tail, block: bytes, out: list[Record]) -> None:
        for raw in block.split(b"\n"):
            tail.lines += 1
            if not raw or raw.isspace():
                continue
            record = parse_record(raw, True, tail.path, tail.lines, tail.segment)
            if isinstance(record, str):
                self.skipped.add_line(tail.path, tail.lines, record)
                continue
            if record.event == "train_start":
                if tail.started:
                    tail.segment += 1
                    record = record._replace(segment=tail.segment)
                tail.started = True
            out.append(record)

    def _truncated(self, tail: _Tail, out: list[Record]) -> None:
        """The file was cut below the offset (copytruncate): read what it held past the offset from its
        rotated copy first, then the file from its start."""
        copy = self._rotated_copy(tail)
        if copy is not None:
            with copy:
                copy.seek(tail.offset)
                rest = copy.read()
            end = rest.rfind(b"\n")
            if end >= 0:
                self._consume(tail, rest[:end], out)
        tail.offset, tail.last, tail.lost = 0, b"", ""

    def _rotated_copy(self, tail: _Tail) -> Any:
        """The newest sibling named ``<name>.<something>`` or ``<name>-<something>`` (not compressed)
        holding the bytes read before the offset; ``None`` when there is none."""
        for candidate in self._siblings(tail.path):
            file = open(candidate, "rb")  # noqa: SIM115  (returned open, closed by the caller)
            before = _before(file.fileno(), tail.offset)  # what a follower reading it to the offset kept
            if (_digest(before) == tail.lost) if tail.lost else (before == tail.last):
                return file
            file.close()
        return None

    @staticmethod
    def _siblings(path: Path) -> list[str]:
        """The rotated copies of ``path``: siblings named ``<name>.<something>`` or ``<name>-<something>``
        (not compressed), newest first."""
        name = path.name
        candidates = []
        try:
            for entry in os.scandir(path.parent):
                if (
                    entry.name != name
                    and entry.name[len(name) : len(name) + 1] in (".", "-")
                    and entry.name.startswith(name)
                ) and not entry.name.endswith((".gz", ".bz2", ".xz", ".zst")):
                    candidates.append((entry.stat().st_mtime, entry.path))
        except OSError:
            return []
        return [candidate for _, candidate in sorted(candidates, reverse=True)]

    # -- waiting and state ------------------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> None:
        """Block until a file may have changed (an inotify event), or ``interval`` seconds (polling; at
        most ``timeout``)."""
        limit = self.interval if timeout is None else min(timeout, self.interval)
        if self._inotify is None:
            time.sleep(limit)
            return
        events = self._inotify.read(timeout=int(limit * 1000))
        if events:
            time.sleep(0.005)  # let a burst of writes coalesce into one pass
            self._inotify.read(timeout=0)

    def positions(self) -> dict[str, Position]:
        """Where each file now followed was read to (``Follower(positions=...)`` resumes there)."""
        return {self._key(path): tail.position() for path, tail in self._tails.items()}

    def _key(self, path: Path) -> str:
        """A file's name in ``positions()``: its path below the followed directory (its name, for a file),
        so the positions hold from any working directory."""
        return os.path.relpath(path, run_home(self.path))

    def close(self) -> None:
        for tail in [*self._tails.values(), *self._retired]:
            os.close(tail.fd)
        self._tails.clear()
        self._retired.clear()
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None

    def __enter__(self) -> Follower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_run_file(name: str) -> bool:
    return name.endswith(".jsonl") or rank_of_name(name) is not None
