"""The event catalog: every event speedtronic's producers emit, its level, and the payload it carries."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from enum import Enum
from typing import Any, Literal, Protocol, TypeAlias, TypedDict

__all__ = [
    "EVAL_SPLITS",
    "EVENT_LEVELS",
    "LOSS_KEYS",
    "PAYLOADS",
    "RATE_SUFFIX",
    "RATE_SUFFIXES",
    "AlertPayload",
    "CheckpointPayload",
    "CheckpointSkippedPayload",
    "CompilePayload",
    "DeltaUploadFailedPayload",
    "DeltaUploadQueuedPayload",
    "DeltaUploadSkippedPayload",
    "DeltaUploadStalePayload",
    "DeltaUploadedPayload",
    "DeviceScalar",
    "EvalPayload",
    "Event",
    "HyperparamsPayload",
    "OooBackpropPayload",
    "OuterStepPayload",
    "Real",
    "ShapeProfilePayload",
    "ShapeWarningPayload",
    "SystemPayload",
    "TrainEndPayload",
    "TrainStartPayload",
    "TrainStepPayload",
    "eval_split",
    "is_lr",
    "is_rate",
    "level_for",
]

EVENT_LEVELS: Mapping[str, str] = {
    "shape_warning": "warning",
    "delta_upload_skipped": "warning",
    "delta_upload_stale": "warning",
    "delta_upload_failed": "error",
    "checkpoint_skipped": "warning",
    "hook_error": "warning",
    "logging_error": "error",
    "alert": "warning",
}
"""Events that signal trouble and the level (structlog method name) their record uses; every other
event is ``info`` unless the producer passes a level (``MetricLogger.emit(..., level="debug")``)."""


def level_for(event: str) -> str:
    """The structlog method name (``"info"``, ``"warning"``, ``"error"``) for ``event``."""
    return EVENT_LEVELS.get(event, "info")


if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # pragma: no cover - exercised on Python 3.10 only

    class StrEnum(str, Enum):
        """``enum.StrEnum`` for Python 3.10: members are strings and print as their value."""

        def __str__(self) -> str:
            return str(self.value)


class Event(StrEnum):
    """Every event in the catalog; members are their names (``Event.TRAIN_STEP == "train_step"``)."""

    TRAIN_START = "train_start"
    TRAIN_STEP = "train_step"
    CHECKPOINT = "checkpoint"
    TRAIN_END = "train_end"
    COMPILE = "compile"
    OUTER_STEP = "outer_step"
    DELTA_UPLOAD_QUEUED = "delta_upload_queued"
    DELTA_UPLOADED = "delta_uploaded"
    DELTA_UPLOAD_SKIPPED = "delta_upload_skipped"
    DELTA_UPLOAD_FAILED = "delta_upload_failed"
    DELTA_UPLOAD_STALE = "delta_upload_stale"
    SHAPE_PROFILE = "shape_profile"
    SHAPE_WARNING = "shape_warning"
    OOO_BACKPROP = "ooo_backprop"
    CHECKPOINT_SKIPPED = "checkpoint_skipped"
    EVAL = "eval"
    HYPERPARAMS = "hyperparams"
    SYSTEM = "system"
    ALERT = "alert"


class DeviceScalar(Protocol):
    """A 0-d tensor or numpy scalar: anything with ``.item()``, converted by the logger when logged."""

    def item(self) -> float: ...


Real: TypeAlias = float | DeviceScalar
"""A number, or a 0-d tensor the logger converts only for the events it logs."""


# -- training (speedtronic.training.trainer.Trainer) ------------------------------------------------------


class _TrainStartRequired(TypedDict):
    start_step: int
    """Steps already done (0, or the step of the checkpoint resumed from)."""
    target_step: int
    """The absolute step ``fit()`` trains up to."""
    device: str
    precision: str
    """``"fp32"`` or ``"bf16"`` (autocast)."""
    grad_accum: int
    """Microbatches accumulated per optimizer step."""
    parameters: int
    """Trainable parameters."""


class TrainStartPayload(_TrainStartRequired, total=False):
    """``train_start``: once per ``fit()``, before the first step."""

    outer_every: int
    """Inner steps per outer (DiLoCo) step, when the outer loop is on."""
    flops_per_token: float
    """Training FLOPs per token (per target element): the reference trainer's ``6 * parameters``."""
    peak_flops: float
    """The device's peak FLOP/s at ``precision`` (given, or ``speedtronic.accelerators.PEAK_FLOPS``):
    with ``flops_per_token`` and ``tokens_per_s``, the run's MFU."""
    pid: int
    """The process's id, when it registered its stack signal (``speedtronic.stacks.register_stack_dump``)."""
    stack_signal: int
    """The signal that makes it write every thread's stack to ``stacks``."""
    stacks: str
    """The file the stacks go to, relative to the run directory (``stacks/rank<r>-<time>.txt``)."""


