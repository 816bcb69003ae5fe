"""``SpeedtronicMetricLogger``: torchtune's ``MetricLoggerInterface`` over a ``MetricLogger``.
It never imports torchtune; ``docs/frameworks.md`` shows the recipe config and the records."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from speedtronic.alerts import ON_ALERT, AlertWatch, default_rules
from speedtronic.events import Event
from speedtronic.hooks import close_hook
from speedtronic.hooks.registry import HookConfigError, build_hook
from speedtronic.integrations._metrics import FLUSH_TIMEOUT_S, TrainSpan, emit_metrics
from speedtronic.profiling import MetricLogger

__all__ = ["SpeedtronicMetricLogger"]


class SpeedtronicMetricLogger:
    """torchtune's ``MetricLoggerInterface`` writing to a ``MetricLogger`` (see the module)."""

    def __init__(
        self,
        logger: MetricLogger | None = None,
        *,
        log_dir: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        project: str | None = None,
        entity: str | None = None,
        group: str | None = None,
        hooks: Iterable[Any] = (),
        on_alert: str = "log",
        **logger_kwargs: Any,
    ) -> None:
        if on_alert not in ON_ALERT:
            raise ValueError(
                f"SpeedtronicMetricLogger(on_alert={on_alert!r}): expected one of {', '.join(ON_ALERT)}"
            )
        self.on_alert = on_alert
        hooks = list(hooks)
        torchtune_kwargs = {
            "log_dir": log_dir,
            "filename": filename,
            "project": project,
            "entity": entity,
            "group": group,
            "hooks": hooks or None,
        }
        if logger is not None and (logger_kwargs or any(v is not None for v in torchtune_kwargs.values())):
            given = sorted([*logger_kwargs, *(key for key, v in torchtune_kwargs.items() if v is not None)])
            raise TypeError(
                "SpeedtronicMetricLogger: pass either logger= (a MetricLogger you close) or "
                f"MetricLogger's arguments, not both; got logger= and {', '.join(given)}"
            )
        if logger is not None and not isinstance(logger, MetricLogger):
            raise TypeError(f"SpeedtronicMetricLogger(logger=...): expected a MetricLogger, got {logger!r}")
        self._span = TrainSpan()
        self._owns_logger = logger is None
        if logger is not None:
            self.logger = logger
            self._watch = AlertWatch(logger.chain.alerts)
            self._stop = False
            return
        logger_kwargs.setdefault("alerts", default_rules())
        if log_dir is not None or filename is not None:
            json_file = os.path.join(log_dir or "", filename or "metrics.jsonl")
            logger_kwargs.setdefault("json_file", json_file)
        built: list[Any] = []
        try:
            built.extend(_build_hook(index, entry, log_dir) for index, entry in enumerate(hooks))
            if project is not None or entity is not None or group is not None:
                from speedtronic.integrations import WandbHook

                init: dict[str, Any] = {"entity": entity, "group": group, "dir": log_dir and str(log_dir)}
                built.append(WandbHook(project, **{key: v for key, v in init.items() if v is not None}))
            logger_kwargs["hooks"] = built
            self.logger = MetricLogger(**logger_kwargs)
            self._watch = AlertWatch(self.logger.chain.alerts)
            self._stop = False
        except BaseException:
            for hook in built:
                close_hook(hook)
            raise

    @property
    def should_stop(self) -> bool:
        """``on_alert="stop"``: whether an alert has fired since training began (the recipe checks it
        after each ``log_dict`` and leaves its loop: torchtune has no stop mechanism of its own)."""
        if self.on_alert == "stop" and not self._stop and self._watch.fired() is not None:
            self._stop = True
        return self._stop

    def log(self, name: str, data: Any, step: int) -> None:
        """Log one scalar (a number, a 0-d tensor or numpy value) at ``step``."""
        emit_metrics(self.logger, step, {name: data}, self._span)

    def log_config(self, config: Any) -> None:
        """Log the recipe's config (a ``DictConfig``, resolved, or a mapping) as ``hyperparams``."""
        self.logger.emit(Event.HYPERPARAMS, {"config": _plain_config(config)}, level="debug")

    def log_dict(self, payload: Mapping[str, Any], step: int) -> None:
        """Log several scalars at ``step``: one record (per split, for validation metrics)."""
        emit_metrics(self.logger, step, payload, self._span)

    def close(self) -> None:
        """``train_end`` if training was logged; close the ``MetricLogger`` this object built, flush
        one it was given. Idempotent."""
        if not self.logger.closed:
            self._span.end(self.logger, "completed")
        if self._owns_logger:
            self.logger.close()
        elif not self.logger.closed:
            self.logger.flush(FLUSH_TIMEOUT_S)


def _build_hook(index: int, entry: Any, log_dir: str | os.PathLike[str] | None) -> Any:
    """One ``hooks`` item: a hook as it is, or built from a ``{type: ...}`` or ``{_component_: ...}``
    entry (an OmegaConf node is already plain data by the time torchtune calls the adapter)."""
    if not isinstance(entry, Mapping):
        return entry
    kwargs = {str(key): value for key, value in entry.items()}
    where = f"SpeedtronicMetricLogger(hooks[{index}])"
    if "type" in kwargs and "_component_" not in kwargs:
        name = str(kwargs.pop("type"))
        if name == "tensorboard" and log_dir is not None:
            kwargs.setdefault("log_dir", os.path.join(log_dir, "tensorboard"))
    elif "_component_" in kwargs and "type" not in kwargs:
        module, _, attribute = str(kwargs.pop("_component_")).rpartition(".")
        name = f"{module}:{attribute}"
    else:
        raise ValueError(
            f"{where}: an entry needs 'type' (a hook type) or '_component_' (a dotted path), "
            f"one of them; got keys {', '.join(kwargs) or 'none'}"
        )
    try:
        return build_hook(name, kwargs)  # as a config's logging.hooks entry is built
    except (LookupError, HookConfigError) as error:
        raise ValueError(f"{where}: {error}") from error.__cause__


def _plain_config(config: Any) -> dict[str, Any]:
    """A config as plain data: OmegaConf's, resolved, when it is one; else the mapping as a dict."""
    omegaconf = sys.modules.get("omegaconf")  # a DictConfig means omegaconf is already imported
    if omegaconf is not None and isinstance(config, omegaconf.DictConfig):
        plain = omegaconf.OmegaConf.to_container(config, resolve=True)
        return dict(plain)
    if isinstance(config, Mapping):
        return dict(config)
    raise TypeError(f"log_config: expected a DictConfig or a mapping, got {type(config).__name__}")
