"""From a config to a finished run: ``load_config``, ``open_start``, ``build_logger``,
``build_runtime``, and ``train_from_config``. Importing this module does not import torch; building
a runtime does."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speedtronic.alerts import AlertConfigError, CheckAlerts, rules_from_config
from speedtronic.distributed import RankInfo, detect_rank, is_lead
from speedtronic.errors import SpeedtronicWarning
from speedtronic.extras import require
from speedtronic.hooks import BackgroundHooks, close_hook
from speedtronic.hooks.registry import (
    ENTRY_POINT_GROUP,
    HookConfigError,
    build_hook,
    hook_argument_problem,
    hook_type,
    hook_types,
)
from speedtronic.integrations.system import SystemMonitor
from speedtronic.processors.validate import ValidatePayloads
from speedtronic.profiling import MetricLogger
from speedtronic.record import rank_path
from speedtronic.stacks import StackDump, register_stack_dump
from speedtronic.training import launch as _launch
from speedtronic.training import rundir as _rundir
from speedtronic.training.config import (
    SCHEMA,
    ConfigError,
    default_values,
    validate,
    yaml_loader,
    yaml_problem,
)

if TYPE_CHECKING:
    from speedtronic.training.outer import OuterLoop
    from speedtronic.training.trainer import FitResult, Trainer

__all__ = [
    "HOOK_DEFAULTS",
    "HOOK_ENTRY_POINT_GROUP",
    "ConfigError",
    "OpenedStart",
    "RunDirError",
    "RunInfo",
    "build_logger",
    "build_runtime",
    "default_config",
    "default_hooks",
    "fit_and_close",
    "hook_argument_problem",
    "hook_types",
    "load_config",
    "open_start",
    "train_from_config",
    "warmup_cosine",
]

HOOK_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "tensorboard": {"log_dir": "{run_dir}/tensorboard"},
    "wandb": {"dir": "{run_dir}"},
}
"""Keyword arguments a built-in hook gets unless its config entry sets them: files under the run dir."""

HOOK_ENTRY_POINT_GROUP = ENTRY_POINT_GROUP
"""The entry-point group every hook type is registered in, speedtronic's own included."""

_RUN_DIR = "{run_dir}"
RunDirError = _rundir.RunDirError

TRACKERS_NAME = "trackers.json"
"""The file in a run directory naming the W&B and MLflow runs its hooks log to, which ``--resume``
continues."""


def default_config() -> dict[str, Any]:
    """The embedded default (``speedtronic.training.config.Config``): the reference trainer learning a
    synthetic next-token task in seconds.

    ``run_dir`` is ``None``: the run claims a fresh ``runs/<timestamp>`` when it starts; ``{run_dir}``
    in a logging path or a hook's argument stands for it. TensorBoard logging is on when it can be
    (see ``default_hooks``).
    """
    config = default_values()
    config["logging"]["hooks"] = default_hooks()
    return config


def default_hooks() -> list[dict[str, Any]]:
    """``[{type: tensorboard, ...}]`` when the ``tensorboard`` hook type resolves and the tensorboard
    package is installed, else ``[]``. Checked when called, never at import."""
    if importlib.util.find_spec("tensorboard") is None:
        return []
    try:
        hook_type("tensorboard")
    except LookupError:
        return []
    return [{"type": "tensorboard", **HOOK_DEFAULTS["tensorboard"]}]


# -- loading -------------------------------------------------------------------------------------