class _TrainStepRequired(TypedDict):
    step: int
    """The absolute step just completed (1-based)."""
    loss: Real
    """Mean loss over the step's microbatches."""
    lr: float
    """The learning rate this step used."""
    samples_per_s: float
    tokens_per_s: float
    """Target elements per second (tokens for a sequence task, items for classification)."""
    samples: int
    """Samples seen since step 0 (counted across resumes)."""
    tokens: int
    microbatches: int
    """Microbatches (forward/backward passes) in this step."""


class TrainStepPayload(_TrainStepRequired, total=False):
    """``train_step``: after every optimizer step (the logger's cadence decides which are logged)."""

    grad_norm: Real
    """Total gradient norm before clipping."""
    step_time_s: float
    """Host wall time of this step: its microbatches, the optimizer step and the after-step work."""
    data_wait_s: float
    """Host time this step waited for its microbatches (drawing them, copying them to the device)."""
    compute_s: float
    """Host time in the microbatches' forward and backward passes, less ``sync_wait_s``."""
    sync_wait_s: float
    """Host time waiting for the other ranks: under DDP, from the last gradient bucket's hand-over to
    the all-reduce's end (in the last backward); under the DiLoCo outer loop, its agreement at an
    outer boundary. Written when something waits there."""


class _CheckpointRequired(TypedDict):
    step: int
    path: str


class CheckpointPayload(_CheckpointRequired, total=False):
    """``checkpoint``: a checkpoint (model, optimizer, schedule, step) was written."""

    save_s: float
    """Host wall time of writing the checkpoint (the checkpoint time of ``summarize --health``)."""


class _TrainEndRequired(TypedDict):
    step: int
    """The absolute step reached."""
    steps_run: int
    """Steps this ``fit()`` ran (0 when a resumed run had already reached its target)."""
    duration_s: float
    """Wall time of ``fit()``."""
    final_loss: float | None
    """The last step's loss; ``None`` when no step ran."""


class TrainEndPayload(_TrainEndRequired, total=False):
    """``train_end``: ``fit()`` finished, or stopped (``status``)."""

    samples_per_s: float
    tokens_per_s: float
    status: Literal["completed", "interrupted", "failed", "stopped"]
    """How ``fit()`` ended: reached its target, stopped by the user (Ctrl-C, SIGTERM), or raised;
    ``stopped``: an alert stopped it cleanly (``on_alert: stop``)."""
    error: str
    """``failed`` and ``interrupted``: the exception, on one line (``"DistBackendError: ..."``)."""
    reason: str
    """``stopped``: the alert's message."""
    peak_allocated_bytes: int
    """CUDA: the most memory tensors held at once (the caching allocator's peak)."""
    peak_reserved_bytes: int
    """CUDA: the most memory the caching allocator held from the device at once."""
    alloc_retries: int
    """CUDA: allocations that failed, freed the allocator's cache and were tried again."""


class _CompileRequired(TypedDict):
    enabled: bool
    """Whether the compiled model is the one training (``False``: fell back to eager)."""


class CompilePayload(_CompileRequired, total=False):
    """``compile``: ``torch.compile`` was asked for; the outcome of the first compiled step."""

    backend: str
    reason: str
    """Why compilation is off: the exception that made the trainer fall back to eager."""
    compile_s: float
    """Wall time of the first (compiling) forward and backward pass."""


# -- shapes --------------------------------------------------------------------------------------


class ShapeProfilePayload(TypedDict):
    """``shape_profile``: once per ``fit()``, the model's layer sizes checked against the device."""

    device: str
    precision: str
    alignment: int
    """Multiple (in elements) the device's fast kernels want layer sizes to be."""
    warnings: int
    """Sizes that are not a multiple of ``alignment`` (one ``shape_warning`` each)."""


class _ShapeWarningRequired(TypedDict):
    field: str
    """Where the size comes from, e.g. ``"net.1.out_features"``."""
    value: int
    alignment: int
    """The suggested alignment."""


class ShapeWarningPayload(_ShapeWarningRequired, total=False):
    """``shape_warning`` (logged at WARNING): one poorly aligned size."""

    suggested: int
    """The nearest multiple of ``alignment`` at or above ``value``."""


# -- distributed (DiLoCo outer loop, delta uploads, overlapped backward) -------------------------


