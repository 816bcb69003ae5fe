"""``replay_run``: push a recorded run through hooks exactly as ``MetricLogger`` delivered it live."""

from __future__ import annotations

import inspect
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speedtronic.alerts import ALERT, Rule
from speedtronic.hooks import CallbackList, DispatchHooks, build_hook, hook_type
from speedtronic.runs.backtest import RunAlerts
from speedtronic.runs.reader import RankChoice, Skipped, read_records

__all__ = [
    "ReplayRefused",
    "ReplayResult",
    "replay_hook",
    "replay_run",
    "tensorboard_events",
    "tensorboard_hook",
    "wandb_hook",
]


class ReplayRefused(Exception):
    """A replay target that would mix the replay into existing data: ``"<path>: <reason>"``."""


@dataclass
class ReplayResult:
    """What a replay delivered, per event, and what it left out."""

    replayed: Counter[str] = field(default_factory=Counter)
    not_replayed: Counter[str] = field(default_factory=Counter)
    """The logger's own records, per event: they were never delivered to hooks."""
    skipped: Skipped = field(default_factory=Skipped)
    recorded_alerts: int = 0
    """The run's own ``alert`` records, left out for the re-derived ones (``replay_run(alerts=...)``)."""
    alerts: list[dict[str, Any]] = field(default_factory=list)
    """The alerts re-derived (``replay_run(alerts=...)``), each the payload of its ``alert`` record."""


def replay_run(
    path: str | os.PathLike[str],
    hooks: Sequence[Any],
    *,
    rank: RankChoice = "first",
    close: bool = True,
    alerts: Callable[[], Iterable[Rule]] | None = None,
) -> ReplayResult:
    """Deliver every record of the run at ``path`` to ``hooks``, then close them (unless ``close=False``).

    Hooks are checked first, as ``MetricLogger.hooks`` checks them (``TypeError`` naming a bad one).
    A hook's exception stops the replay and propagates, after the hooks are closed: a replay that
    silently lost points would not look like the live run. Raises ``speedtronic.runs.RunError`` for a
    run that can't be read.

    ``alerts`` (a function returning new rules) re-derives the run's alerts: the ``alert`` records in
    the run are left out, and each alert the rules raise is delivered right after the record that
    raised it (with that record's ``timestamp``), as a live logger given those rules would have.
    """
    checked = CallbackList(hooks)  # checks each hook; closes all of them even after one fails
    result = ReplayResult()
    dispatch = DispatchHooks(checked.callbacks, on_error=_reraise, consume=False)
    derive = RunAlerts(alerts) if alerts is not None else None
    try:
        for record in read_records(path, result.skipped, rank=rank):
            if record.own:  # the logger's own report; a user event of the same name is replayed
                result.not_replayed[record.event] += 1
                continue
            if derive is not None and record.event == ALERT:  # re-derived below instead
                result.recorded_alerts += 1
                continue
            dispatch(None, "info", {**record.hook_payload, "event": record.event})
            result.replayed[record.event] += 1
            for payload in derive.check(record) if derive is not None else ():
                stamped = {**payload, "timestamp": record.timestamp} if record.timestamp else payload
                dispatch(None, payload["severity"], {**stamped, "event": ALERT})
                result.replayed[ALERT] += 1
                result.alerts.append(payload)
    finally:
        if close:
            checked.close()
    return result


def _reraise(hook: object, error: Exception, event: str | None) -> None:
    raise error


def replay_hook(type_name: str, options: Mapping[str, Any] | None = None, *, append: bool = False) -> Any:
    """A hook of a registered type (``speedtronic.hooks.hook_types()``: speedtronic's own and any
    installed package's), constructed with ``options`` as keyword arguments, to replay into.

    Made as a config's hook entry is (``speedtronic.hooks.build_hook``). A ``tensorboard`` hook's
    ``log_dir`` is checked first, as ``tensorboard_hook`` describes. Raises ``LookupError`` for a type
    that isn't registered (naming the known ones), ``ReplayRefused`` for a TensorBoard directory that
    would mix runs, and ``HookConfigError`` for options the type doesn't take or a hook that can't be
    made.
    """
    options = dict(options or {})
    if type_name == "tensorboard":
        log_dir = options.get("log_dir", _default(hook_type(type_name), "log_dir"))
        if log_dir is not None:
            _refuse_mixing(Path(str(log_dir)), append)
    return build_hook(type_name, options)


def tensorboard_events(log_dir: str | os.PathLike[str]) -> list[Path]:
    """The TensorBoard event files directly in ``log_dir`` (the ones that form its run)."""
    directory = Path(log_dir)
    return sorted(directory.glob("events.out.tfevents.*")) if directory.is_dir() else []


def tensorboard_hook(log_dir: str | os.PathLike[str], *, append: bool = False) -> Any:
    """The registered ``tensorboard`` hook (``TensorboardHook``) writing to ``log_dir``.

    Raises ``ReplayRefused`` when ``log_dir`` already holds event files, unless ``append``: TensorBoard
    reads every event file of a directory as one run, so a replay there would mix with what is there.
    Subdirectories are other runs and don't count. ``log_dir`` is created first: a path that can't be
    a writable directory is a ``ReplayRefused`` naming it.
    """
    return replay_hook("tensorboard", {"log_dir": log_dir}, append=append)


def wandb_hook(project: str, **init_kwargs: Any) -> Any:
    """The registered ``wandb`` hook (``WandbHook``) creating a run in ``project`` (``mode="offline"``
    works)."""
    return replay_hook("wandb", {"project": project, **init_kwargs})


def _refuse_mixing(log_dir: Path, append: bool) -> None:
    _writable_directory(log_dir)
    existing = tensorboard_events(log_dir)
    if existing and not append:
        raise ReplayRefused(
            f"{log_dir}: already holds TensorBoard events ({existing[0].name}"
            f"{f' and {len(existing) - 1} more' if len(existing) > 1 else ''}); "
            "replay into an empty directory, or pass --append to add to that run"
        )


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


def _default(factory: Any, parameter: str) -> Any:
    """The default of ``factory``'s ``parameter``, or ``None`` when it has none (or no signature)."""
    try:
        found = inspect.signature(factory).parameters.get(parameter)
    except (TypeError, ValueError):
        return None
    return None if found is None or found.default is found.empty else found.default
