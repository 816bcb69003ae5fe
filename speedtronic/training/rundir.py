"""A run directory is one run: claimed once, refused to a second run, its config revisions kept, its
files opened only as plain files of its own."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import stat
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypedDict

from speedtronic.record import rank_of_name, rank_path
from speedtronic.training.config import ConfigError

__all__ = [
    "CHECKPOINTS",
    "CONFIG_NAME",
    "LOCK_NAME",
    "ConfigChange",
    "OpenRun",
    "RunDirError",
    "check_files",
    "checkpoint_name",
    "checkpoint_steps",
    "claim",
    "config_changes",
    "describe_changes",
    "describe_os_error",
    "holds_run",
    "open_file",
    "open_run",
    "rank_checkpoints",
    "read_text",
    "record_config",
    "replacing",
    "write_text",
]

CONFIG_NAME = "config.yaml"
CHECKPOINTS = "checkpoints"
LOCK_NAME = ".speedtronic.lock"
"""The file a run holds an exclusive ``flock`` on (its pid inside), for as long as the run lives."""
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_MARKERS = (CONFIG_NAME, "metrics.jsonl", CHECKPOINTS)
"""What a run leaves in its directory: any of them means the directory holds a run."""


class RunDirError(ConfigError):
    """A run directory that can't be used: ``"<path>: <what was expected>"``."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        super().__init__(str(path), "", problem)


def holds_run(path: Path) -> bool:
    """Whether ``path`` already holds a run's files (its config, metrics or checkpoints)."""
    return any((path / marker).exists() for marker in _MARKERS)


def claim(run_dir: str | None, *, resume: bool, base: str = "runs") -> Path:
    """The directory this run writes to, created: ``run_dir``, or a fresh one under ``base`` when None.

    Raises ``RunDirError`` for a path that is not a directory, can't be created, or holds another
    run while ``resume`` is off.
    """
    if run_dir is None:
        return _fresh(Path(base))
    path = Path(run_dir)
    _make(path, exist_ok=True)
    if not resume and holds_run(path):
        raise RunDirError(path, "already holds a run; continue it with --resume, or pass another --run-dir")
    return path


