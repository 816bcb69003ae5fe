"""speedtronic: observability for PyTorch training runs.

Importing speedtronic never imports torch, wandb or tensorboard, nor structlog: the names below are
loaded on first use, so ``speedtronic summarize`` starts without the logging machinery it does not run.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from speedtronic._version import __version__

if TYPE_CHECKING:
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


_HOMES = {
    "CallbackList": "speedtronic.hooks",
    "HookError": "speedtronic.errors",
    "HookFailureWarning": "speedtronic.errors",
    "LoggerClosedError": "speedtronic.errors",
    "LoggingFailureWarning": "speedtronic.errors",
    "MetricLogger": "speedtronic.profiling",
    "SpeedtronicWarning": "speedtronic.errors",
    "TrainingHook": "speedtronic.hooks",
    "memory_usage_bytes": "speedtronic.profiling",
    "on_event": "speedtronic.hooks",
}
"""Where each public name lives: imported from there on first use (PEP 562)."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is not None:
        value = getattr(importlib.import_module(home), name)
    else:  # a submodule, as `import speedtronic; speedtronic.hooks.on_event` found it when it was eager
        try:
            value = importlib.import_module(f"speedtronic.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"speedtronic.{name}":
                raise
            raise AttributeError(f"module 'speedtronic' has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
