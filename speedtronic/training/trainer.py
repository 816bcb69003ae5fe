"""``Trainer``: a compact, real PyTorch training loop that produces the catalog's training events."""

from __future__ import annotations

import contextlib
import math
import os
import random
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from speedtronic.alerts import Alert, AlertWatch
from speedtronic.extras import missing

try:
    import torch
    import torch.distributed as dist
    from torch import Tensor, nn
    from torch.nn.parallel import DistributedDataParallel
except ModuleNotFoundError as error:  # pragma: no cover - exercised by a subprocess test
    raise missing(error, "torch", "torch", needed_by="speedtronic.training.trainer") from None

from speedtronic.accelerators import FLOPS_PER_PARAMETER, peak_flops
from speedtronic.errors import SpeedtronicWarning, capped
from speedtronic.events import (
    CompilePayload,
    EvalPayload,
    Event,
    TrainEndPayload,
    TrainStartPayload,
    TrainStepPayload,
)
from speedtronic.profiling import MetricLogger
from speedtronic.training import rundir as _rundir
from speedtronic.training import shapes as _shapes
from speedtronic.training.config import ConfigError


class OuterAttachment(Protocol):
    """What the trainer needs of an outer loop attached to it (``speedtronic.training.outer.OuterLoop``
    satisfies it): the outer loop depends on the trainer, never the other way round."""

    every: int

    def close(self) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


__all__ = [
    "PRECISIONS",
    "CheckpointWriteError",
    "FitResult",
    "Trainer",
    "latest_checkpoint",
    "resolve_device",
    "token_cross_entropy",
]

PRECISIONS = ("fp32", "bf16")
_MAX_SHAPE_WARNINGS = 16
_CHECKPOINT_NAME = re.compile(r"step_(\d+)\.pt")
CHECKPOINT_SKIPPED = Event.CHECKPOINT_SKIPPED
"""The event naming a checkpoint that resuming could not read (``path``, ``error``)."""
_OOO_BACKPROP_OFF = "not implemented by the reference trainer: backward runs in autograd's order"

Batch = tuple[Tensor, Tensor]
LossFn = Callable[[Tensor, Tensor], Tensor]


def token_cross_entropy(outputs: Tensor, targets: Tensor) -> Tensor:
    """Cross-entropy over the last dimension, for classification ``(B, C)`` and sequences ``(B, T, C)``."""
    return nn.functional.cross_entropy(outputs.flatten(0, -2), targets.flatten())


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"``: the current CUDA device if there is one, else the CPU; a bare ``"cuda"`` gets its index."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    resolved = torch.device(device)
    if resolved.type == "cuda" and resolved.index is None:
        resolved = torch.device("cuda", torch.cuda.current_device())
    return resolved


def latest_checkpoint(directory: str | os.PathLike[str]) -> Path | None:
    """The ``step_<N>.pt`` with the highest N in ``directory``, or ``None``."""
    found = [
        (int(match.group(1)), path)
        for path in Path(directory).glob("step_*.pt")
        if (match := _CHECKPOINT_NAME.fullmatch(path.name))
    ]
    return max(found)[1] if found else None


@dataclass(frozen=True)
class FitResult:
    """What ``Trainer.fit()`` did."""

    step: int
    """The absolute step reached."""
    start_step: int
    steps_run: int
    duration_s: float
    final_loss: float | None
    """The last step's loss; ``None`` when no step ran."""
    samples_per_s: float
    tokens_per_s: float
    checkpoint: Path | None
    """The latest checkpoint written (or resumed from)."""
    resumed_from: Path | None = None
    """The checkpoint ``fit()`` resumed from; ``None`` when it started from scratch."""
    eval_loss: float | None = None
    """The last ``eval``'s loss in this ``fit()``; ``None`` when it evaluated nothing."""
    stopped: str | None = None
    """Why ``fit()`` stopped before its target (``stop_on_alert``: the alert's message); ``None`` when
    it reached it."""


class _Step(NamedTuple):
    loss: Tensor
    """Mean over the step's microbatches, detached, on the device."""
    grad_norm: Tensor
    lr: float
    """The learning rate the step used."""
    samples: int
    tokens: int
    data_wait_s: float
    """Host time waiting for the microbatches (drawing them, moving them to the device)."""
    compute_s: float
    """Host time in the microbatches' forward and backward passes, less ``sync_wait_s``."""
    sync_wait_s: float | None
    """Host time the last backward waited for DDP's gradient all-reduce (``None``: no DDP sync)."""


class _SyncClock:
    """Times DDP's gradient sync on the host. Registered as the DDP model's communication hook, it
    runs PyTorch's own ``allreduce_hook`` (the same averaged gradients as with no hook) and reads
    ``time.perf_counter()`` as each bucket is handed over: the last reading is when this rank's
    backward is done but for the all-reduce, and from then until ``backward()`` returns it waits
    for the slowest rank (and the transfer). No extra collective, no device sync."""

    __slots__ = ("allreduce", "ready")

    def __init__(self, model: DistributedDataParallel) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        self.allreduce = allreduce_hook
        self.ready: float | None = None
        """When the last bucket was handed to the all-reduce (``None``: none since the reset)."""
        # A lambda: DDP checks a hook's annotations against its classes, and this module's are strings.
        model.register_comm_hook(model.process_group, lambda group, bucket: self.hand_over(group, bucket))

    def hand_over(self, group: Any, bucket: Any) -> torch.futures.Future[Tensor]:
        """DDP's ``GradBucket`` ``bucket`` is ready: note the time, start its all-reduce."""
        self.ready = time.perf_counter()
        return self.allreduce(group, bucket)


class _Window:
    """Samples and tokens since the last logged step, and since when: the rates a logged step reports.

    Measured between logged steps, so on a GPU the sync that logging a loss causes bounds the window.
    """

    __slots__ = ("samples", "start", "tokens")

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self.start, self.samples, self.tokens = time.perf_counter(), 0, 0

    def rates(self) -> tuple[float, float]:
        seconds = max(time.perf_counter() - self.start, 1e-9)
        return self.samples / seconds, self.tokens / seconds


