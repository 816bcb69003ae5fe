"""``SpeedtronicMetricLogger``: torchtune's ``MetricLoggerInterface`` (``log``, ``log_dict``,
``log_config``, ``close``) over a ``MetricLogger``. It never imports torchtune (nor omegaconf).

In a recipe's config::

    metric_logger:
      _component_: speedtronic.integrations.torchtune.SpeedtronicMetricLogger
      log_dir: ${output_dir}/logs

What a recipe calls and the records it becomes:

- ``log_dict(payload, step)`` / ``log(name, data, step)``: a ``train_step`` with ``step`` and the
  metrics as logged (``loss``, ``lr``, ``tokens_per_second_per_gpu``); a call holding validation
  metrics (``val_loss``) is an ``eval`` record with the bare names (``loss``) and ``split="val"``.
- ``log_config(config)``: ``hyperparams`` (``config``: an OmegaConf ``DictConfig`` resolved to plain
  data, or any mapping).
- ``close()``: closes the ``MetricLogger`` if this object built it, else waits for its hooks.

Pass an existing ``MetricLogger`` (``logger=``; you close it) or ``MetricLogger``'s arguments;
``log_dir`` (the key torchtune's own loggers take) means ``json_file=<log_dir>/metrics.jsonl``.
torchtune's distributed recipes build and call the metric logger on rank zero only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from speedtronic.events import Event
from speedtronic.integrations._metrics import emit_metrics
from speedtronic.profiling import MetricLogger

__all__ = ["SpeedtronicMetricLogger"]


class SpeedtronicMetricLogger:
    """torchtune's ``MetricLoggerInterface`` writing to a ``MetricLogger`` (see the module)."""

    def __init__(
        self,
        logger: MetricLogger | None = None,
        *,
        log_dir: str | os.PathLike[str] | None = None,
        **logger_kwargs: Any,
    ) -> None:
        if logger is not None and (logger_kwargs or log_dir is not None):
            given = sorted([*logger_kwargs, *(["log_dir"] if log_dir is not None else [])])
            raise TypeError(
                "SpeedtronicMetricLogger: pass either logger= (a MetricLogger you close) or "
                f"MetricLogger's arguments, not both; got logger= and {', '.join(given)}"
            )
        if logger is not None and not isinstance(logger, MetricLogger):
            raise TypeError(f"SpeedtronicMetricLogger(logger=...): expected a MetricLogger, got {logger!r}")
        if log_dir is not None:
            logger_kwargs.setdefault("json_file", os.path.join(log_dir, "metrics.jsonl"))
        self.logger = logger if logger is not None else MetricLogger(**logger_kwargs)
        self._owns_logger = logger is None

    def log(self, name: str, data: Any, step: int) -> None:
        """Log one scalar (a number, a 0-d tensor or numpy value) at ``step``."""
        emit_metrics(self.logger, step, {name: data})

    def log_config(self, config: Any) -> None:
        """Log the recipe's config (a ``DictConfig``, resolved, or a mapping) as ``hyperparams``."""
        self.logger.emit(Event.HYPERPARAMS, {"config": _plain_config(config)})

    def log_dict(self, payload: Mapping[str, Any], step: int) -> None:
        """Log several scalars at ``step``: one record (per split, for validation metrics)."""
        emit_metrics(self.logger, step, payload)

    def close(self) -> None:
        """Close the ``MetricLogger`` this object built; flush one it was given. Idempotent."""
        if self._owns_logger:
            self.logger.close()
        elif not self.logger.closed:
            self.logger.flush()


def _plain_config(config: Any) -> dict[str, Any]:
    """A config as plain data: OmegaConf's, resolved, when it is one; else the mapping as a dict."""
    omegaconf = sys.modules.get("omegaconf")  # a DictConfig means omegaconf is already imported
    if omegaconf is not None and isinstance(config, omegaconf.DictConfig):
        plain = omegaconf.OmegaConf.to_container(config, resolve=True)
        return dict(plain)
    if isinstance(config, Mapping):
        return dict(config)
    raise TypeError(f"log_config: expected a DictConfig or a mapping, got {type(config).__name__}")
