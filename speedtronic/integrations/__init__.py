"""Hooks that send speedtronic's events to the tools a team already runs.

Importing this package never imports wandb or tensorboard: each hook imports its SDK when it is
constructed, and a missing one raises ``ModuleNotFoundError`` naming the extra to install
(``pip install 'speedtronic[wandb]'``, ``'speedtronic[tensorboard]'``).
"""

from __future__ import annotations

from speedtronic.integrations._structlog import StructlogHook
from speedtronic.integrations._tensorboard import TensorboardHook, TensorboardWarning
from speedtronic.integrations._wandb import WandbHook

__all__ = ["StructlogHook", "TensorboardHook", "TensorboardWarning", "WandbHook"]