class Trainer:
    """Trains ``model`` on ``data`` up to absolute step ``steps``; ``fit()`` runs it.

    Args:
        model: the module to train (moved to ``device``). A ``DistributedDataParallel`` model gets a
            communication hook that times its gradient sync (``sync_wait_s``), unless it has one.
        optimizer: over ``model``'s parameters.
        data: an iterable of ``(inputs, targets)`` batches, re-iterated when it runs out (a list, a
            ``DataLoader``), or an endless iterator. Each optimizer step takes ``grad_accum`` of them.
        steps: the absolute step to train up to (a resumed run continues towards the same target).
        loss_fn: ``(outputs, targets) -> loss``; cross-entropy over the last dimension by default.
        scheduler: an LR scheduler stepped after every optimizer step.
        logger: receives the events (default: a ``MetricLogger`` writing text lines to stdout).
        device: ``"auto"`` (CUDA when present, else CPU), or anything ``torch.device`` accepts.
        precision: ``"fp32"``, or ``"bf16"`` autocast (refused where the device can't run it).
        grad_accum: microbatches per optimizer step; each one's loss is scaled by ``1/grad_accum``.
        max_grad_norm: clip the total gradient norm to this (``None``: measure it, never clip).
        compile: ``True`` for ``torch.compile``'s default backend, or a backend's name; if compiling
            fails, training goes on eagerly and the ``compile`` event says why.
        checkpoint_dir: where ``step_<N>.pt`` files go (everything the next step depends on).
        checkpoint_every: save every this many steps, and at the end (0: never).
        eval_data: held-out ``(inputs, targets)`` batches (a finite iterable: a list, a ``DataLoader``);
            each evaluation runs the model over all of them without gradients.
        eval_every: evaluate every this many steps, and at the end (0: never); emits ``eval`` with
            the mean loss (``perplexity`` too with the default token cross-entropy).
        keep_checkpoints: keep the newest this many checkpoints, deleting older ones (0: keep all).
        resume: start from the newest readable checkpoint in ``checkpoint_dir``, when there is one.
        resume_group: the process group the ranks agree on the step to resume from over (the runtime
            passes a gloo group with ``train.dist_timeout_s``); ``None``: the default group.
        peak_flops: the device's peak FLOP/s at ``precision``, recorded in ``train_start`` for MFU;
            ``None``: ``speedtronic.accelerators.peak_flops`` of a known CUDA device, else none recorded.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        data: Iterable[Batch],
        *,
        steps: int,
        loss_fn: LossFn = token_cross_entropy,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
        logger: MetricLogger | None = None,
        device: str | torch.device = "auto",
        precision: str = "fp32",
        grad_accum: int = 1,
        max_grad_norm: float | None = 1.0,
        compile: bool | str = False,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        checkpoint_every: int = 0,
        keep_checkpoints: int = 0,
        resume: bool = False,
        eval_data: Iterable[Batch] | None = None,
        eval_every: int = 0,
        resume_group: Any = None,
        stop_on_alert: bool = False,
        peak_flops: float | None = None,
    ) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        if grad_accum < 1 or steps < 0 or checkpoint_every < 0 or keep_checkpoints < 0:
            raise ValueError(
                "need grad_accum >= 1, steps >= 0, checkpoint_every >= 0, keep_checkpoints >= 0; got "
                f"{grad_accum}, {steps}, {checkpoint_every}, {keep_checkpoints}"
            )
        if checkpoint_every and checkpoint_dir is None:
            raise ValueError("checkpoint_every needs a checkpoint_dir")
        if eval_every < 0:
            raise ValueError(f"eval_every must be >= 0, got {eval_every}")
        if eval_every and eval_data is None:
            raise ValueError("eval_every needs eval_data")
        self.device = resolve_device(device)
        _check_precision(self.device, precision)
        self.model = model.to(self.device)
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.data = data
        self.loss_fn = loss_fn
        self.target_step = steps
        self.precision = precision
        self.grad_accum = grad_accum
        self.max_grad_norm = math.inf if max_grad_norm is None else max_grad_norm
        self.compile = compile
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.checkpoint_every = checkpoint_every
        self.keep_checkpoints = keep_checkpoints
        self.resume = resume
        self.eval_data = eval_data
        self.eval_every = eval_every
        self.resume_group = resume_group
        self.peak_flops = peak_flops if peak_flops is not None else _device_peak(self.device, precision)
        self.logger = logger if logger is not None else MetricLogger(device=self.device)
        self.stop_on_alert = stop_on_alert
        self._alerts = AlertWatch(self.logger.chain.alerts)  # the logger's rules (alerts=...), if any
        self._alert: Alert | None = None
        self.after_optimizer_step: list[Callable[[Trainer], None]] = []
        """Called with the trainer after each optimizer step, before its ``train_step`` event."""
        self.at_fit_start: list[Callable[[Trainer], None]] = []
        """Called when ``fit()`` starts, after resuming (if asked) and before ``train_start``."""
        self.after_train_start: list[Callable[[Trainer], None]] = []
        """Called once ``train_start`` is written: a sampler started here logs nothing before it."""
        self.before_fit_end: list[Callable[[Trainer], None]] = []
        """Called once the last step is done, before the final checkpoint and ``train_end``."""
        self.outer: OuterAttachment | None = None
        """The outer loop attached to this trainer, if any (``speedtronic.training.outer.OuterLoop``)."""
        self.module: nn.Module = (
            self.model.module if isinstance(self.model, DistributedDataParallel) else self.model
        )
        """The model itself, unwrapped from DDP: what checkpoints hold."""
        self._sync = self._sync_clock()
        grouped = dist.is_available() and dist.is_initialized()
        self.rank, self.world_size = (dist.get_rank(), dist.get_world_size()) if grouped else (0, 1)

        self.step = 0
        self.samples = 0
        self.tokens = 0
        self.checkpoint: Path | None = None
        self.resumed_from: Path | None = None
        self.start_notes: dict[str, Any] = {}
        """Extra keys for ``train_start`` (the runtime adds the LR schedule's horizon, config changes)."""
        self.hyperparams: dict[str, Any] | None = None
        """The run's settings (the runtime's config): emitted as ``hyperparams`` right after
        ``train_start``, at DEBUG, so trackers (W&B's run config) and the JSONL get it and the
        text log's INFO lines stay short."""
        self._drawn = 0
        """Batches drawn from ``data`` so far (a resumed run skips as many of a data without state)."""
        self._skip = 0
        self._fit_start: tuple[int, Tensor | None] = (0, None)
        """The step ``fit()`` started from, and the last step's loss: what a stopped run reports."""
        self._ended = False
        self._eval_loss: float | None = None
        self._forward: Callable[[Tensor], Tensor] = self.model
        self._compile_pending = bool(compile)
        if precision == "bf16":
            self._autocast: Callable[[], contextlib.AbstractContextManager[Any]] = lambda: torch.autocast(
                self.device.type, dtype=torch.bfloat16
            )
        else:
            self._autocast = contextlib.nullcontext

    # -- the loop ------------------------------------------------------------------------------

    def fit(self) -> FitResult:
        """Train from the current (or resumed) step up to ``steps``; emits the events as it goes.

        Every ``fit()`` ends with ``train_end``: ``status: completed`` when it reached its target, or,
        when it raises, ``interrupted`` (``KeyboardInterrupt``, ``SystemExit``) or ``failed`` (any other
        error, a dead peer's collective included) with the ``error`` on one line; then it re-raises.
        """
        started = time.perf_counter()
        self._fit_start, self._ended, self._eval_loss = (self.step, None), False, None
        try:
            return self._fit(started)
        except BaseException as error:
            if not self._ended:
                self._end_stopped(error, started)
            raise

    def _end_stopped(self, error: BaseException, started: float) -> None:
        """``train_end`` for a ``fit()`` that raised ``error``; never hides it."""
        interrupted = isinstance(error, (KeyboardInterrupt, SystemExit))
        start_step, loss = self._fit_start
        final_loss = None
        with contextlib.suppress(Exception):  # a failed device may not give its last loss back
            final_loss = float(loss.item()) if loss is not None else None
        payload: TrainEndPayload = {
            "step": self.step,
            "steps_run": self.step - start_step,
            "duration_s": round(time.perf_counter() - started, 6),
            "final_loss": final_loss,
            "status": "interrupted" if interrupted else "failed",
            "error": _one_line(error),
        }
        self._ended = True
        with contextlib.suppress(Exception):  # the error on its way is the one to report
            self.emit(
                Event.TRAIN_END,
                {**payload, **_memory_peaks(self.device)},
                level="warning" if interrupted else "error",
            )
            self.logger.flush()

    def _fit(self, started: float) -> FitResult:
        if self.resume:
            self._resume()
        for callback in self.at_fit_start:
            callback(self)
        start_step, start_samples, start_tokens = self.step, self.samples, self.tokens
        self._fit_start = (start_step, None)
        start: TrainStartPayload = {
            "start_step": start_step,
            "target_step": self.target_step,
            "device": str(self.device),
            "precision": self.precision,
            "grad_accum": self.grad_accum,
            "parameters": sum(p.numel() for p in self.model.parameters() if p.requires_grad),
        }
        if self.outer is not None:
            start["outer_every"] = self.outer.every
        start["flops_per_token"] = FLOPS_PER_PARAMETER * start["parameters"]
        if self.peak_flops is not None:
            start["peak_flops"] = self.peak_flops
        self.emit(Event.TRAIN_START, {**start, **self.start_notes})
        for callback in self.after_train_start:
            callback(self)
        if self.hyperparams is not None:
            self.emit(Event.HYPERPARAMS, {"config": self.hyperparams}, level="debug")
        self._profile_shapes()
        # A feature that is off is a DEBUG line in the text log; the JSONL and hooks still get it.
        self.emit(Event.OOO_BACKPROP, {"enabled": False, "reason": _OOO_BACKPROP_OFF}, level="debug")
        batches = self._batches()
        window = _Window()
        loss: Tensor | None = None
        self.model.train()
        clock = time.perf_counter
        while self.step < self.target_step:
            began = clock()
            done = self._optimizer_step(batches)
            loss = done.loss
            self._fit_start = (start_step, loss)
            self.step += 1
            self.samples += done.samples
            self.tokens += done.tokens
            window.samples += done.samples
            window.tokens += done.tokens
            synced = clock()
            for callback in self.after_optimizer_step:
                callback(self)
            ended = clock()
            samples_per_s, tokens_per_s = window.rates()
            payload: TrainStepPayload = {
                "step": self.step,
                "loss": done.loss,
                "lr": done.lr,
                "samples_per_s": round(samples_per_s, 3),
                "tokens_per_s": round(tokens_per_s, 3),
                "samples": self.samples,
                "tokens": self.tokens,
                "microbatches": self.grad_accum,
                "grad_norm": done.grad_norm,
                "step_time_s": ended - began,
                "data_wait_s": done.data_wait_s,
                "compute_s": done.compute_s,
            }
            if done.sync_wait_s is not None:  # DDP's gradient all-reduce, in the last backward
                payload["sync_wait_s"] = done.sync_wait_s
            if self.outer is not None:  # its boundary waits for the replicas in the after-step callbacks
                payload["sync_wait_s"] = payload.get("sync_wait_s", 0.0) + ended - synced
            if self.emit(Event.TRAIN_STEP, payload):  # logged: the next rates start from here
                window.restart()
            if self.eval_every and self.step % self.eval_every == 0:
                self.evaluate()
            if self.stop_on_alert and self._alerted():
                return self._stop(started, start_step, start_samples, start_tokens, loss)
            if self.checkpoint_every and self.step % self.checkpoint_every == 0:
                self.save_checkpoint()
        for callback in self.before_fit_end:
            callback(self)
        if self.eval_every and self.step > start_step and self.step % self.eval_every:
            self.evaluate()
        if self.checkpoint_every and self.step > start_step and self.step % self.checkpoint_every:
            self.save_checkpoint()

        final_loss = float(loss.item()) if loss is not None else None
        return self._end(started, start_step, start_samples, start_tokens, final_loss)

    def _alerted(self) -> bool:
        """Whether the logger's rules raised an alert since the last look, on any rank (every rank
        stops at the same step, or none does)."""
        fired = self._alerts.fired()
        self._alert = fired or self._alert
        return not self._all_ranks(fired is None)

    def _stop(
        self, started: float, start_step: int, start_samples: int, start_tokens: int, loss: Tensor | None
    ) -> FitResult:
        """The clean stop an alert asked for (``stop_on_alert``): a checkpoint of this step (when the
        trainer has a ``checkpoint_dir``), then ``train_end`` with ``status: stopped`` and the alert's
        message as ``reason``."""
        reason = self._alert.message if self._alert is not None else "an alert on another rank"
        if self.checkpoint_dir is not None:
            self.save_checkpoint()
        final_loss = None
        with contextlib.suppress(Exception):  # a NaN is a value; a failed device gives nothing back
            final_loss = float(loss.item()) if loss is not None else None
        return self._end(started, start_step, start_samples, start_tokens, final_loss, stopped=reason)

    def _end(
        self,
        started: float,
        start_step: int,
        start_samples: int,
        start_tokens: int,
        final_loss: float | None,
        stopped: str | None = None,
    ) -> FitResult:
        """``fit()``'s result and its ``train_end``: ``completed``, or ``stopped`` with the alert's
        message as ``reason`` (at WARNING)."""
        duration = time.perf_counter() - started
        result = FitResult(
            step=self.step,
            start_step=start_step,
            steps_run=self.step - start_step,
            duration_s=round(duration, 6),
            final_loss=final_loss,
            samples_per_s=round((self.samples - start_samples) / duration, 3),
            tokens_per_s=round((self.tokens - start_tokens) / duration, 3),
            checkpoint=self.checkpoint,
            resumed_from=self.resumed_from,
            eval_loss=self._eval_loss,
            stopped=stopped,
        )
        end: dict[str, Any] = {  # TrainEndPayload
            "step": result.step,
            "steps_run": result.steps_run,
            "duration_s": result.duration_s,
            "final_loss": final_loss,
            "samples_per_s": result.samples_per_s,
            "tokens_per_s": result.tokens_per_s,
            "status": "completed" if stopped is None else "stopped",
            **_memory_peaks(self.device),
        }
        if stopped is not None:
            end["reason"] = stopped
        self.emit(Event.TRAIN_END, end, level=None if stopped is None else "warning")
        self._ended = True
        self.logger.flush()  # hooks run on the logger's thread: when fit() returns, they have it all
        return result

    def _optimizer_step(self, batches: Iterator[Batch]) -> _Step:
        """One optimizer step over ``grad_accum`` microbatches, then the schedule's step."""
        self.optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device=self.device)
        samples = tokens = 0
        clock = time.perf_counter
        data_wait = compute = done = 0.0
        if self._sync is not None:
            self._sync.ready = None
        for index in range(self.grad_accum):
            asked = clock()
            inputs, targets = (t.to(self.device, non_blocking=True) for t in next(batches))
            self._drawn += 1
            drawn = clock()
            with self._accumulating(last=index == self.grad_accum - 1):
                total += self._microbatch(inputs, targets)
            done = clock()
            data_wait += drawn - asked
            compute += done - drawn
            samples += inputs.shape[0]
            tokens += targets.numel()
        sync_wait = None
        if self._sync is not None and self._sync.ready is not None:  # the last backward's all-reduce
            sync_wait = done - self._sync.ready
            compute -= sync_wait
        grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        return _Step(
            total / self.grad_accum, grad_norm.detach(), lr, samples, tokens, data_wait, compute, sync_wait
        )

    def _sync_clock(self) -> _SyncClock | None:
        """The clock of DDP's gradient sync (``sync_wait_s``), registered on a DDP model; ``None`` for
        a model that is not DDP, or has a communication hook of its own (a warning says so)."""
        if not isinstance(self.model, DistributedDataParallel):
            return None
        try:
            return _SyncClock(self.model)
        except RuntimeError as error:  # DDP takes one hook, registered before the first backward
            warnings.warn(
                f"no sync_wait_s: the trainer can't time DDP's gradient sync ({_first_line(error)})",
                SpeedtronicWarning,
                stacklevel=3,
            )
            return None

    def _microbatch(self, inputs: Tensor, targets: Tensor) -> Tensor:
        if self._compile_pending:
            return self._first_compiled_microbatch(inputs, targets)
        with self._autocast():
            loss = self.loss_fn(self._forward(inputs), targets)
        torch.autograd.backward(loss / self.grad_accum)
        return loss.detach().float()

    def _accumulating(self, last: bool) -> contextlib.AbstractContextManager[Any]:
        """Context for one microbatch's backward: DDP's ``no_sync()`` for all but the last, so the
        gradients are all-reduced once per optimizer step."""
        if last or not isinstance(self.model, DistributedDataParallel):
            return contextlib.nullcontext()
        return self.model.no_sync()

    # -- evaluation ----------------------------------------------------------------------------

    def evaluate(self) -> EvalPayload:
        """The mean loss over ``eval_data`` (weighted by each batch's targets), without gradients;
        emits it as ``eval`` at the current step and returns the payload."""
        if self.eval_data is None:
            raise ValueError("evaluate() needs eval_data")
        started = time.perf_counter()
        total = torch.zeros((), device=self.device, dtype=torch.float64)
        count = 0
        self.module.eval()
        try:
            with torch.no_grad():
                for inputs, targets in self.eval_data:
                    inputs, targets = inputs.to(self.device), targets.to(self.device)
                    with self._autocast():
                        loss = self.loss_fn(self.module(inputs), targets)
                    total += loss.double() * targets.numel()
                    count += targets.numel()
        finally:
            self.model.train()
        if not count:
            raise ValueError(f"eval_data yielded no batch at step {self.step}")
        mean = float(total.item()) / count
        self._eval_loss = mean
        payload: EvalPayload = {"step": self.step, "loss": mean, "eval_s": time.perf_counter() - started}
        if self.loss_fn is token_cross_entropy:
            payload["perplexity"] = math.exp(mean) if mean < 700 else math.inf
        self.emit(Event.EVAL, payload)
        return payload

    # -- compile -------------------------------------------------------------------------------

    def _first_compiled_microbatch(self, inputs: Tensor, targets: Tensor) -> Tensor:
        """Compile, and run the first microbatch compiled; on any failure, fall back to eager."""
        self._compile_pending = False
        backend = self.compile if isinstance(self.compile, str) else "inductor"
        payload: CompilePayload = {"enabled": True, "backend": backend}
        started = time.perf_counter()
        try:
            self._forward = torch.compile(self.model, backend=backend)
            loss = self._microbatch(inputs, targets)
        except Exception as error:  # compiling can fail in many ways; training goes on eagerly
            self._forward = self.model
            self.optimizer.zero_grad(set_to_none=True)
            payload["enabled"] = False
            payload["reason"] = f"{type(error).__name__}: {_first_line(error)}"
            loss = self._microbatch(inputs, targets)
        else:
            payload["compile_s"] = round(time.perf_counter() - started, 6)
        self.emit(Event.COMPILE, payload)
        return loss

    # -- checkpoints ---------------------------------------------------------------------------

    def save_checkpoint(self) -> Path:
        """Write ``step_<N>.pt`` (atomically: a partial file never looks like a checkpoint), then delete
        all but the newest ``keep_checkpoints``. A file that can't be written (a full disk, a file-size
        limit) raises ``CheckpointWriteError`` naming it and why; the partial file is removed and the
        checkpoints before it are kept.

        In a multi-process job each rank writes its own state (rank r > 0 to ``step_<N>.rank<r>.pt``);
        rank 0 emits ``checkpoint``. Returns rank 0's path.
        """
        if self.checkpoint_dir is None:
            raise ValueError("save_checkpoint() needs a checkpoint_dir")
        started = time.perf_counter()
        path = self.checkpoint_dir / _checkpoint_name(self.step, 0)
        state = self.state_dict()  # first: it waits for the outer loop's exchange in flight
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        mine = self.checkpoint_dir / _checkpoint_name(self.step, self.rank)
        _write_checkpoint(state, mine)
        self.checkpoint = path
        if self.keep_checkpoints:
            for old in sorted(self._own_checkpoints().items(), reverse=True)[self.keep_checkpoints :]:
                old[1].unlink(missing_ok=True)
        if self.rank == 0:
            self.emit(
                Event.CHECKPOINT,
                {"step": self.step, "path": str(path), "save_s": round(time.perf_counter() - started, 6)},
            )
        return path

    def state_dict(self) -> dict[str, Any]:
        """Everything the next step depends on, as a checkpoint holds it."""
        data_state = getattr(self.data, "state_dict", None)
        return {
            "step": self.step,
            "samples": self.samples,
            "tokens": self.tokens,
            "model": self.module.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "rng": _rng_state(),
            "data": data_state() if callable(data_state) else None,
            "batches": self._drawn,
            "outer": self.outer.state_dict() if self.outer is not None else None,
        }

    def load_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Restore everything ``state_dict`` holds from a checkpoint file; one that can't be read, is
        damaged inside or does not fit this trainer raises ``ConfigError`` naming it, before anything
        is restored."""
        state, problem = _read_checkpoint(Path(path), self.device, follow=True)
        if state is not None and problem is None:
            problem = self._fit_problem(state)
        if problem is None and state is not None:
            problem = self._restore(state, Path(path))
        if problem is not None:
            raise ConfigError(str(path), "", problem)

    def _fit_problem(self, state: dict[str, Any]) -> str | None:
        """Why ``state`` (whole and well-formed: ``_read_checkpoint``) can't be restored into this
        trainer, or ``None``: every part is checked against what this trainer's own part holds now
        (``_unlike``), so nothing is restored from a checkpoint that would fail half-way."""
        mismatch = self._mismatch(state)
        if mismatch is not None:
            return f"does not fit this model: {mismatch}"
        return next((problem for problem in self._part_problems(state) if problem is not None), None)

    def _part_problems(self, state: dict[str, Any]) -> Iterator[str | None]:
        """Each part's problem (or ``None``), one at a time, in the order ``_restore`` restores them."""
        optimizer = state["optimizer"]
        for index, (group, saved) in enumerate(
            zip(self.optimizer.param_groups, optimizer["param_groups"], strict=True)
        ):
            # Flags (True/False/None: `foreach`, `fused`...) a checkpoint of an older torch lacks are
            # filled in by the optimizer's own load_state_dict; a missing number (`lr`, `betas`) is not.
            settings = {key: value for key, value in group.items() if key != "params" and not _flag(value)}
            yield _unlike(settings, saved, f"'optimizer' group {index}")
        yield self._optimizer_state_problem(optimizer["state"])
        if self.scheduler is not None and state["scheduler"] is not None:
            # torch's schedulers take each attribute the checkpoint holds, and keep the rest as they are
            live, saved = self.scheduler.state_dict(), state["scheduler"]
            yield _unlike({key: live[key] for key in saved if key in live}, saved, "'scheduler'")
        data_state = getattr(self.data, "state_dict", None)
        if state.get("data") is not None and callable(data_state) and hasattr(self.data, "load_state_dict"):
            yield _unlike(data_state(), state["data"], "'data'")
        if self.outer is not None and state.get("outer") is not None:
            yield _unlike(self.outer.state_dict(), state["outer"], "'outer'")

    def _optimizer_state_problem(self, saved: dict[Any, Any]) -> str | None:
        """Whether each parameter's saved optimizer state is a dict whose elementwise buffers
        (``exp_avg``, ``momentum_buffer``...) have their parameter's shape."""
        params = [param for group in self.optimizer.param_groups for param in group["params"]]
        for key, entry in saved.items():
            if not isinstance(entry, dict):
                return f"damaged: 'optimizer' state {key!r} is {_kind(entry)}, expected a dict"
            if not (isinstance(key, int) and 0 <= key < len(params)):
                continue  # torch keeps state of no parameter of this optimizer as it is
            for name in _ELEMENTWISE.intersection(entry):
                buffer = entry[name]
                if not isinstance(buffer, Tensor) or buffer.shape != params[key].shape:
                    shape = tuple(buffer.shape) if isinstance(buffer, Tensor) else _kind(buffer)
                    return (
                        f"damaged: 'optimizer' state {key} {name!r} is {shape}, expected the "
                        f"parameter's shape {tuple(params[key].shape)}"
                    )
        return None

    def _restore(self, state: dict[str, Any], path: Path) -> str | None:
        """Restore ``state``, checked whole by ``_read_checkpoint`` and ``_fit_problem``; why it
        failed part-way, or ``None``. A failure here is one no check foresaw: the state is then
        part restored, and the caller restores another checkpoint over it or stops."""
        try:
            self.module.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            if self.scheduler is not None and state["scheduler"] is not None:
                self.scheduler.load_state_dict(state["scheduler"])
            if state.get("rng") is not None:
                _set_rng_state(state["rng"])
            load_data = getattr(self.data, "load_state_dict", None)
            if state.get("data") is not None and callable(load_data):
                load_data(state["data"])
                self._skip = 0
            else:
                self._skip = state.get("batches", 0)
            if self.outer is not None and state.get("outer") is not None:
                self.outer.load_state_dict(state["outer"])
        except Exception as error:  # a damage no check foresaw: reported as the checkpoint's problem
            return f"can't be restored: {_one_line(error)}"
        self.step, self.samples, self.tokens = state["step"], state["samples"], state["tokens"]
        self._drawn = state.get("batches", 0)
        self.checkpoint = path.with_name(_checkpoint_name(self.step, 0))
        self.resumed_from = path
        return None

    def _mismatch(self, state: dict[str, Any]) -> str | None:
        """How the checkpoint's model and optimizer differ from this trainer's, or ``None``."""
        mine = self.module.state_dict()
        theirs = state["model"]
        missing, unexpected = sorted(mine.keys() - theirs.keys()), sorted(theirs.keys() - mine.keys())
        if missing or unexpected:
            return f"missing keys {missing[:3]}, unexpected keys {unexpected[:3]}"
        for key, tensor in mine.items():
            if not isinstance(theirs[key], Tensor) or theirs[key].shape != tensor.shape:
                shape = getattr(theirs[key], "shape", type(theirs[key]).__name__)
                return (
                    f"{key}: {tuple(shape) if isinstance(shape, torch.Size) else shape} in the "
                    f"checkpoint, {tuple(tensor.shape)} in the model"
                )
        groups = [len(group["params"]) for group in self.optimizer.param_groups]
        saved = [len(group["params"]) for group in state["optimizer"]["param_groups"]]
        if groups != saved:
            return f"optimizer parameter groups of sizes {saved}, the optimizer has {groups}"
        return None

    def _own_checkpoints(self) -> dict[int, Path]:
        """This rank's checkpoint files in ``checkpoint_dir``, by step."""
        if self.checkpoint_dir is None:
            return {}
        return _rundir.rank_checkpoints(self.checkpoint_dir, self.rank)

    def _resume(self) -> None:
        """Restore the newest checkpoint every rank can read and restore; skip (and report) one that
        can't be, for the next newest. A checkpoint is checked whole before any state is restored from
        it; if a restore still fails part-way and no older checkpoint restores over it, or none fits
        this model, ``ConfigError`` stops the run rather than train from a mixed state."""
        mine = self._own_checkpoints()
        steps = set(mine)
        if self.world_size > 1:  # every rank looks at the same point of the job, and at the same steps
            gathered: list[Any] = [None] * self.world_size
            dist.all_gather_object(gathered, steps, group=self.resume_group)
            steps = set.intersection(*gathered)
        stop: tuple[Path, str] | None = None  # why training from scratch would be wrong
        for step in sorted(steps, reverse=True):
            path = mine[step]
            state, problem = _read_checkpoint(path, self.device)
            if state is not None and problem is None:
                problem = self._fit_problem(state)
            if self._all_ranks(problem is None):
                assert state is not None
                problem = self._restore(state, path)
                if self._all_ranks(problem is None):
                    return
                stop = stop or (path, problem or "another rank could not restore it")
            elif problem is not None and problem.startswith("does not fit"):
                stop = stop or (path, problem)
            if problem is not None:
                self.emit(Event.CHECKPOINT_SKIPPED, {"step": step, "path": str(path), "error": problem})
                warnings.warn(
                    capped(f"speedtronic: skipped checkpoint {path}: {problem}; trying the next newest"),
                    SpeedtronicWarning,
                    stacklevel=2,
                )
        if not self._all_ranks(stop is None):  # every rank stops, or none does
            where, problem = stop or (self.checkpoint_dir, "another rank's checkpoint can't be restored")
            raise ConfigError(str(where), "", f"{problem}; no older checkpoint could be restored")

    def _all_ranks(self, ok: bool) -> bool:
        if self.world_size == 1:
            return ok
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, ok, group=self.resume_group)
        return all(gathered)

    # -- helpers -------------------------------------------------------------------------------

    def _batches(self) -> Iterator[Batch]:
        """The data, re-iterated when it runs out; an exhausted iterator is an error naming the step.

        A resumed run whose data has no ``state_dict`` first skips the batches drawn before."""
        while True:
            empty = True
            for batch in self.data:
                empty = False
                if self._skip:
                    self._skip -= 1
                    continue
                yield batch
            if empty:
                raise ValueError(
                    f"the data yielded no batch at step {self.step + 1}: pass a re-iterable "
                    "(a list, a DataLoader) or an endless iterator"
                )

    def _profile_shapes(self) -> None:
        alignment = _shapes.alignment_for(self.device.type, self.precision)
        misaligned = _shapes.misaligned(self.module, alignment)
        self.emit(
            Event.SHAPE_PROFILE,
            {
                "device": str(self.device),
                "precision": self.precision,
                "alignment": alignment,
                "warnings": len(misaligned),
            },
        )
        for field, value in misaligned[:_MAX_SHAPE_WARNINGS]:
            self.emit(
                Event.SHAPE_WARNING,
                {
                    "field": field,
                    "value": value,
                    "alignment": alignment,
                    "suggested": -(-value // alignment) * alignment,
                },
            )

    def emit(self, event: str, payload: Any, *, level: str | None = None) -> bool:
        """Log ``payload`` (at ``level``, default the catalog's); whether the logger's cadence kept it.
        Thread-safe."""
        return self.logger.emit(event, payload, level=level)


def _memory_peaks(device: torch.device) -> dict[str, int]:
    """The CUDA caching allocator's peaks since the process started, and its retries (a cudaMalloc
    that failed, freed the cache and tried again): read from its counters, no device sync."""
    if device.type != "cuda":
        return {}
    stats = torch.cuda.memory_stats(device)
    return {
        "peak_allocated_bytes": int(stats.get("allocated_bytes.all.peak", 0)),
        "peak_reserved_bytes": int(stats.get("reserved_bytes.all.peak", 0)),
        "alloc_retries": int(stats.get("num_alloc_retries", 0)),
    }


def _device_peak(device: torch.device, precision: str) -> float | None:
    """The table's peak FLOP/s for a CUDA device at ``precision``; ``None`` elsewhere (no MFU on a CPU)."""
    if device.type != "cuda":
        return None
    return peak_flops(torch.cuda.get_device_name(device), precision)


def _check_precision(device: torch.device, precision: str) -> None:
    if precision != "bf16":
        return
    supported = (
        torch.cuda.is_bf16_supported()
        if device.type == "cuda"
        else torch.amp.autocast_mode.is_autocast_available(device.type)
    )
    if not supported:
        raise ValueError(f"precision 'bf16' is not supported on {device}; use 'fp32'")


_checkpoint_name = _rundir.checkpoint_name


class CheckpointWriteError(OSError):
    """A checkpoint that could not be written: ``filename`` is the checkpoint, ``strerror`` why
    (``"no space left on device"``, ``"file too large"``). The checkpoints before it are intact."""

    def __str__(self) -> str:
        return f"can't write checkpoint {self.filename}: {self.strerror}"


def _write_checkpoint(state: dict[str, Any], path: Path) -> None:
    """``torch.save`` to ``<path>.partial``, then rename it to ``path``; on failure the partial file
    is removed and ``CheckpointWriteError`` names ``path`` with the OS's reason.

    Written through a Python file, so the OS's error (ENOSPC, EFBIG) is seen: torch's own writer
    reports one only as ``basic_ios::clear: iostream error``. The file is the run directory's
    ``replacing``: created anew (``O_EXCL|O_NOFOLLOW``, never through a link), and the rename replaces
    a link named ``path`` rather than write where it points, so the write stays in the directory."""
    try:
        with _rundir.replacing(path) as file:
            torch.save(state, file)
    except (OSError, RuntimeError) as error:
        cause = _os_error_in(error)
        reason = _rundir.describe_os_error(cause) if cause is not None else _one_line(error)
        raise CheckpointWriteError(cause.errno if cause is not None else 0, reason, str(path)) from error


def _os_error_in(error: BaseException) -> OSError | None:
    """The ``OSError`` that ``error`` is or was raised from: torch wraps a failed write in a
    ``RuntimeError`` whose context is the file's ``OSError``."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


_CHECKPOINT_KEYS = ("step", "samples", "tokens", "model", "optimizer", "scheduler", "rng")


def _read_checkpoint(
    path: Path, device: torch.device, *, follow: bool = False
) -> tuple[dict[str, Any] | None, str | None]:
    """The checkpoint's state, or why it can't be used (torn, corrupt, not a checkpoint, damaged
    inside, not a plain file of the run): checked whole before anything is restored from it.
    ``follow``: a file the user named, whose symbolic link is followed."""
    try:  # opened by the run directory's open_file: a FIFO there is refused, never waited on
        with open(_rundir.open_file(path, follow=follow), "rb") as file:
            state = torch.load(file, map_location=device, weights_only=True)
    except _rundir.RunDirError as error:
        return None, error.problem
    except Exception as error:  # torch reports a torn or corrupt file in many ways
        return None, f"{type(error).__name__}: {_first_line(error)}"
    if not isinstance(state, dict) or not {"step", "model", "optimizer"} <= state.keys():
        return None, "not a speedtronic checkpoint"
    return state, _state_problem(state)


def _state_problem(state: dict[str, Any]) -> str | None:
    """What is missing or malformed in a checkpoint's state, in words, or ``None``."""
    missing = [key for key in _CHECKPOINT_KEYS if key not in state]
    if missing:
        return f"damaged: no {', '.join(map(repr, missing))} entry"
    for key in ("step", "samples", "tokens"):
        if not isinstance(state[key], int) or isinstance(state[key], bool) or state[key] < 0:
            return f"damaged: {key!r} is {_kind(state[key])}, expected a count"
    if not isinstance(state.get("batches", 0), int):
        return f"damaged: 'batches' is {_kind(state['batches'])}, expected a count"
    if not isinstance(state["model"], dict):
        return f"damaged: 'model' is {_kind(state['model'])}, expected a state dict"
    optimizer = state["optimizer"]
    if not (
        isinstance(optimizer, dict)
        and isinstance(optimizer.get("state"), dict)
        and isinstance(optimizer.get("param_groups"), list)
        and all(
            isinstance(group, dict) and isinstance(group.get("params"), list)
            for group in optimizer["param_groups"]
        )
    ):
        return "damaged: 'optimizer' is not an optimizer's state dict"
    scheduler = state["scheduler"]
    if scheduler is not None and not (isinstance(scheduler, dict) and "last_epoch" in scheduler):
        return f"damaged: 'scheduler' is {_kind(scheduler)}, expected a scheduler's state dict"
    outer = state.get("outer")
    if outer is not None and not isinstance(outer, dict):
        return f"damaged: 'outer' is {_kind(outer)}, expected the outer loop's state"
    return _rng_problem(state["rng"])


def _rng_problem(rng: Any) -> str | None:
    """Whether ``_set_rng_state`` can take ``rng``, tried on throwaway generators (never the process's)."""
    if rng is None:
        return None
    if not isinstance(rng, dict) or "torch" not in rng or "python" not in rng:
        return f"damaged: 'rng' is {_kind(rng)}, expected the torch and python RNG states"
    try:
        torch.Generator().set_state(rng["torch"].cpu())
        random.Random().setstate(_as_tuples(rng["python"]))
        if "cuda" in rng and not all(isinstance(s, Tensor) and s.dtype == torch.uint8 for s in rng["cuda"]):
            raise TypeError("a CUDA RNG state is not a byte tensor")
        numpy = sys.modules.get("numpy")
        if "numpy" in rng and numpy is not None:
            name, keys, position, has_gauss, cached = rng["numpy"]
            numpy.random.RandomState().set_state(
                (name, numpy.array(keys, dtype=numpy.uint32), position, has_gauss, cached)
            )
    except Exception as error:  # any malformed entry: the checkpoint is damaged, not the run
        return f"damaged: 'rng' can't be restored: {_one_line(error)}"
    return None


def _flag(value: Any) -> bool:
    return value is None or isinstance(value, bool)


_ELEMENTWISE = frozenset(
    {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "square_avg", "sum", "acc_delta"}
)
"""Per-parameter optimizer buffers of torch's optimizers that have their parameter's shape."""


def _unlike(live: Any, saved: Any, where: str) -> str | None:
    """How ``saved`` differs from ``live`` (what a part of this trainer holds now) in a way that
    would fail its ``load_state_dict`` or the next step, or ``None``: every key of a mapping there,
    a tensor of the same shape and dtype for a tensor, a number for a number, a string for a
    string, a tuple of the same length for a tuple (``betas``), a list for a list."""
    problem: str | None = None
    if live is None:
        return None
    if isinstance(live, Mapping):
        if not isinstance(saved, Mapping):
            return f"damaged: {where} is {_kind(saved)}, expected a dict"
        missing = [key for key in live if key not in saved]
        if missing:
            return f"damaged: {where} has no {', '.join(map(repr, missing[:3]))} entry"
        for key in live:
            problem = problem or _unlike(live[key], saved[key], f"{where} {key!r}")
        return problem
    if isinstance(live, Tensor):
        if not isinstance(saved, Tensor):
            return f"damaged: {where} is {_kind(saved)}, expected a tensor"
        if saved.shape != live.shape or saved.dtype != live.dtype:
            return (
                f"damaged: {where} is a {saved.dtype} tensor of shape {tuple(saved.shape)}, expected "
                f"{live.dtype} {tuple(live.shape)}"
            )
        return None
    if isinstance(live, (bool, int, float)):
        ok = isinstance(saved, (bool, int, float)) or (isinstance(saved, Tensor) and saved.numel() == 1)
        return None if ok else f"damaged: {where} is {_kind(saved)}, expected a number"
    if isinstance(live, str):
        return None if isinstance(saved, str) else f"damaged: {where} is {_kind(saved)}, expected a string"
    if isinstance(live, tuple):
        if not isinstance(saved, (tuple, list)) or len(saved) != len(live):
            return f"damaged: {where} is {_kind(saved)}, expected {len(live)} values"
        for index, (a, b) in enumerate(zip(live, saved, strict=True)):
            problem = problem or _unlike(a, b, f"{where} [{index}]")
        return problem
    if isinstance(live, list):
        listed = isinstance(saved, (list, tuple))
        return None if listed else f"damaged: {where} is {_kind(saved)}, expected a list"
    return None


def _kind(value: Any) -> str:
    return f"a {type(value).__name__}"


def _rng_state() -> dict[str, Any]:
    """Every RNG a step may draw from: torch's (and CUDA's, once initialised), Python's, numpy's."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # torch's stub
        state["cuda"] = torch.cuda.get_rng_state_all()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        name, keys, position, has_gauss, cached = numpy.random.get_state()
        state["numpy"] = (name, keys.tolist(), position, has_gauss, cached)
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"].cpu())
    random.setstate(_as_tuples(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
    numpy = sys.modules.get("numpy")
    if "numpy" in state and numpy is not None:
        name, keys, position, has_gauss, cached = state["numpy"]
        numpy.random.set_state((name, numpy.array(keys, dtype=numpy.uint32), position, has_gauss, cached))


def _as_tuples(value: Any) -> Any:
    """``random.setstate`` wants tuples all the way down."""
    return tuple(_as_tuples(item) for item in value) if isinstance(value, (list, tuple)) else value


def _one_line(error: BaseException) -> str:
    """``"DistBackendError: <first line>"``, or the type's name alone for an error without a message."""
    line = _first_line(error)
    return f"{type(error).__name__}: {line}" if line else type(error).__name__


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""
