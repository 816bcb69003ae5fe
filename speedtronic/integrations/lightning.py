"""``SpeedtronicLogger``: a Lightning logger that logs through a ``MetricLogger``; ``StepTimer`` adds the
steps' timing keys. Importing this module imports Lightning; ``docs/frameworks.md`` lists the records
it writes."""

from __future__ import annotations

import os
import sys
import time
from argparse import Namespace
from collections.abc import Mapping
from types import FrameType
from typing import Any

from speedtronic.extras import missing

try:
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.loggers import Logger

    # Where Lightning's guide to custom loggers imports it from (it lives in lightning.fabric).
    from lightning.pytorch.loggers.logger import rank_zero_experiment  # type: ignore[attr-defined]
    from lightning.pytorch.utilities import rank_zero_only
except ModuleNotFoundError as error:
    needed_by = "speedtronic.integrations.lightning"
    raise missing(error, "lightning.pytorch", "lightning", needed_by=needed_by, package="Lightning") from None

from speedtronic.alerts import Alert, AlertWatch, default_rules
from speedtronic.events import Event
from speedtronic.integrations._metrics import FLUSH_TIMEOUT_S, TrainSpan, emit_metrics, is_eval
from speedtronic.profiling import MetricLogger

__all__ = ["SpeedtronicLogger", "StepTimer", "StopOnAlert"]

_STATUS = {"success": "completed", "failed": "failed", "finished": "interrupted"}
"""Lightning's ``finalize`` status → ``train_end``'s."""