class _OuterStepRequired(TypedDict):
    outer_step: int
    """The synced parameters' generation after this update (1 for the first outer step)."""
    candidates: int
    """Deltas expected: one per rank."""
    included: int
    """Deltas averaged into the update (a rank whose delta was not finite is left out)."""


class OuterStepPayload(_OuterStepRequired, total=False):
    """``outer_step``: the outer optimizer applied one averaged delta to the synced parameters.

    Emitted by the exchange thread; the training thread loads the result at the next outer boundary.
    """

    step: int
    """The inner step at which the averaged deltas were taken."""
    lag: int
    """Outer steps the synced parameters had moved on since the deltas' baseline (0 or 1)."""
    checksum: str
    """SHA-256 prefix of the synced parameters after the update: equal on every rank."""


class _DeltaUploadRequired(TypedDict):
    local_step: int
    """The inner step at which the delta was taken (or was due)."""
    base_outer_step: int
    """The outer step (generation of synced parameters) the delta was computed against."""


class DeltaUploadQueuedPayload(_DeltaUploadRequired, total=False):
    """``delta_upload_queued``: a delta was handed to the exchange thread."""

    in_flight: int
    """Exchanges outstanding on this rank, this one included."""
    checksum: str
    """SHA-256 prefix of the parameters the model continues from: equal on every rank."""


class DeltaUploadedPayload(_DeltaUploadRequired, total=False):
    """``delta_uploaded``: a delta's all-reduce finished."""

    bytes: int
    upload_s: float


class DeltaUploadSkippedPayload(_DeltaUploadRequired):
    """``delta_upload_skipped`` (WARNING): a delta was due but not uploaded."""

    reason: Literal["overflow", "in_flight"]
    """``"in_flight"``: the previous exchange was still running on some rank; ``"overflow"``: it was
    still waiting in the size-1 queue (its thread had not started it)."""


class DeltaUploadFailedPayload(_DeltaUploadRequired):
    """``delta_upload_failed`` (ERROR): an exchange raised; no outer step came of it."""

    error: str


class DeltaUploadStalePayload(_DeltaUploadRequired):
    """``delta_upload_stale`` (WARNING): a delta is applied to synced parameters newer than its baseline."""

    baseline_generation: int
    """The synced parameters' generation the delta is applied to (newer than ``base_outer_step``)."""


class _OooBackpropRequired(TypedDict):
    enabled: bool


class OooBackpropPayload(_OooBackpropRequired, total=False):
    """``ooo_backprop``: whether out-of-order backpropagation is in use, and how."""

    reason: str
    """Why it is off."""
    streams: int
    stages: list[str]
    """Stage names, in execution order."""


class CheckpointSkippedPayload(TypedDict):
    """``checkpoint_skipped``: a checkpoint that could not be read on resume; the next newest is used."""

    step: int
    path: str
    error: str
    """Why it could not be read."""


# -- evaluation and framework adapters (speedtronic.integrations.transformers, .lightning, .torchtune) ----


class _EvalRequired(TypedDict):
    step: int
    """The training step the evaluated model had reached."""


class EvalPayload(_EvalRequired, total=False):
    """``eval``: metrics on held-out data; more keys are the metrics under the names they were logged
    with (a framework's ``val_loss``, ``eval_loss``)."""

    loss: Real
    """Mean loss over the held-out batches."""
    perplexity: float
    """``exp(loss)``, for a token-level loss (the reference trainer)."""
    split: str
    """The prefix a framework logged the metrics under (``"eval"``, ``"val"``, ``"test"``)."""
    eval_s: float
    """Host wall time of the evaluation."""


EVAL_SPLITS = ("eval", "val", "valid", "validation", "test")
"""Prefixes that mark a metric as measured on held-out data (``val_loss``, ``test/loss``): each is a split
of its own, in the writers' series and the readers' rows alike."""

LOSS_KEYS = ("loss", "train_loss", "train/loss", "train_loss_step", "train_loss_epoch")
"""The keys a framework logs its training loss under (Hugging Face and torchtune: ``loss``; Lightning:
what the module logged), the most preferred first."""


RATE_SUFFIX = "_per_s"
"""The suffix of speedtronic's own throughput rates (``samples_per_s``, ``tokens_per_s``)."""

RATE_SUFFIXES = (RATE_SUFFIX, "_per_sec", "_per_second", "_per_second_per_gpu")
"""A numeric key ending in one of these is a throughput rate (``tokens_per_s``, Lightning's
``train/device/samples_per_sec``, Hugging Face's ``train_samples_per_second``)."""

