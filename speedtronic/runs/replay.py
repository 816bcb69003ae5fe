"""``replay_run``: push a recorded run through hooks exactly as ``MetricLogger`` delivered it live.

Each record goes through the core's own ``DispatchHooks`` stage with the payload the live hooks got
(every key but ``event`` and ``timestamp``; NaN and infinities as floats again), in file order, and the
hooks are closed at the end. Records the logger wrote for itself (``hook_error``, ``logging_error``)
are not replayed: live hooks never saw them. So a ``TensorboardHook`` or ``WandbHook`` fed by a replay
writes the same tags, steps and values as one fed live; only wall-clock times differ (now, not then).
"""

from __future__ import annotations

import importlib
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speedtronic.hooks import CallbackList
from speedtronic.processors import DispatchHooks
from speedtronic.runs.reader import RankChoice, Skipped, read_records

__all__ = [
    "LOGGER_RECORDS",
    "ReplayRefused",
    "ReplayResult",
    "replay_run",
    "tensorboard_events",
    "tensorboard_hook",
    "wandb_hook",
]

LOGGER_RECORDS = frozenset({"hook_error", "logging_error"})
"""Events ``MetricLogger`` writes about itself to the text log and JSONL only, never to hooks."""


class ReplayRefused(Exception):
    """A replay target that would mix the replay into existing data: ``"<path>: <reason>"``."""


@dataclass
class ReplayResult:
    """What a replay delivered, per event, and what it left out."""

    replayed: Counter[str] = field(default_factory=Counter)
    not_replayed: Counter[str] = field(default_factory=Counter)
    """The logger's own records, per event: they were never delivered to hooks."""
    skipped: Skipped = field(default_factory=Skipped)


def replay_run(
    path: str | os.PathLike[str],
    hooks: Sequence[Any],
    *,
    rank: RankChoice = "first",
    close: bool = True,
) -> ReplayResult:
    """Deliver every record of the run at ``path`` to ``hooks``, then close them (unless ``close=False``).

    Hooks are checked first, as ``MetricLogger.hooks`` checks them (``TypeError`` naming a bad one).
    A hook's exception stops the replay and propagates, after the hooks are closed: a replay that
    silently lost points would not look like the live run. Raises ``speedtronic.runs.RunError`` for a
    run that can't be read.
    """
    checked = CallbackList(hooks)  # checks each hook; closes all of them even after one fails
    result = ReplayResult()
    dispatch = DispatchHooks(checked.callbacks, on_error=_reraise, consume=False)
    try:
        for record in read_records(path, result.skipped, rank=rank):
            if record.event in LOGGER_RECORDS:
                result.not_replayed[record.event] += 1
                continue
            dispatch(None, "info", {**record.payload, "event": record.event})
            result.replayed[record.event] += 1
    finally:
        if close:
            checked.close()
    return result


def _reraise(hook: object, error: Exception, event: str) -> None:
    raise error


def tensorboard_events(log_dir: str | os.PathLike[str]) -> list[Path]:
    """The TensorBoard event files directly in ``log_dir`` (the ones that form its run)."""
    directory = Path(log_dir)
    return sorted(directory.glob("events.out.tfevents.*")) if directory.is_dir() else []


def tensorboard_hook(log_dir: str | os.PathLike[str], *, append: bool = False) -> Any:
    """A ``speedtronic.integrations.TensorboardHook`` writing to ``log_dir``.

    Raises ``ReplayRefused`` when ``log_dir`` already holds event files, unless ``append``: TensorBoard
    reads every event file of a directory as one run, so a replay there would mix with what is there.
    Subdirectories are other runs and don't count. ``log_dir`` is created first: a path that can't be
    a writable directory is a ``ReplayRefused`` naming it.
    """
    _writable_directory(Path(log_dir))
    existing = tensorboard_events(log_dir)
    if existing and not append:
        raise ReplayRefused(
            f"{log_dir}: already holds TensorBoard events ({existing[0].name}"
            f"{f' and {len(existing) - 1} more' if len(existing) > 1 else ''}); "
            "replay into an empty directory, or pass --append to add to that run"
        )
    return _integrations().TensorboardHook(log_dir)


def _writable_directory(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise ReplayRefused(f"{path}: expected a directory for TensorBoard events, found a file")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        where = error.filename if error.filename is not None else path
        reason = error.strerror or str(error)
        raise ReplayRefused(f"{where}: can't create the TensorBoard directory: {reason}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ReplayRefused(f"{path}: expected a writable directory for TensorBoard events: access denied")


def wandb_hook(project: str, **init_kwargs: Any) -> Any:
    """A ``speedtronic.integrations.WandbHook`` creating a run in ``project`` (``mode="offline"`` works)."""
    return _integrations().WandbHook(project=project, **init_kwargs)


def _integrations() -> Any:
    """``speedtronic.integrations``, imported when a target is created (it imports no SDK itself)."""
    try:
        return importlib.import_module("speedtronic.integrations")
    except ModuleNotFoundError as error:
        if error.name != "speedtronic.integrations":
            raise
        raise ModuleNotFoundError(
            "speedtronic replay needs speedtronic.integrations (TensorboardHook, WandbHook), "
            "which this speedtronic lacks",
            name=error.name,
        ) from error
