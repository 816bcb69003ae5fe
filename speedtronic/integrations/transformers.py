"""``SpeedtronicCallback``: a Hugging Face ``transformers.TrainerCallback`` that logs through a
``MetricLogger``, with the steps' timing keys. Importing this module imports transformers;
``docs/frameworks.md`` lists the records."""

from __future__ import annotations

import os
import time
from typing import Any

from speedtronic.extras import missing

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ModuleNotFoundError as error:
    needed_by = "speedtronic.integrations.transformers"
    raise missing(error, "transformers", "transformers", needed_by=needed_by) from None

from speedtronic.alerts import ON_ALERT, Alert, AlertWatch, default_rules
from speedtronic.events import Event
from speedtronic.integrations import emit_metrics
from speedtronic.integrations._metrics import FLUSH_TIMEOUT_S, is_eval
from speedtronic.profiling import MetricLogger

__all__ = ["SpeedtronicCallback"]


class SpeedtronicCallback(TrainerCallback):
    """Sends a ``transformers.Trainer``'s logs, saves and start/end to ``logger`` (see the module)."""

    def __init__(
        self, logger: MetricLogger | None = None, *, on_alert: str = "log", **logger_kwargs: Any
    ) -> None:
        if logger is not None and logger_kwargs:
            raise TypeError(
                "SpeedtronicCallback: pass either logger= (a MetricLogger you close) or MetricLogger's "
                f"arguments, not both; got logger= and {', '.join(sorted(logger_kwargs))}"
            )
        if logger is not None and not isinstance(logger, MetricLogger):
            raise TypeError(f"SpeedtronicCallback(logger=...): expected a MetricLogger, got {logger!r}")
        if on_alert not in ON_ALERT:
            raise ValueError(
                f"SpeedtronicCallback(on_alert={on_alert!r}): expected one of {', '.join(ON_ALERT)}"
            )
        if logger is None:  # built here: the default alert rules on unless alerts= says otherwise
            logger = MetricLogger(**{"alerts": default_rules(), **logger_kwargs})
        self.logger = logger
        self.on_alert = on_alert
        self._watch = AlertWatch(logger.chain.alerts)
        self.alert: Alert | None = None
        """``on_alert="stop"``: the alert that stopped training, once one did."""
        self._start_step = 0
        self._started = 0.0
        self._last_loss: float | None = None
        self._summary: dict[str, Any] = {}
        # Host clock readings (perf_counter) for the timing keys; see _StepClock.
        self._clock = _StepClock()

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._start_step, self._started = state.global_step, time.perf_counter()
        self._last_loss, self._summary = None, {}
        if not state.is_world_process_zero:
            return
        config = {
            key: value
            for key, value in args.to_dict().items()  # type: ignore[no-untyped-call]  # unannotated
            if value != f"<{key.upper()}>"  # to_dict()'s placeholder for a token: no value
        }
        self.logger.emit(Event.HYPERPARAMS, {"config": config}, level="debug")
        model = kwargs.get("model")
        start: dict[str, Any] = {
            "start_step": state.global_step,
            "target_step": state.max_steps,
            "device": str(args.device),
            "precision": "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32",
            "grad_accum": args.gradient_accumulation_steps,
        }
        if model is not None:
            start["parameters"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
        self.logger.emit(Event.TRAIN_START, start)
        self._clock.mark()

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._clock.mark()  # what follows (log, evaluate, save) is timed from here

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._clock.step_begin()

    def on_pre_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._clock.backward_done()

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._clock.step_end(state.global_step)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not state.is_world_process_zero or not logs:
            return
        if "train_runtime" in logs:  # the summary Trainer.train() logs once it is done
            self._summary = dict(logs)
            return
        if "loss" in logs:
            self._last_loss = float(logs["loss"])
        emit_metrics(self.logger, state.global_step, logs, timing=self._clock.timing(state.global_step, logs))
        self._stop_on_alert(control)
        self._clock.mark()

    def _stop_on_alert(self, control: TrainerControl) -> None:
        """``on_alert="stop"``: an alert raised by what was just logged stops training cleanly
        (``control.should_training_stop``: the Trainer saves and ends as at its last step)."""
        if self.on_alert == "stop":
            fired = self._watch.fired()
            if fired is not None:
                self.alert = fired
                control.should_training_stop = True

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        save_s = self._clock.since_mark()  # the save ran since the last callback (_StepClock)
        if state.is_world_process_zero:
            path = os.path.join(args.output_dir or "", f"checkpoint-{state.global_step}")
            self.logger.emit(Event.CHECKPOINT, {"step": state.global_step, "path": path, "save_s": save_s})
        self._clock.mark()

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if not state.is_world_process_zero:
            return
        end: dict[str, Any] = {
            "step": state.global_step,
            "steps_run": state.global_step - self._start_step,
            "duration_s": round(time.perf_counter() - self._started, 6),
            "final_loss": self._last_loss,
            "status": "completed",
        }
        end.update((key, value) for key, value in self._summary.items() if key not in end)
        self.logger.emit(Event.TRAIN_END, end)
        self.logger.flush(FLUSH_TIMEOUT_S)

    def on_evaluate(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if state.is_world_process_zero:  # the evaluation's metrics were logged just before
            self.logger.flush(FLUSH_TIMEOUT_S)
        self._clock.mark()


class _StepClock:
    """The Trainer's callback points read as host clock times (``time.perf_counter``, never a device
    sync). A step runs from the mark (the end of the last callback before its microbatches are
    drawn) to ``on_step_end``; it waits for data until ``on_step_begin`` (the Trainer draws a step's
    microbatches before it) and computes until ``on_pre_optimizer_step`` (forward, backward, gradient
    clipping). A step the cadence skips costs three clock readings."""

    __slots__ = ("_began", "_computed", "_ended", "_mark", "_started", "_step")

    def __init__(self) -> None:
        self._mark = self._began = self._started = self._ended = time.perf_counter()
        self._computed: float | None = None
        self._step: int | None = None
        """The last step done (its times: ``_began`` to ``_ended``)."""

    def mark(self) -> None:
        self._mark = time.perf_counter()

    def since_mark(self) -> float:
        return time.perf_counter() - self._mark

    def step_begin(self) -> None:
        self._began, self._started, self._computed = self._mark, time.perf_counter(), None

    def backward_done(self) -> None:
        self._computed = time.perf_counter()

    def step_end(self, step: int) -> None:
        self._ended = self._mark = time.perf_counter()
        self._step = step

    def timing(self, step: int, logs: dict[str, Any]) -> dict[str, Any]:
        """The timing keys for a logging call at ``step``: an evaluation's ``eval_s`` (the
        ``<prefix>_runtime`` Hugging Face measured around its evaluation loop), else the step's times
        when ``step`` is the last step done."""
        if is_eval(logs):
            runtime = next((value for key, value in logs.items() if key.endswith("_runtime")), None)
            return {} if runtime is None else {"eval_s": runtime}
        if self._step != step:
            return {}
        times = {"step_time_s": self._ended - self._began, "data_wait_s": self._started - self._began}
        if self._computed is not None:
            times["compute_s"] = self._computed - self._started
        return times
