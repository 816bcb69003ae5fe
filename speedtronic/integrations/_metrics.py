"""The rules the framework adapters share: which logged metrics are evaluation metrics, and where a
training run starts and ends."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

from speedtronic.events import EVAL_SPLITS, LOSS_KEYS, Event
from speedtronic.profiling import MetricLogger

__all__ = [
    "FLUSH_TIMEOUT_S",
    "TrainSpan",
    "emit_metrics",
    "is_eval",
    "split_metrics",
]

FLUSH_TIMEOUT_S = 30.0
"""The longest the end of a framework's stage (``fit()``, ``test()``, ``train()``, ``evaluate()``, a
recipe's ``cleanup()``) waits in ``MetricLogger.flush`` for the hooks' output to be on disk."""

_EVAL_NAME = re.compile(rf"({'|'.join(EVAL_SPLITS)})[_/].+")


def is_eval(metrics: Mapping[str, Any]) -> bool:
    """Whether a logging call holds evaluation metrics (it becomes ``eval`` records)."""
    return any(_EVAL_NAME.fullmatch(key) for key in metrics)


def split_metrics(metrics: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``(other, by_split)``: the metrics without a split prefix, and the others per split, each
    under the name it was logged with."""
    other: dict[str, Any] = {}
    by_split: dict[str, dict[str, Any]] = {}
    for key, value in metrics.items():
        match = _EVAL_NAME.fullmatch(key)
        if match is None:
            other[key] = value
        else:
            by_split.setdefault(match.group(1), {})[key] = value
    return other, by_split


def emit_metrics(
    logger: MetricLogger,
    step: int | None,
    metrics: Mapping[str, Any],
    span: TrainSpan | None = None,
    *,
    timing: Mapping[str, float] | None = None,
) -> None:
    """Emit one framework logging call: an ``eval`` per split when it holds evaluation metrics, else a
    ``train_step`` (``span`` opened first, when given); every metric under the name it was logged
    with. ``step`` comes first, and wins over a metric named ``step``; ``None``: the record has no
    ``step`` (trackers draw it at the last step seen). ``timing``: the catalog's timing keys the
    adapter measured (``step_time_s``..., or ``eval_s``), added to each record after the metrics and
    never read as a split (``eval_s`` is no ``eval`` metric); a metric logged under the same name wins.

    Public as ``speedtronic.integrations.emit_metrics``: the one routing every framework adapter uses
    (Hugging Face, Lightning, torchtune, Accelerate), for an adapter of your own."""
    other, by_split = split_metrics(metrics)
    if not by_split:
        payload = _with_timing(_with_step(step, other), timing)
        if span is not None:
            span.step(logger, payload)
        logger.emit(Event.TRAIN_STEP, payload)
        return
    for split, values in by_split.items():
        logger.emit(Event.EVAL, _with_timing(_with_step(step, {"split": split, **values, **other}), timing))


class TrainSpan:
    """``train_start`` before a framework's first ``train_step``, ``train_end`` when it says training
    ended: for frameworks whose logger API has no start (Lightning's ``Logger``, torchtune's
    ``MetricLoggerInterface``, Accelerate's ``GeneralTracker``). ``speedtronic summarize`` reads both.
    Public as ``speedtronic.integrations.TrainSpan``."""

    __slots__ = ("_last", "_loss", "_started")

    @property
    def open(self) -> bool:
        """Whether training is under way: ``train_start`` emitted, ``train_end`` not yet."""
        return self._started is not None

    def __init__(self) -> None:
        self._started: float | None = None  # perf_counter at train_start; None while not training
        self._last = 0
        self._loss: Any = None

    def step(self, logger: MetricLogger, payload: Mapping[str, Any]) -> None:
        """Before a ``train_step``: emit ``train_start`` (no keys: the framework doesn't say where it
        starts) if training isn't under way."""
        if self._started is None:
            self._started, self._loss = time.perf_counter(), None
            logger.emit(Event.TRAIN_START, {})
        self._last = payload.get("step", self._last)
        self._loss = next((payload[name] for name in LOSS_KEYS if name in payload), self._loss)

    def end(self, logger: MetricLogger, status: str, reason: str | None = None) -> None:
        """Emit ``train_end`` with ``status`` (``completed``, ``failed``, ``interrupted``, ``stopped``
        with the alert's message as ``reason``) if training is under way: ``step`` and ``final_loss``
        are the last ``train_step``'s, ``duration_s`` the time since ``train_start``."""
        if self._started is None:
            return
        payload = {
            "step": self._last,
            "duration_s": round(time.perf_counter() - self._started, 6),
            "final_loss": self._loss,
            "status": status,
        }
        if reason is not None:
            payload["reason"] = reason
        logger.emit(Event.TRAIN_END, payload)
        self._started = None


def _with_step(step: int | None, metrics: Mapping[str, Any]) -> dict[str, Any]:
    payload: dict[str, Any] = {} if step is None else {"step": step}
    payload.update((key, value) for key, value in metrics.items() if key != "step")
    return payload


def _with_timing(payload: dict[str, Any], timing: Mapping[str, float] | None) -> dict[str, Any]:
    if timing:
        payload.update((key, value) for key, value in timing.items() if key not in payload)
    return payload
