"""A run directory is one run: claimed once, refused to a second run, its config revisions kept.

``claim`` makes the directory a run starts in: a fresh ``runs/<YYYYmmdd-HHMMSS>`` is created with an
exclusive ``mkdir`` (``-2``, ``-3``... on collision), so parallel launches never share one; a named
one that already holds a run is refused unless the run resumes. ``record_config`` writes
``config.yaml`` and, when a resumed run changes it, keeps the previous one as ``config.<n>.yaml``.
Every file-system problem is a ``RunDirError`` naming the path and what was expected.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from speedtronic.training.config import ConfigError

__all__ = [
    "CHECKPOINTS",
    "CONFIG_NAME",
    "RunDirError",
    "checkpoint_name",
    "claim",
    "config_changes",
    "holds_run",
    "rank_checkpoints",
    "record_config",
]

CONFIG_NAME = "config.yaml"
CHECKPOINTS = "checkpoints"
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
        raise RunDirError(
            path, "already holds a run; continue it with --resume, or pass another --run-dir"
        )
    return path


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
        raise RunDirError(path, "expected a writable directory: permission denied")


def _error(path: Path, error: OSError) -> RunDirError:
    where = error.filename if error.filename is not None else path
    reason = error.strerror or str(error)
    if isinstance(error, (FileExistsError, NotADirectoryError)):
        reason = f"{reason} (a file is where a directory should be)"
    return RunDirError(where, f"can't create the run directory: {reason}")


def config_changes(before: Mapping[str, Any], after: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``"train.steps: 20 -> 40"`` for each key whose value differs (``train.resume`` left out)."""
    changes = []
    for key in dict.fromkeys([*before, *after]):
        name = f"{prefix}{key}"
        old, new = before.get(key), after.get(key)
        if name == "train.resume":
            continue
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            changes += config_changes(old, new, f"{name}.")
        elif old != new:
            changes.append(f"{name}: {_shown(old)} -> {_shown(new)}")
    return changes


def _shown(value: Any) -> str:
    return "null" if value is None else str(value)


def record_config(run_dir: Path, config: Mapping[str, Any]) -> int:
    """Write ``config.yaml``; if it holds a different config, keep that one as ``config.<n>.yaml``.

    Returns the revision now in ``config.yaml`` (1 for a run's first config).
    """
    import yaml

    path = run_dir / CONFIG_NAME
    text = yaml.safe_dump(dict(config), sort_keys=False)
    revisions = sorted(run_dir.glob("config.*.yaml"))
    revision = len(revisions) + 1
    try:
        if path.exists():
            previous = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            if config_changes(previous, config):
                path.replace(run_dir / f"config.{revision}.yaml")
                revision += 1
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        reason = error.strerror or str(error)
        raise RunDirError(error.filename or path, f"can't write the config: {reason}") from None
    return revision


def checkpoint_name(step: int, rank: int) -> str:
    """``step_00000006.pt`` for rank 0, ``step_00000006.rank1.pt`` for rank 1: each rank's own state."""
    return f"step_{step:08d}{f'.rank{rank}' if rank else ''}.pt"


def rank_checkpoints(directory: Path, rank: int) -> dict[int, Path]:
    """``rank``'s checkpoint files in ``directory`` (a run's ``checkpoints/``), by step."""
    pattern = re.compile(rf"step_(\d+){re.escape(f'.rank{rank}' if rank else '')}\.pt")
    return {
        int(match.group(1)): path
        for path in directory.glob("step_*.pt")
        if (match := pattern.fullmatch(path.name))
    }