_EVAL_LOSS = re.compile(rf"({'|'.join(EVAL_SPLITS)})[_/]loss(_step|_epoch)?")


_LR = re.compile(r"lr|learning_rate|lr-[^/]+(/pg\d+)?")


def is_lr(key: str) -> bool:
    """Whether ``key`` is a learning rate: ``lr``, ``learning_rate`` (Hugging Face), Lightning's
    ``LearningRateMonitor`` names ``lr-<Optimizer>`` and ``lr-<Optimizer>/pg<N>``."""
    return _LR.fullmatch(key) is not None


def is_rate(key: str) -> bool:
    """Whether ``key`` is a throughput rate (``RATE_SUFFIXES``)."""
    return key.endswith(RATE_SUFFIXES)


def eval_split(key: str) -> str | None:
    """The split whose held-out loss ``key`` is (``val_loss`` -> ``"val"``); ``None`` for another key."""
    match = _EVAL_LOSS.fullmatch(key)
    return match.group(1) if match is not None else None


class HyperparamsPayload(TypedDict):
    """``hyperparams``: a run's configuration as a training framework hands it over."""

    config: dict[str, Any]


# -- the machine (speedtronic.integrations.system.SystemMonitor) ----------------------------------------


class SystemPayload(TypedDict):
    """``system``: one sample of the process and the machine, taken off the training thread.

    Each visible GPU (CUDA's numbering: ``gpu0`` is ``cuda:0``) adds ``gpu<i>_util_percent``,
    ``gpu<i>_memory_used_bytes``, ``gpu<i>_memory_total_bytes``, ``gpu<i>_power_watts`` and
    ``gpu<i>_temperature_c``, each one the GPU reports (NVML)."""

    cpu_percent: float
    """This process's CPU use since the last sample, in percent of one core (over 100 on several)."""
    rss_bytes: int
    """This process's resident memory."""
    host_memory_used_bytes: int
    """The machine's memory in use (total less available)."""
    host_memory_total_bytes: int
    """The machine's physical memory."""


# -- alerts (speedtronic.alerts) ---------------------------------------------------------------------


class _AlertRequired(TypedDict):
    rule: str
    """The rule's name (``non_finite``, ``spike``, ``throughput_drop``, ``memory``, ``threshold``, yours)."""
    severity: Literal["warning", "error"]
    """Also the record's level: an ``error`` alert is written at ``error``, a ``warning`` at ``warning``."""
    key: str | None
    """The key the rule watched, when it watched one."""
    step: int | None
    """The step of the record that tripped it."""
    value: float | None
    """The value that tripped it."""
    threshold: float | None
    """The bound the value crossed, when the rule has one."""
    message: str
    """One human line saying what happened."""


class AlertPayload(_AlertRequired, total=False):
    """``alert``: a rule fired on the record just before (``MetricLogger(alerts=...)``), in the same
    ``emit``; level ``warning`` or ``error``, by ``severity``. The rule's figures follow."""

    window: int
    """Values in the rule's window when it fired."""
    mean: float
    std: float
    median: float
    k: float
    keys: list[str]
    """``non_finite``: every key that turned non-finite in that record."""


PAYLOADS: Mapping[Event, type[Mapping[str, Any]]] = {
    Event.TRAIN_START: TrainStartPayload,
    Event.TRAIN_STEP: TrainStepPayload,
    Event.CHECKPOINT: CheckpointPayload,
    Event.TRAIN_END: TrainEndPayload,
    Event.COMPILE: CompilePayload,
    Event.OUTER_STEP: OuterStepPayload,
    Event.DELTA_UPLOAD_QUEUED: DeltaUploadQueuedPayload,
    Event.DELTA_UPLOADED: DeltaUploadedPayload,
    Event.DELTA_UPLOAD_SKIPPED: DeltaUploadSkippedPayload,
    Event.DELTA_UPLOAD_FAILED: DeltaUploadFailedPayload,
    Event.DELTA_UPLOAD_STALE: DeltaUploadStalePayload,
    Event.SHAPE_PROFILE: ShapeProfilePayload,
    Event.SHAPE_WARNING: ShapeWarningPayload,
    Event.OOO_BACKPROP: OooBackpropPayload,
    Event.CHECKPOINT_SKIPPED: CheckpointSkippedPayload,
    Event.EVAL: EvalPayload,
    Event.HYPERPARAMS: HyperparamsPayload,
    Event.SYSTEM: SystemPayload,
    Event.ALERT: AlertPayload,
}
"""Each event's payload ``TypedDict``."""