class SpeedtronicLogger(Logger):
    """A Lightning logger writing to a ``MetricLogger`` (see the module for what it records)."""

    def __init__(
        self,
        logger: MetricLogger | None = None,
        *,
        save_dir: str | os.PathLike[str] = ".",
        name: str = "speedtronic",
        version: int | str | None = None,
        **logger_kwargs: Any,
    ) -> None:
        super().__init__()
        if logger is not None and logger_kwargs:
            raise TypeError(
                "SpeedtronicLogger: pass either logger= (a MetricLogger you close) or MetricLogger's "
                f"arguments, not both; got logger= and {', '.join(sorted(logger_kwargs))}"
            )
        if logger is not None and not isinstance(logger, MetricLogger):
            raise TypeError(f"SpeedtronicLogger(logger=...): expected a MetricLogger, got {logger!r}")
        self._logger = logger
        self._owns_logger = logger is None
        self._logger_kwargs = logger_kwargs
        self._save_dir, self._name, self._version = os.fspath(save_dir), name, version
        self._span = TrainSpan()
        self._hyperparams: dict[str, Any] | None = None  # the last ones recorded
        self._timer: StepTimer | None = None  # a StepTimer(self) attaches itself here
        self.stopped_by: Alert | None = None
        """The alert that stopped ``fit()`` (``StopOnAlert`` sets it): ``train_end`` then says
        ``stopped``, with the alert's message as ``reason``, where Lightning says ``success``."""

    @property
    def save_dir(self) -> str:
        """The directory that holds ``<name>/version_<N>``."""
        return self._save_dir

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> int | str:
        """The run's version: as given, else the next free ``version_<N>`` number (fixed on first use).
        A number is an int whose float format is the number: the progress bar's ``v_num`` reads
        ``0``, not ``0.000``."""
        if self._version is None:
            self._version = _next_version(os.path.join(self._save_dir, self._name))
        if isinstance(self._version, int) and not isinstance(self._version, _RunVersion | bool):
            self._version = _RunVersion(self._version)
        return self._version

    @property
    def log_dir(self) -> str:
        """``<save_dir>/<name>/version_<N>`` (or ``<save_dir>/<name>/<version>`` for a string)."""
        version = self.version
        folder = version if isinstance(version, str) else f"version_{version}"
        return os.path.join(self._save_dir, self._name, folder)

    @property
    @rank_zero_experiment
    def experiment(self) -> MetricLogger:
        """The ``MetricLogger`` (built here from the arguments on first use when none was passed)."""
        if self._logger is None or (self._owns_logger and self._logger.closed):
            kwargs = dict(self._logger_kwargs)
            if "json_file" not in kwargs:
                os.makedirs(self.log_dir, exist_ok=True)
                kwargs["json_file"] = os.path.join(self.log_dir, "metrics.jsonl")
            kwargs.setdefault("alerts", default_rules())
            self._logger = MetricLogger(**kwargs)
        return self._logger

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        step = 0 if step is None else step
        evaluation = is_eval(metrics)
        if _from_trainer() and (self._span.open or not evaluation):  # fit(): one step behind
            step += 1
        timing = None if self._timer is None else self._timer.timing(step, evaluation)
        emit_metrics(self.experiment, step, metrics, self._span, timing=timing)
        if timing and self._timer is not None:  # the step's (or evaluation's) logging is done
            self._timer.mark()

    @rank_zero_only
    def log_hyperparams(self, params: Mapping[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        config = vars(params) if isinstance(params, Namespace) else dict(params)
        if not _same(config, self._hyperparams):
            self._hyperparams = config
            self.experiment.emit(Event.HYPERPARAMS, {"config": config}, level="debug")

    @rank_zero_only
    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        # ModelCheckpoint sets these two just before calling this; it has no public name for the file
        # it just wrote (last_model_path is only the save_last copy), so read them defensively.
        path = getattr(checkpoint_callback, "_last_checkpoint_saved", "")
        step = getattr(checkpoint_callback, "_last_global_step_saved", None)
        if path and type(step) is int:
            payload: dict[str, Any] = {"step": step, "path": str(path)}
            if self._timer is not None:
                payload.update(self._timer.save_timing())
            self.experiment.emit(Event.CHECKPOINT, payload)
            if self._timer is not None:
                self._timer.mark()

    @rank_zero_only
    def finalize(self, status: str) -> None:
        if self._logger is None or self._logger.closed:
            return
        if status == "success" and self.stopped_by is not None:
            self._span.end(self._logger, "stopped", reason=self.stopped_by.message)
        else:
            self._span.end(self._logger, _STATUS.get(status, status))
        self._logger.flush(FLUSH_TIMEOUT_S)


class _RunVersion(int):
    """A run's version number that a float format writes as the whole number it is.

    Lightning's Rich progress bar writes every non-string value of its postfix with ``.3f``, so a
    logger's ``version`` of 0 read ``v_num: 0.000``; this int reads ``v_num: 0`` there, and is the
    plain int everywhere else (``version_0``, comparisons, JSON)."""

    __slots__ = ()

    def __format__(self, spec: str) -> str:
        if spec and spec[-1] in "eEfFgG%":
            return int.__repr__(self)
        return super().__format__(spec)


_PASSING_THROUGH = ("speedtronic.", "lightning_utilities.", "lightning.fabric.utilities.rank_zero")
"""Modules between ``log_metrics`` and whoever called it: this package, ``rank_zero_only``'s wrapper."""


def _from_trainer() -> bool:
    """Whether ``log_metrics`` was called by Lightning's ``Trainer`` (its logger connector, its
    callbacks such as ``LearningRateMonitor``), whose step is one behind during a ``fit()``, rather
    than by Fabric's ``log_dict`` or the user, whose step is the one to record. Read from the caller's
    module: Lightning gives a logger no other sign of who calls it."""
    frame: FrameType | None = sys._getframe(2)  # what called log_metrics (or rank_zero_only's wrapper)
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith(_PASSING_THROUGH):
        frame = frame.f_back
    return frame is not None and str(frame.f_globals.get("__name__", "")).startswith("lightning.pytorch.")


class StepTimer(Callback):
    """A Lightning callback that times each optimizer step, evaluation and checkpoint on the host clock
    (``time.perf_counter``, never a device sync) for ``logger``, a ``SpeedtronicLogger``: its
    ``train_step`` records gain ``step_time_s``, ``data_wait_s`` and ``compute_s``, its ``eval``
    records ``eval_s``, its ``checkpoint`` records ``save_s``. A Lightning logger sees no batch, so
    the timing needs this callback in the same Trainer: ``pl.Trainer(logger=speedtronic_logger,
    callbacks=[StepTimer(speedtronic_logger)])``.

    - A step runs from the mark (the end of the previous step's logging, checkpoint and validation)
      to ``on_train_batch_end`` of the batch that stepped the optimizer (``accumulate_grad_batches``
      batches: their times add up).
    - ``data_wait_s``: the mark to ``on_train_batch_start`` (Lightning draws a batch, and one ahead,
      before it).
    - ``compute_s``: ``on_train_batch_start`` to the last ``on_after_backward`` (forward and
      backward; the optimizer step, gradient clipping and ``zero_grad`` are the rest of the step).
    - ``eval_s``: ``on_validation_start`` (``on_test_start``) to the logging of its metrics.
    - ``save_s``: ``on_save_checkpoint`` to the logger's ``after_save_checkpoint``: the file write
      (the state dicts are gathered just before ``on_save_checkpoint``).

    A step the logger's cadence skips costs four clock readings."""

    def __init__(self, logger: SpeedtronicLogger) -> None:
        if not isinstance(logger, SpeedtronicLogger):
            raise TypeError(f"StepTimer(logger=...): expected a SpeedtronicLogger, got {logger!r}")
        logger._timer = self
        self._mark = time.perf_counter()
        self._stepped = 0  # trainer.global_step at the last step's end
        self._began: float | None = None  # the mark the step under way started from
        self._batch_began = self._mark
        self._backward_done: float | None = None
        self._data_wait = 0.0
        self._compute: float | None = None
        self._last: tuple[int, float, float, float | None] | None = None
        """The last step done: ``(step, step_time_s, data_wait_s, compute_s)``."""
        self._eval_began: float | None = None
        self._save_began: float | None = None

    def mark(self) -> None:
        """The work after a step (logging, checkpoint, validation) is done: what follows is the next
        step's."""
        self._mark = time.perf_counter()

    def timing(self, step: int, evaluation: bool) -> dict[str, float]:
        """The keys for a record at ``step``: ``eval_s`` while an evaluation runs, the step's times when
        ``step`` is the last step done (nothing else: a ``LearningRateMonitor`` record, Fabric's)."""
        if evaluation:
            began = self._eval_began
            return {} if began is None else {"eval_s": time.perf_counter() - began}
        if self._last is None or self._last[0] != step:
            return {}
        _, step_time, data_wait, compute = self._last
        times = {"step_time_s": step_time, "data_wait_s": data_wait}
        if compute is not None:
            times["compute_s"] = compute
        return times

    def save_timing(self) -> dict[str, float]:
        began, self._save_began = self._save_began, None
        return {} if began is None else {"save_s": time.perf_counter() - began}

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._stepped, self._began, self._last = trainer.global_step, None, None
        self.mark()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        now = time.perf_counter()
        if self._began is None:  # the step's first batch
            self._began, self._data_wait, self._compute = self._mark, 0.0, None
        self._data_wait += now - self._mark
        self._batch_began, self._backward_done = now, None

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        self._backward_done = time.perf_counter()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        ended = self._mark = time.perf_counter()
        if self._backward_done is not None:
            self._compute = (self._compute or 0.0) + self._backward_done - self._batch_began
        step = trainer.global_step
        if step > self._stepped and self._began is not None:  # the optimizer stepped: the step is done
            self._last = (step, ended - self._began, self._data_wait, self._compute)
            self._stepped, self._began = step, None

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._eval_began = time.perf_counter()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._eval_began = None
        self.mark()

    def on_test_start(self, trainer: Any, pl_module: Any) -> None:
        self._eval_began = time.perf_counter()

    def on_test_end(self, trainer: Any, pl_module: Any) -> None:
        self._eval_began = None
        self.mark()

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self._save_began = time.perf_counter()


class StopOnAlert(Callback):
    """A Lightning callback: ``trainer.should_stop = True`` once ``logger``'s alert rules fire (checked
    after each training batch and each validation), so ``fit()`` stops cleanly at the end of that
    step, its checkpoint callbacks and ``finalize`` included. ``logger``: the ``SpeedtronicLogger``
    (or a ``MetricLogger``) the trainer logs to."""

    def __init__(self, logger: SpeedtronicLogger | MetricLogger) -> None:
        if not isinstance(logger, SpeedtronicLogger | MetricLogger):
            raise TypeError(
                f"StopOnAlert(logger=...): expected a SpeedtronicLogger or MetricLogger, got {logger!r}"
            )
        self._logger = logger
        self._watch: AlertWatch | None = None
        self.alert: Alert | None = None
        """The alert that stopped training, once one did."""

    def _check(self, trainer: Any) -> None:
        if self._watch is None:
            metric_logger = (
                self._logger.experiment if isinstance(self._logger, SpeedtronicLogger) else self._logger
            )
            self._watch = AlertWatch(metric_logger.chain.alerts)
        fired = self._watch.fired()
        if fired is not None:
            self.alert = fired
            trainer.should_stop = True
            for logger in trainer.loggers:  # their train_end says stopped, and why
                if isinstance(logger, SpeedtronicLogger):
                    logger.stopped_by = fired

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._check(trainer)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._check(trainer)


def _next_version(root: str) -> int:
    """One past the highest ``version_<N>`` directory in ``root`` (0 when there is none), as
    Lightning's ``CSVLogger`` and ``TensorBoardLogger`` number their runs."""
    try:
        names = os.listdir(root)
    except OSError:
        return 0
    taken = [
        int(n[8:])
        for n in names
        if n.startswith("version_") and n[8:].isdigit() and os.path.isdir(os.path.join(root, n))
    ]
    return max(taken, default=-1) + 1


def _same(config: dict[str, Any], last: dict[str, Any] | None) -> bool:
    """Whether ``config`` equals the last recorded one (values whose ``==`` raises, such as tensors,
    count as changed)."""
    try:
        return bool(config == last)
    except Exception:
        return False