class OpenRun:
    """A run directory this process holds: ``path``, its lock, and what was there before the start."""

    def __init__(self, path: Path, lock_fd: int, before: frozenset[str] | None, created: Path | None) -> None:
        self.path = path
        self._lock_fd: int | None = lock_fd
        self._before = before
        self._created = created

    def release(self) -> None:
        """Let another run use the directory (the OS does it too when the process ends)."""
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # no pid of a run that has ended
            os.close(fd)

    def undo(self) -> None:
        """Remove what this start created, keep everything that was there before, then release.

        For a start that failed before training: the directory is left as it was found (a
        directory this start made, with the parents it made, is removed), so the same command can be
        retried.
        """
        try:
            if self._before is None:  # the directory is this start's own
                shutil.rmtree(self.path, ignore_errors=True)
                parent = self.path
                while self._created is not None and parent != self._created:
                    parent = parent.parent
                    try:
                        parent.rmdir()  # only when empty: never what someone else put there
                    except OSError:
                        break
                return
            new = _contents(self.path) - self._before
            for name in sorted(new):
                if os.path.dirname(name) in new:
                    continue  # inside a new directory: goes with it
                item = self.path / name
                if item.is_dir() and not item.is_symlink():
                    shutil.rmtree(item, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        item.unlink()
        finally:
            self.release()


def _contents(path: Path) -> frozenset[str]:
    """Every path under ``path``, relative to it (symbolic links listed, never followed)."""
    names = set()
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            names.add(os.path.relpath(os.path.join(root, name), path))
    return frozenset(names)


def open_run(run_dir: str | None, *, resume: bool, base: str = "runs") -> OpenRun:
    """The directory this run writes to, created and locked for the run: ``run_dir``, or a fresh one
    under ``base`` when None.

    Raises ``RunDirError`` for a path that is not a directory or can't be created, one another live
    run holds, one holding a run while ``resume`` is off, and one holding none while ``resume`` is on.
    """
    if run_dir is None:
        path = _fresh(Path(base))
        return OpenRun(path, _lock(path), before=None, created=path)
    path = Path(run_dir)
    if resume and not (path.is_dir() and holds_run(path)):
        raise RunDirError(
            path,
            "holds no run to resume (no config.yaml, metrics.jsonl or checkpoints); check the "
            "path, or leave out --resume to start a new run there",
        )
    created = next((p for p in reversed([path, *path.parents]) if not p.exists()), None)
    _make(path, exist_ok=True)
    lock_existed = os.path.lexists(path / LOCK_NAME)
    fd = _lock(path)
    before = None if created is not None else _contents(path)
    if before is not None and not lock_existed:
        before -= {LOCK_NAME}
    opened = OpenRun(path, fd, before, created)
    if not resume and holds_run(path):
        opened.undo()
        raise RunDirError(path, "already holds a run; continue it with --resume, or pass another --run-dir")
    return opened


def _lock(path: Path) -> int:
    """An exclusive ``flock`` on ``path/LOCK_NAME`` (the holder's pid written in it), or ``RunDirError``."""
    lock_path = path / LOCK_NAME
    try:
        fd = open_file(lock_path, os.O_RDWR | os.O_CREAT, in_place=True)
    except OSError as error:
        raise _error(path, error, "can't lock the run directory") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        who = f" (pid {holder})" if holder.isdigit() else ""
        raise RunDirError(
            path, f"in use by another run{who}; wait for it to end, or pass another --run-dir"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _fresh(base: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    _make(base, exist_ok=True)
    for n in range(1, 10_000):
        candidate = base / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        except OSError as error:
            raise _error(candidate, error) from None
        return candidate
    raise RunDirError(base, f"no free name for a run directory {stamp}-<n>")  # pragma: no cover


def _make(path: Path, *, exist_ok: bool) -> None:
    if path.exists() and not path.is_dir():
        raise RunDirError(path, "expected a directory, found a file; pass another --run-dir")
    try:
        path.mkdir(parents=True, exist_ok=exist_ok)
    except OSError as error:
        raise _error(path, error) from None
    if not os.access(path, os.W_OK | os.X_OK):
        reason = "read-only file system" if _read_only(path) else "permission denied"
        raise RunDirError(path, f"expected a writable directory: {reason}")


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def describe_os_error(error: OSError) -> str:
    """An ``OSError``'s reason in words a user reads: ``"read-only file system"``,
    ``"permission denied"``, ``"not a directory (a file is in the way)"``..."""
    if error.errno == errno.EROFS:
        return "read-only file system"
    reason = (error.strerror or str(error)).lower()
    if isinstance(error, (FileExistsError, NotADirectoryError)):
        reason = "not a directory (a file is in the way)"
    return reason


def _error(path: Path, error: OSError, doing: str = "can't create the run directory") -> RunDirError:
    where = error.filename if error.filename is not None else path
    return RunDirError(where, f"{doing}: {describe_os_error(error)}")


class ConfigChange(TypedDict):
    """One key a resumed run changed: fixed keys, so a reader infers one schema (DuckDB, polars)."""

    key: str
    """The dotted key, ``"train.steps"``; a list (``logging.hooks``) is one key, compared whole."""
    old: Any
    new: Any


def config_changes(
    before: Mapping[str, Any], after: Mapping[str, Any], prefix: str = ""
) -> list[ConfigChange]:
    """``{"key": "train.steps", "old": 20, "new": 40}`` for each key whose value differs
    (``train.resume`` left out).

    The values stay data, never text: the logger's ``Redact`` walks them like any payload, so a
    hook's ``api_key`` or ``password`` inside ``logging.hooks`` is hidden in every sink and hook.
    """
    changes: list[ConfigChange] = []
    for key in dict.fromkeys([*before, *after]):
        name = f"{prefix}{key}"
        old, new = before.get(key), after.get(key)
        if name == "train.resume":
            continue
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            changes += config_changes(old, new, f"{name}.")
        elif old != new:
            changes.append({"key": name, "old": old, "new": new})
    return changes


def describe_changes(changes: Sequence[ConfigChange]) -> str:
    """``"train.steps: 20 -> 40; logging.hooks: ... -> ..."``, secrets redacted, for a summary line."""
    from speedtronic.processors.redact import Redact

    shown = Redact()(None, "", {"event": "config_changes", "changes": list(changes)})["changes"]
    return "; ".join(
        f"{change['key']}: {_shown(change['old'])} -> {_shown(change['new'])}" for change in shown
    )


def _shown(value: Any) -> str:
    return "null" if value is None else str(value)


def record_config(run_dir: Path, config: Mapping[str, Any]) -> int:
    """Write ``config.yaml``; if it holds a different config, keep that one as ``config.<n>.yaml``.

    Returns the revision now in ``config.yaml`` (1 for a run's first config). Each file is written
    anew and renamed into place (``replacing``): ``config.yaml`` always holds a whole config, and a
    hard link in its place is replaced, never written through.
    """
    import yaml

    path = run_dir / CONFIG_NAME
    text = yaml.safe_dump(dict(config), sort_keys=False)
    revisions = sorted(run_dir.glob("config.*.yaml"))
    revision = len(revisions) + 1
    kept: Path | None = None
    try:
        if os.path.lexists(path):
            previous_text = read_text(path)
            previous = yaml.safe_load(previous_text) or {}
            if config_changes(previous, config):
                kept = run_dir / f"config.{revision}.yaml"
                write_text(kept, previous_text)  # a link named config.<n>.yaml is replaced, never followed
                revision += 1
        write_text(path, text)
    except OSError as error:
        if kept is not None:  # config.yaml still holds the previous config: no revision kept twice
            with contextlib.suppress(OSError):
                kept.unlink()
        reason = describe_os_error(error)
        raise RunDirError(error.filename or path, f"can't write the config: {reason}") from None
    return revision


def check_files(
    run_dir: Path,
    files: Iterable[str | os.PathLike[str] | None] = (),
    *,
    appended: Iterable[str | os.PathLike[str] | None] = (),
    rank: int = 0,
) -> None:
    """``RunDirError`` naming the first of the run's files in ``run_dir`` that the run can't take as
    its own, before it opens any: its config, ``checkpoints/`` and ``rank``'s checkpoints there, and
    each of ``files`` (read, or replaced whole) and ``appended`` (written in place: its logs) that lies
    inside ``run_dir``.

    Refused: a symbolic link (a run writes, truncates and deletes only inside its own directory, never
    where a link someone planted points); anything but a plain file (a FIFO, socket or device would
    block the open or swallow the writes; ``checkpoints/`` must be a directory); a leftover
    ``<name>.partial`` that is a directory (``replacing`` could not remove it); and a file written in
    place that has another name (a hard link: the other name may lie outside the run).
    A missing file is fine: the run creates it.
    """
    checkpoints = run_dir / CHECKPOINTS
    own = [checkpoints, run_dir / CONFIG_NAME]
    if checkpoints.is_dir() and not checkpoints.is_symlink():
        own += sorted(rank_checkpoints(checkpoints, rank).values())
        own += sorted(checkpoints.glob("step_*.partial"))
    inside = [Path(file) for file in files if file is not None and _inside(Path(file), run_dir)]
    inside += [path.with_name(f"{path.name}.partial") for path in [run_dir / CONFIG_NAME, *inside]]
    written = [Path(file) for file in appended if file is not None and _inside(Path(file), run_dir)]
    for path in [*own, *inside, *written]:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as error:
            raise _error(path, error, "can't use it") from None
        if path.name.endswith(".partial"):
            if stat.S_ISDIR(info.st_mode):
                raise _odd(path, "a directory", "nothing, or a file left by a write that failed")
            continue
        if stat.S_ISLNK(info.st_mode):
            raise _linked(path)
        if path == checkpoints:
            if not stat.S_ISDIR(info.st_mode):
                raise _odd(path, _kind(info.st_mode), "a directory")
        elif not stat.S_ISREG(info.st_mode):
            raise _odd(path, _kind(info.st_mode))
        elif path in written and info.st_nlink > 1:
            raise _shared(path, info.st_nlink)


def _inside(path: Path, run_dir: Path) -> bool:
    return os.path.abspath(path).startswith(os.path.join(os.path.abspath(run_dir), ""))


def _linked(path: Path) -> RunDirError:
    what = "checkpoints" if path.name == CHECKPOINTS else "its files"
    fix = "a directory" if path.name == CHECKPOINTS else "the file itself, or remove it"
    return RunDirError(
        path,
        f"is a symbolic link (to {os.readlink(path)}); a run writes {what} only inside its own "
        f"directory: replace the link with {fix}",
    )


def _odd(path: Path, kind: str, expected: str = "a regular file") -> RunDirError:
    return RunDirError(
        path,
        f"is {kind}, expected {expected}: a run opens only plain files of its own in its directory; "
        "remove it, or pass another --run-dir",
    )


def _shared(path: Path, links: int) -> RunDirError:
    return RunDirError(
        path,
        f"has {links} hard links, expected 1: a run writes only a file of its own, and another name "
        f"for this one may lie outside the run; replace it with a copy (cp {path.name} "
        f"{path.name}.copy && mv {path.name}.copy {path.name}), or remove it",
    )


def _kind(mode: int) -> str:
    """What a file of ``mode`` is, in words: ``"a FIFO"``, ``"a socket"``, ``"a directory"``..."""
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symbolic link"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def open_file(
    path: Path, flags: int = os.O_RDONLY, *, in_place: bool = False, follow: bool = False, mode: int = 0o644
) -> int:
    """A descriptor of the run's file ``path`` (``os.open`` with ``flags``), which is a regular file:
    the one way a run opens a file in its directory.

    Opened with ``O_NOFOLLOW|O_NONBLOCK`` and checked with ``fstat`` before it is used (then set
    blocking): a FIFO, socket or device in its place never blocks the open; it, a directory or a
    symbolic link is a ``RunDirError`` naming ``path`` and what was expected. ``in_place``: the
    file is written in place (the lock), so one with another name (a hard link) is refused too.
    ``follow``: a symbolic link is followed (a file a user names, ``Trainer.load_checkpoint``).
    Other failures are the ``OSError``.
    """
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else _NOFOLLOW), mode)
    except OSError:
        with contextlib.suppress(OSError):
            info = os.stat(path) if follow else os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                raise _linked(path) from None
            if not stat.S_ISREG(info.st_mode):  # a FIFO nobody reads, a socket, a directory
                raise _odd(path, _kind(info.st_mode)) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _odd(path, _kind(info.st_mode))
        if in_place and info.st_nlink > 1:
            raise _shared(path, info.st_nlink)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_text(path: Path) -> str:
    """The UTF-8 text of the run's file ``path``, opened by ``open_file`` (never blocking, never
    through a link)."""
    with open(open_file(path), encoding="utf-8") as file:
        return file.read()


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[IO[bytes]]:
    """A new file to write the run's file ``path`` into, renamed over ``path`` once written and
    synced; on failure it is removed and ``path`` is left as it was.

    The new file is ``<name>.partial``, created anew (``O_EXCL|O_NOFOLLOW``) after whatever is left
    under that name is removed: never written through a link. The rename replaces a symbolic or
    hard link named ``path``, rather than write where it points."""
    partial = path.with_name(path.name + ".partial")
    try:
        partial.unlink(missing_ok=True)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | _NOFOLLOW, 0o644)
        with open(fd, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) as the run's file ``path``, through ``replacing``: never through a
    symbolic or hard link in its place."""
    with replacing(path) as file:
        file.write(text.encode("utf-8"))


def checkpoint_name(step: int, rank: int) -> str:
    """``step_00000006.pt`` for rank 0, ``step_00000006.rank1.pt`` for rank 1 (the record contract's
    ``rank_path``, as for a run's metrics files): each rank's own state."""
    return rank_path(f"step_{step:08d}.pt", rank).name


def checkpoint_steps(directory: Path) -> set[int]:
    """The steps any rank's checkpoint in ``directory`` is at."""
    found = (_step_and_rank(path.name) for path in directory.glob("step_*.pt"))
    return {step for step, _ in filter(None, found)}


def rank_checkpoints(directory: Path, rank: int) -> dict[int, Path]:
    """``rank``'s checkpoint files in ``directory`` (a run's ``checkpoints/``), by step."""
    found = ((_step_and_rank(path.name), path) for path in directory.glob("step_*.pt"))
    return {mark[0]: path for mark, path in found if mark is not None and mark[1] == rank}


def _step_and_rank(name: str) -> tuple[int, int] | None:
    """The step and rank of a checkpoint file's name (``checkpoint_name``); ``None`` for another name."""
    base, rank = rank_of_name(name) or (name, 0)
    match = _STEP_FILE.fullmatch(base)
    if match is None or rank_path(base, rank).name != name:
        return None
    return int(match.group(1)), rank


_STEP_FILE = re.compile(r"step_(\d+)\.pt")
