"""speedtronic: observability for PyTorch training runs.

Importing speedtronic never imports torch, wandb or tensorboard.
"""

from __future__ import annotations

from speedtronic._version import __version__
from speedtronic.errors import (
    HookError,
    HookFailureWarning,
    LoggerClosedError,
    LoggingFailureWarning,
    SpeedtronicWarning,
)
from speedtronic.hooks import CallbackList, TrainingHook, on_event
from speedtronic.profiling import MetricLogger, memory_usage_bytes

__all__ = [
    "CallbackList",
    "HookError",
    "HookFailureWarning",
    "LoggerClosedError",
    "LoggingFailureWarning",
    "MetricLogger",
    "SpeedtronicWarning",
    "TrainingHook",
    "__version__",
    "memory_usage_bytes",
    "on_event",
]
