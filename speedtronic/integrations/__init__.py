"""Hooks that send speedtronic's events to the tools a team already runs, and the framework adapters'
shared rules (``emit_metrics``, ``TrainSpan``). Importing this package imports no tracker SDK."""

from __future__ import annotations

from speedtronic.integrations._metrics import TrainSpan, emit_metrics
from speedtronic.integrations.mlflow import MlflowHook
from speedtronic.integrations.otel import OtelHook
from speedtronic.integrations.structlog import StructlogHook
from speedtronic.integrations.tensorboard import TensorboardHook, TensorboardWarning
from speedtronic.integrations.wandb import WandbHook

__all__ = [
    "MlflowHook",
    "OtelHook",
    "StructlogHook",
    "TensorboardHook",
    "TensorboardWarning",
    "TrainSpan",
    "WandbHook",
    "emit_metrics",
]
