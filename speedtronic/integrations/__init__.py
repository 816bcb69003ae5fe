"""Hooks that send speedtronic's events to the tools a team already runs.

Importing this package never imports wandb, tensorboard, mlflow or opentelemetry: each hook imports
its SDK when it is constructed, and a missing one raises ``ModuleNotFoundError`` naming the extra to
install (``pip install 'speedtronic[wandb]'``, ``'speedtronic[tensorboard]'``, ``'speedtronic[mlflow]'``,
``'speedtronic[otel]'``).

``emit_metrics`` and ``TrainSpan`` are the framework adapters' shared rules (a logging call becomes a
``train_step``, or an ``eval`` per split; ``train_start``/``train_end`` around training), for an
adapter of your own.
"""

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
