"""Hooks that send speedtronic's events to the tools a team already runs.

Importing this package never imports wandb, tensorboard, mlflow or opentelemetry: each hook imports
its SDK when it is constructed, and a missing one raises ``ModuleNotFoundError`` naming the extra to
install (``pip install 'speedtronic[wandb]'``, ``'speedtronic[tensorboard]'``, ``'speedtronic[mlflow]'``,
``'speedtronic[otel]'``).
"""

from __future__ import annotations

from speedtronic.integrations.mlflow import MlflowHook
from speedtronic.integrations.otel import OtelHook
from speedtronic.integrations.structlog import StructlogHook
from speedtronic.integrations.tensorboard import TensorboardHook, TensorboardWarning
from speedtronic.integrations.wandb import WandbHook

__all__ = ["MlflowHook", "OtelHook", "StructlogHook", "TensorboardHook", "TensorboardWarning", "WandbHook"]