def load_config(
    source: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The config from a YAML file or a mapping, merged over ``default_config()``, checked, resolved.

    ``overrides`` (the command line's options) are merged last. A run that resumes (``train.resume``)
    in a ``run_dir`` holding a ``config.yaml`` starts from that recorded config instead of the
    defaults: only what ``source`` and ``overrides`` set is applied on top. ``train.schedule_steps``
    left null becomes ``train.steps``. Raises ``ConfigError`` naming the file, the key and what was
    expected. Loading a loaded config returns an equal one.
    """
    if source is None:
        layer: Any = {}
        name = "config"
    elif isinstance(source, Mapping):
        layer, name = source, "config"
    else:
        layer, name = _read_yaml(Path(source)), str(source)
    layers = ((name, layer), ("command line", overrides or {}))
    config = default_config()
    for layer_name, values in layers:
        validate(values, SCHEMA, layer_name)
        _merge(config, values)
    recorded = _recorded_config(config)
    if recorded is not None:
        moved_from, run_dir = recorded["run_dir"], config["run_dir"]
        config = recorded
        for _, values in layers:
            _merge(config, values)
        config["run_dir"] = run_dir
        if moved_from not in (None, run_dir):  # the directory was moved: its paths move with it
            config = _resolve_run_dir(config, placeholder=moved_from)
    if config["train"]["schedule_steps"] is None:
        config["train"]["schedule_steps"] = max(1, config["train"]["steps"])
    for index, spec in enumerate(config["logging"]["hooks"]):
        try:
            hook_type(spec["type"])
        except LookupError as error:
            raise ConfigError(name, f"logging.hooks[{index}].type", str(error)) from None
        config["logging"]["hooks"][index] = {**HOOK_DEFAULTS.get(spec["type"], {}), **spec}
    try:
        rules_from_config(config["alerts"], name)
    except AlertConfigError as error:
        raise ConfigError(name, error.key, error.problem) from None
    return _resolve_run_dir(config) if config["run_dir"] is not None else config


def _recorded_config(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The config a resumed run recorded in ``run_dir/config.yaml`` (checked), or ``None``."""
    if not config["train"]["resume"] or config["run_dir"] is None:
        return None
    path = Path(config["run_dir"]) / _rundir.CONFIG_NAME
    if not os.path.lexists(path):
        return None
    recorded = default_config()
    values = _read_yaml(path, _rundir.read_text)
    validate(values, SCHEMA, str(path))
    _merge(recorded, values)
    return recorded


def _plain_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _read_yaml(path: Path, read: Callable[[Path], str] = _plain_text) -> Any:
    """The YAML document in ``path``, read by ``read`` (a run's own file: ``rundir.read_text``, which
    refuses a link, FIFO or device there rather than block on it; a ``--config`` may be a pipe)."""
    yaml = require("yaml", "torch", needed_by="reading a YAML config", package="PyYAML")
    try:
        text = read(path)
    except OSError as error:
        raise ConfigError(str(path), "", f"can't read it: {_rundir.describe_os_error(error)}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(str(path), "", f"can't read it: expected UTF-8 text ({error.reason})") from None
    try:
        data = yaml.load(text, Loader=yaml_loader())  # a SafeLoader that reads 1e-3 as a number
    except yaml.YAMLError as error:
        raise ConfigError(str(path), *yaml_problem(error)) from None
    return {} if data is None else data


def _merge(base: dict[str, Any], layer: Mapping[str, Any]) -> None:
    """Merge ``layer`` into ``base``: mappings key by key, everything else (lists too) replaced."""
    for key, value in layer.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = _copy(value)


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


def _resolve_run_dir(config: dict[str, Any], placeholder: str = _RUN_DIR) -> dict[str, Any]:
    """Put ``run_dir`` for ``placeholder`` in the logging paths and hook arguments: ``{run_dir}``
    wherever it stands; another placeholder (the directory a moved run was recorded in) only where a
    path starts with it, so moving ``r`` to ``b`` leaves ``r/metrics.jsonl``'s own letters alone."""
    run_dir = config["run_dir"]

    def resolve(value: Any) -> Any:
        if isinstance(value, str):
            if placeholder == _RUN_DIR:
                return value.replace(placeholder, run_dir)
            prefix = placeholder.rstrip("/")
            if value == prefix or value.startswith(prefix + "/"):
                return run_dir + value[len(prefix) :]
            return value
        if isinstance(value, dict):
            return {key: resolve(item) for key, item in value.items()}
        if isinstance(value, list):
            return [resolve(item) for item in value]
        return value

    config["logging"] = resolve(config["logging"])
    return config


# -- hooks ---------------------------------------------------------------------------------------


def build_logger(config: Mapping[str, Any], *, device: Any = None) -> MetricLogger:
    """The ``MetricLogger`` the ``logging:`` section describes, with its ``hooks:`` constructed in order.

    Creates the run directory first, so a hook can write there. ``device`` is where memory is
    measured (default: ``train.device``). In a multi-process job (``detect_rank()``) the hooks are
    constructed on the lead rank only (``logging.lead_rank``, default 0; ``null``: every rank): a
    ``WandbHook`` creates its W&B run when built. If a hook or the logger can't be created, the hooks
    already created are closed and a ``ConfigError`` names the entry.
    """
    config = load_config(config)
    if config["run_dir"] is None:
        config["run_dir"] = str(_rundir.claim(None, resume=False))
        config = _resolve_run_dir(config)
    logging = config["logging"]
    rank = detect_rank()
    specs = logging["hooks"] if is_lead(rank, logging["lead_rank"]) else []
    if device is None and config["train"]["device"] != "auto":
        device = config["train"]["device"]
    _rundir.claim(config["run_dir"], resume=True)  # created first: hooks may write there
    run_dir = Path(config["run_dir"])
    recorded = _tracker_runs(run_dir) if config["train"]["resume"] else {}
    hooks: list[Any] = []
    try:
        of_type: dict[str, int] = {}
        for index, spec in enumerate(specs):
            nth = of_type[spec["type"]] = of_type.get(spec["type"], -1) + 1
            ids = recorded.get(spec["type"], [])
            run_id = ids[nth] if nth < len(ids) else None
            continuing = _continuing(spec, run_id)
            try:
                hooks.append(_build_hook(index, continuing))
            except ConfigError as error:
                if continuing is spec:
                    raise
                raise _not_continued(run_dir, spec["type"], nth, run_id, index, error) from error.__cause__
        if specs:
            _record_tracker_runs(run_dir, specs, hooks, recorded)
        if logging["file"] is not None:
            try:
                Path(logging["file"]).parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise ConfigError(
                    "config",
                    "logging.file",
                    f"can't create its directory {error.filename}: "
                    f"{_rundir.describe_os_error(error)}; expected a path whose directory can be made",
                ) from None
        try:
            return MetricLogger(
                level=logging["level"],
                file=logging["file"],
                json_file=logging["json_file"],
                every_steps=logging["every_steps"],
                hooks=hooks,
                device=device,
                strict_hooks=logging["strict_hooks"],
                rank=rank,
                lead_rank=logging["lead_rank"],
                processors=[ValidatePayloads()] if logging["validate"] else [],
                alerts=rules_from_config(config["alerts"]),
            )
        except OSError as error:
            raise _logging_file_error(logging, error) from None
        except ValueError as error:
            raise ConfigError("config", "logging", str(error)) from None
    except BaseException:
        for hook in reversed(hooks):
            with contextlib.suppress(Exception):  # the original error is the one to report
                close_hook(hook)
        raise


def _logging_file_error(logging: Mapping[str, Any], error: OSError) -> ConfigError:
    """The ``logging.file`` or ``logging.json_file`` that could not be opened, and why."""
    key = "logging"
    for name in ("file", "json_file"):
        if error.filename is not None and str(error.filename) == str(logging[name]):
            key = f"logging.{name}"
    where = f"can't open {error.filename}" if error.filename is not None else "can't open its files"
    return ConfigError("config", key, f"{where}: {_rundir.describe_os_error(error)}")


# -- the trackers' runs, kept in the run directory so that a resume continues them ----------------


def _tracker_runs(run_dir: Path) -> dict[str, list[str]]:
    """The W&B and MLflow runs a run's hooks logged to (``trackers.json``: ``{"wandb": [run id, ...],
    "mlflow": [run id, ...]}``, one per entry of the type, in order); ``{}`` when there is none."""
    path = run_dir / TRACKERS_NAME
    try:
        recorded = json.loads(_rundir.read_text(path))
    except FileNotFoundError:
        return {}
    except _rundir.RunDirError:
        raise
    except (OSError, ValueError) as error:
        raise ConfigError(str(path), "", f"can't read the trackers' run ids: {error}") from None
    if not isinstance(recorded, dict) or not all(
        isinstance(ids, list) and all(isinstance(i, str) for i in ids) for ids in recorded.values()
    ):
        raise ConfigError(str(path), "", 'expected {"wandb": [run id, ...], "mlflow": [run id, ...]}')
    return recorded


_CREATES_RUN = ("experiment", "run_name", "artifact_location")
"""An ``mlflow`` entry's keys that describe the run its hook creates: a resume continues that run."""


def _continuing(spec: Mapping[str, Any], run_id: str | None) -> Mapping[str, Any]:
    """``spec`` continuing the tracker run ``run_id``: W&B's ``id`` with ``resume="allow"``, MLflow's
    ``run_id`` (the run keeps its own experiment and name); as it is without one, or when the entry
    names its run itself."""
    if run_id is None:
        return spec
    if spec["type"] == "wandb" and not {"id", "run", "resume"} & spec.keys():
        return {**spec, "id": run_id, "resume": "allow"}
    if spec["type"] == "mlflow" and "run_id" not in spec:
        return {key: value for key, value in spec.items() if key not in _CREATES_RUN} | {"run_id": run_id}
    return spec


def _not_continued(
    run_dir: Path, type_name: str, nth: int, run_id: str | None, index: int, error: ConfigError
) -> ConfigError:
    """The hook continuing the tracker run ``trackers.json`` recorded could not be made: the error
    names that file first (the id there may be what the tracker refused), and what to do either way."""
    path = run_dir / TRACKERS_NAME
    return ConfigError(
        str(path),
        f"{type_name}[{nth}]",
        f"logging.hooks[{index}] can't continue the run {run_id!r} recorded here: {error.problem}; if "
        f"the tracker refused this run id, correct it, or remove it from {path} to start a new "
        f"{type_name} run; otherwise fix logging.hooks[{index}]",
    )


def _record_tracker_runs(
    run_dir: Path, specs: list[Mapping[str, Any]], hooks: list[Any], recorded: Mapping[str, list[str]]
) -> None:
    """Write ``trackers.json``: the run id of each ``wandb`` and ``mlflow`` hook, by type, in order
    (a type the run no longer has keeps what ``recorded`` says)."""
    found: dict[str, list[str]] = {}
    for spec, hook in zip(specs, hooks, strict=True):
        run_id = _tracker_run_id(spec["type"], hook)
        if run_id is not None:
            found.setdefault(spec["type"], []).append(run_id)
    if not found:
        return
    found = {**recorded, **found}
    path = run_dir / TRACKERS_NAME
    try:
        _rundir.write_text(path, json.dumps(found, indent=2) + "\n")
    except OSError as error:
        reason = _rundir.describe_os_error(error)
        raise _rundir.RunDirError(path, f"can't write the trackers' run ids: {reason}") from None


def _tracker_run_id(type_name: str, hook: Any) -> str | None:
    if isinstance(hook, BackgroundHooks) and len(hook.hooks) == 1:  # a config's background: true
        hook = hook.hooks[0]
    if type_name == "wandb":
        run_id = getattr(getattr(hook, "run", None), "id", None)
    elif type_name == "mlflow":
        run_id = getattr(hook, "run_id", None)
    else:
        return None
    return run_id if isinstance(run_id, str) else None


def _build_hook(index: int, spec: Mapping[str, Any]) -> Any:
    try:
        return build_hook(spec["type"], {key: value for key, value in spec.items() if key != "type"})
    except HookConfigError as error:
        raise ConfigError("config", f"logging.hooks[{index}]", str(error)) from error.__cause__


# -- runtime -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunInfo:
    """Where a run's files are, and what it runs with."""

    run_dir: Path
    config: dict[str, Any]
    """The loaded config (also written to ``run_dir/config.yaml``)."""
    device: str
    checkpoint_dir: Path
    files: dict[str, str]
    """What the run writes, by label (``"text log"``, ``"metrics"``, ``"checkpoints"``, ...)."""
    rank: RankInfo = field(default_factory=RankInfo)
    """This process's place in the job."""
    owns_process_group: bool = False
    """Whether ``build_runtime`` initialised ``torch.distributed`` (``train_from_config`` destroys it)."""
    config_revision: int = 1
    """The revision of ``config.yaml`` this run wrote: 1, or more when a resume changed the config."""
    config_changes: tuple[_rundir.ConfigChange, ...] = ()
    """What a resume changed in the recorded config (``{"key": "train.steps", "old": 20, "new": 40}``)."""
    write_errors: int = 0
    """Records the logger could not write (set by ``train_from_config`` once the logger is closed)."""
    run: _rundir.OpenRun | None = field(default=None, repr=False, compare=False)
    """The run directory as this process holds it (rank 0): ``run.release()`` lets another run use
    it; ``train_from_config`` does that last, and the OS does when the process ends."""
    monitor: SystemMonitor | None = field(default=None, repr=False, compare=False)
    """The sampler of ``system`` events (``logging.system_interval_s``), started when training starts;
    ``train_from_config`` stops it before closing the logger."""
    hooks: tuple[Any, ...] = field(default=(), repr=False, compare=False)
    """The hooks ``logging.hooks`` built (on the lead rank), in order: where each tracker's run went
    (``speedtronic train``'s closing summary reads their ``run``, ``run_id``, ``endpoint``)."""
    stacks: StackDump | None = field(default=None, repr=False, compare=False)
    """The stack signal registered for this run (``speedtronic.stacks``); closed with the run."""
    alerts: CheckAlerts | None = field(default=None, repr=False, compare=False)
    """The logger's alert stage (``alerts`` in the config), whose ``counts`` tell the alerts this process
    raised per rule; ``None`` without rules."""


def _settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The run's settings as trackers record them: the config without ``train.resume``, which says how
    this process started, not what the run is (a resume would change an MLflow param that can't)."""
    return {**config, "train": {key: value for key, value in config["train"].items() if key != "resume"}}


@dataclass(frozen=True)
class OpenedStart:
    """A run's start as ``open_start`` opened it, before torch is imported: the loaded config (its
    ``run_dir`` claimed) and the run directory this process holds locked, its files checked."""

    config: dict[str, Any]
    run: _rundir.OpenRun | None
    """The locked run directory; ``None`` in a multi-process job, whose ranks open it together in
    ``build_runtime`` (they agree over a gloo group, which needs torch)."""
    config_changes: tuple[_rundir.ConfigChange, ...] = ()
    """What a resume changed in the recorded config."""

    def undo(self) -> None:
        """Leave the run directory as it was found and release it: for a start that is not built
        (``build_runtime`` does this itself when it fails)."""
        if self.run is not None:
            self.run.undo()


def open_start(config: Mapping[str, Any] | str | os.PathLike[str]) -> OpenedStart:
    """The config loaded and its run directory opened, locked and checked, without importing torch:
    what ``build_runtime`` does first, so a start it would refuse answers before torch loads.

    Raises ``ConfigError`` for the config, then ``RunDirError`` for a run directory the run can't use
    (``speedtronic.training.rundir.open_run``: another live run holds it, ``train.resume`` of one that
    holds no run...; ``check_files``: a link, FIFO, socket or directory in place of a run file). Hand
    the result to ``build_runtime``, which then owns the directory; one never built is left with
    ``undo()``. In a multi-process job the directory is left to ``build_runtime`` (``run`` is ``None``).
    """
    config = load_config(config)
    rank = detect_rank()
    if rank.distributed:
        return OpenedStart(config, None)
    opened = _rundir.open_run(config["run_dir"], resume=config["train"]["resume"])
    try:
        if config["run_dir"] is None:
            config["run_dir"] = str(opened.path)
            config = _resolve_run_dir(config)
        changes = _check_start(config, rank)
    except BaseException:
        opened.undo()
        raise
    return OpenedStart(config, opened, changes)


def _check_start(config: Mapping[str, Any], rank: RankInfo) -> tuple[_rundir.ConfigChange, ...]:
    """The checks of an opened run directory: the files this process appends to and ``trackers.json``
    (``check_files``), and what a resume changed in the recorded config (rank 0, its one writer)."""
    run_dir = Path(config["run_dir"])
    _rundir.check_files(run_dir, [run_dir / TRACKERS_NAME], appended=_own_files(config, rank), rank=rank.rank)
    previous = _read_recorded(run_dir) if config["train"]["resume"] and rank.rank == 0 else None
    return tuple(_rundir.config_changes(previous, config)) if previous is not None else ()


def build_runtime(
    config: Mapping[str, Any] | str | os.PathLike[str] | OpenedStart,
) -> tuple[Trainer, RunInfo]:
    """A ``Trainer`` for the config, its ``logger`` built by ``build_logger``, and where the run goes.

    The run directory is opened first (``open_start``, unless ``config`` is the ``OpenedStart`` it
    returned): a fresh one when the config names none; one holding another run is refused unless
    ``train.resume``, one that holds no run is refused with it, and one another live run holds is
    refused. It stays locked until ``info.run.release()`` (``train_from_config`` calls it). If the
    start fails, what it created in the directory is removed (``OpenRun.undo``), so the same start
    can be retried. The caller owns ``trainer.logger`` and ``trainer.outer`` (with
    ``train.outer_every``) and, when ``info.owns_process_group``, the process group:
    ``train_from_config`` closes all three, the outer loop's thread first.
    """
    opening = config if isinstance(config, OpenedStart) else open_start(config)
    config, opened = opening.config, opening.run
    train = config["train"]
    logger = None
    monitor: SystemMonitor | None = None
    stacks: StackDump | None = None
    outer: OuterLoop | None = None
    owns_group = False
    try:
        from speedtronic.training.trainer import Trainer, resolve_device  # noqa: I001  # first: it names the extra
        import torch

        from speedtronic.training import task as _task
        from speedtronic.training.outer import OuterLoop

        rank = detect_rank()
        _check_cuda(train["device"])
        try:
            device = _launch.device_for_rank(resolve_device(train["device"]), rank)
        except (RuntimeError, AssertionError) as error:  # torch.device(), or CUDA in a CPU build
            raise ConfigError("config", "train.device", f"can't use {train['device']!r}: {error}") from None
        owns_group = _launch.init_process_group(rank, device, train["dist_timeout_s"])
        rank = detect_rank()
        start, start_group = _agree_on_start(opening, rank)
        config, train = start.config, start.config["train"]
        changes = opening.config_changes if opened is not None else _check_start(config, rank)
        torch.manual_seed(train["seed"])
        data = config["data"]
        task = _task.SuccessorTask(
            data["vocab_size"],
            data["seq_len"],
            train["batch_size"],
            data["noise"],
            train["seed"],
            shard=rank.rank,
        )
        model: torch.nn.Module = _task.successor_model(data["vocab_size"], config["model"]["hidden"])
        model = model.to(device)
        if rank.distributed and not train["outer_every"]:
            model = torch.nn.parallel.DistributedDataParallel(
                model,
                device_ids=[device.index] if device.type == "cuda" else None,
                process_group=_launch.training_group(),
            )
        optimizer = torch.optim.AdamW(model.parameters(), lr=train["lr"])
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, warmup_cosine(train["warmup_steps"], train["schedule_steps"])
        )
        run_dir = Path(config["run_dir"])
        logger = build_logger(config, device=device)
        try:
            trainer = Trainer(
                model,
                optimizer,
                task,
                steps=train["steps"],
                scheduler=scheduler,
                logger=logger,
                device=device,
                precision=train["precision"],
                grad_accum=train["grad_accum"],
                max_grad_norm=train["max_grad_norm"],
                compile=train["compile"],
                checkpoint_dir=run_dir / "checkpoints",
                checkpoint_every=train["checkpoint_every"],
                keep_checkpoints=train["keep_checkpoints"],
                resume=train["resume"],
                eval_data=task.held_out(train["eval_batches"]) if train["eval_every"] else None,
                eval_every=train["eval_every"],
                resume_group=start_group,
                stop_on_alert=config["on_alert"] == "stop",
                peak_flops=train["peak_flops"],
            )
            trainer.at_fit_start.insert(0, _train_at(train["lr"]))
            monitor = _system_monitor(config["logging"]["system_interval_s"], logger, rank)
            if monitor is not None:
                trainer.after_train_start.append(lambda _: monitor.start())  # a run's records begin with it
            trainer.start_notes["lr_schedule_steps"] = train["schedule_steps"]
            with contextlib.suppress(ValueError):  # no signal to use here: the run goes on without
                # pid, stack_signal, stacks: what `speedtronic tail --dump-stacks` signals on a stall
                stacks = register_stack_dump(run_dir, rank.rank)
                trainer.start_notes.update(stacks.notes)
            trainer.hyperparams = _settings(config)  # for trackers (W&B's run config, MLflow's params)
            if changes:
                trainer.start_notes["config_changes"] = list(changes)
            if train["outer_every"]:
                outer = OuterLoop(
                    trainer, train["outer_every"], lr=train["outer_lr"], momentum=train["outer_momentum"]
                )
        except ValueError as error:
            raise ConfigError("config", "train", str(error)) from None
        # Last: a start that failed above leaves no config revision behind.
        revision = _rundir.record_config(run_dir, config) if start.writes_config else 0  # one per directory
        if rank.distributed and start.writes_config:
            _launch.write_ranks(run_dir, start, rank.world_size)
        for note in start.notes:
            warnings.warn(f"speedtronic: {note}", SpeedtronicWarning, stacklevel=2)
        info = RunInfo(
            run_dir=run_dir,
            config=config,
            device=str(device),
            checkpoint_dir=run_dir / "checkpoints",
            files=_files(config, run_dir / "checkpoints", rank),
            rank=rank,
            owns_process_group=owns_group,
            config_revision=revision,
            config_changes=changes,
            run=opened,
            monitor=monitor,
            hooks=tuple(logger.hooks),
            stacks=stacks,
            alerts=logger.chain.alerts,
        )
    except BaseException:
        _launch.shutdown(
            [
                step
                for step in (
                    outer.close if outer is not None else None,  # its thread joined before the group goes
                    monitor.close if monitor is not None else None,
                    stacks.close if stacks is not None else None,
                    logger.close if logger is not None else None,
                    _launch.destroy_process_group if owns_group else None,
                    opened.undo if opened is not None else None,  # files closed first: then removable
                )
                if step is not None
            ],
            quiet=True,
        )
        raise
    return trainer, info


def _train_at(lr: float) -> Callable[[Trainer], None]:
    """An ``at_fit_start`` callback: a resumed run trains at the config's ``train.lr`` (what
    ``config.yaml`` and ``config_changes`` record), not the one its checkpoint's optimizer and
    schedule were saved with. The schedule's position is kept: each group's LR is rescaled by
    new/old, and the schedule's base LRs become ``lr``."""

    def apply(trainer: Trainer) -> None:
        if trainer.resumed_from is None:
            return
        for group in trainer.optimizer.param_groups:
            saved = float(group.get("initial_lr", group["lr"]))
            if saved > 0 and saved != lr:
                group["lr"] = group["lr"] * lr / saved
            group["initial_lr"] = lr
        if trainer.scheduler is not None:
            trainer.scheduler.base_lrs = [lr for _ in trainer.scheduler.base_lrs]

    return apply


def _system_monitor(interval_s: float | None, logger: MetricLogger, rank: RankInfo) -> SystemMonitor | None:
    """The ``system`` sampler ``logging.system_interval_s`` asks for (the GPUs sampled by each node's
    local rank 0 only), or ``None``; without psutil, a warning saying what to install."""
    if interval_s is None:
        return None
    try:
        return SystemMonitor(logger, interval_s, gpus=rank.local_rank == 0)
    except ModuleNotFoundError as error:
        warnings.warn(
            f"speedtronic: no system events: {error}; or set logging.system_interval_s: null",
            SpeedtronicWarning,
            stacklevel=3,
        )
        return None


def _check_cuda(device: str) -> None:
    """A ``cuda`` device on a machine without CUDA: a ``ConfigError`` saying what works instead."""
    import torch

    if not device.startswith("cuda") or torch.cuda.is_available():
        return
    why = "this torch is a CPU-only build" if torch.version.cuda is None else "no CUDA GPU is visible"
    raise ConfigError(
        "config",
        "train.device",
        f"{device!r} needs CUDA, and there is no CUDA here ({why}); use 'auto' or 'cpu'",
    )


def _agree_on_start(opening: OpenedStart, rank: RankInfo) -> tuple[_launch.Start, Any]:
    """Where and how this process starts, and the group the ranks agreed over (``None`` for one
    process, whose run directory ``open_start`` opened).

    In a multi-process job, rank 0's config and checkpoints are agreed on by every rank
    (``speedtronic.training.launch.agree_on_start``) over a gloo group bounded by
    ``train.dist_timeout_s``; that group is returned for the resume agreement."""
    config = opening.config
    if opening.run is not None:
        return _launch.Start(config, writes_config=True, directory_ranks=(), launch=""), None
    timeout = config["train"]["dist_timeout_s"]
    group = _launch.agreement_group(rank, timeout)
    start = _launch.agree_on_start(config, rank, group=group, timeout_s=timeout, resolve=_resolve_run_dir)
    return start, group


def _read_recorded(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / _rundir.CONFIG_NAME
    if not os.path.lexists(path):
        return None
    recorded = _read_yaml(path, _rundir.read_text)
    return recorded if isinstance(recorded, dict) else None


def train_from_config(config: Mapping[str, Any] | str | os.PathLike[str]) -> tuple[FitResult, RunInfo]:
    """``build_runtime`` then ``fit_and_close``: a config to a finished run, everything closed."""
    trainer, info = build_runtime(config)
    return fit_and_close(trainer, info)


def fit_and_close(trainer: Trainer, info: RunInfo) -> tuple[FitResult, RunInfo]:
    """Fit, then close the outer loop (joining its thread), the logger and its hooks, destroy the
    process group ``build_runtime`` set up and release the run directory, in that order, also when
    training raises (a failure while closing then never hides its error). ``info.write_errors``
    counts the records lost."""
    steps = [
        step
        for step in (
            trainer.outer.close if trainer.outer is not None else None,
            info.monitor.close if info.monitor is not None else None,
            info.stacks.close if info.stacks is not None else None,
            trainer.logger.close,
            _launch.destroy_process_group if info.owns_process_group else None,
            info.run.release if info.run is not None else None,
        )
        if step is not None
    ]
    try:
        result = trainer.fit()
    except BaseException:
        _launch.shutdown(steps, quiet=True)
        raise
    _launch.shutdown(steps, quiet=False)
    return result, replace(info, write_errors=trainer.logger.write_errors)


def warmup_cosine(warmup_steps: int, total_steps: int, floor: float = 0.1) -> Callable[[int], float]:
    """LR factor per step: linear warm-up to 1, then a cosine down to ``floor`` at ``total_steps``."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


def _own_files(config: Mapping[str, Any], rank: RankInfo) -> list[str | None]:
    """The log files this process writes: its text log and its JSONL."""
    logging = config["logging"]
    json_file = logging["json_file"]
    return [logging["file"], str(rank_path(json_file, rank.rank)) if json_file is not None else None]


def _files(config: Mapping[str, Any], checkpoint_dir: Path, rank: RankInfo) -> dict[str, str]:
    logging = config["logging"]
    files = {"text log": logging["file"] or "stdout"}
    if logging["json_file"] is not None:
        files["metrics"] = str(rank_path(logging["json_file"], rank.rank))
    if config["train"]["checkpoint_every"]:
        files["checkpoints"] = str(checkpoint_dir)
    for spec in logging["hooks"]:
        if spec["type"] == "tensorboard" and "log_dir" in spec:
            files["tensorboard"] = str(spec["log_dir"])
    files["config"] = str(Path(config["run_dir"]) / "config.yaml")
    return files
