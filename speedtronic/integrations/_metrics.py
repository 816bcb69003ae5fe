"""The rules the framework adapters share: which logged metrics are evaluation metrics, which names
are the catalog's, and where a training run starts and ends.

A metric named ``<split>_<name>`` or ``<split>/<name>``, where ``<split>`` is one of ``EVAL_SPLITS``
(``eval_loss`` from Hugging Face, ``val_loss`` or ``val/acc`` from Lightning, ``val_loss`` from
torchtune), is an evaluation metric. A call that logs any is an ``eval`` record per split, holding
the metrics under their bare names (``loss``), ``split`` and the call's other keys (``epoch``); a call
that logs none is a ``train_step``. Either way ``step`` is the framework's step.

A training metric a framework names its own way is recorded under the catalog's name
(``CATALOG_NAMES``: Hugging Face's ``learning_rate`` is ``lr``, Lightning's ``train_loss`` is
``loss``, torchtune's ``tokens_per_second_per_gpu`` is ``tokens_per_s``), so ``speedtronic
summarize`` and ``plot`` read framework runs as they read ``speedtronic train``'s. A call that logs
both names keeps both as logged.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

from speedtronic.events import Event
from speedtronic.profiling import MetricLogger

__all__ = ["CATALOG_NAMES", "EVAL_SPLITS", "TrainSpan", "emit_metrics", "split_metrics"]

EVAL_SPLITS = ("eval", "val", "valid", "validation", "test")
"""Prefixes that mark a metric as measured on held-out data."""

CATALOG_NAMES = {
    "learning_rate": "lr",  # Hugging Face
    "train_loss": "loss",  # Lightning's custom (self.log("train_loss", ...))
    "train/loss": "loss",
    "tokens_per_second_per_gpu": "tokens_per_s",  # torchtune: this (rank-zero) process's rate
}
"""A framework's name for a ``train_step`` key → the catalog's (``speedtronic.events``)."""

_EVAL_NAME = re.compile(rf"({'|'.join(EVAL_SPLITS)})[_/](.+)")


def split_metrics(metrics: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``(other, by_split)``: the metrics without a split prefix, and the others per split under their
    bare names (a bare name that the call also logs unprefixed keeps its prefix)."""
    other: dict[str, Any] = {}
    by_split: dict[str, dict[str, Any]] = {}
    for key, value in metrics.items():
        match = _EVAL_NAME.fullmatch(key)
        if match is None:
            other[key] = value
        else:
            by_split.setdefault(match.group(1), {})[match.group(2)] = value
    for split, values in by_split.items():
        for bare in [bare for bare in values if bare in other]:
            values[f"{split}_{bare}"] = values.pop(bare)
    return other, by_split


def emit_metrics(
    logger: MetricLogger, step: int, metrics: Mapping[str, Any], span: TrainSpan | None = None
) -> None:
    """Emit one framework logging call: an ``eval`` per split when it holds evaluation metrics, else a
    ``train_step`` (its keys under the catalog's names; ``span`` opened first, when given). ``step``
    comes first, and wins over a metric named ``step``."""
    other, by_split = split_metrics(metrics)
    if not by_split:
        payload = _with_step(step, _catalog_names(other))
        if span is not None:
            span.step(logger, payload)
        logger.emit(Event.TRAIN_STEP, payload)
        return
    for split, values in by_split.items():
        logger.emit(Event.EVAL, _with_step(step, {"split": split, **values, **other}))


class TrainSpan:
    """``train_start`` before a framework's first ``train_step``, ``train_end`` when it says training
    ended: for frameworks whose logger API has no start (Lightning's ``Logger``, torchtune's
    ``MetricLoggerInterface``). ``speedtronic summarize`` reads both."""

    __slots__ = ("_last", "_loss", "_started")

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
        self._last = payload["step"]
        self._loss = payload.get("loss", self._loss)

    def end(self, logger: MetricLogger, status: str) -> None:
        """Emit ``train_end`` with ``status`` (``completed``, ``failed``, ``interrupted``) if training
        is under way: ``step`` and ``final_loss`` are the last ``train_step``'s, ``duration_s`` the
        time since ``train_start``."""
        if self._started is None:
            return
        logger.emit(Event.TRAIN_END, {
            "step": self._last,
            "duration_s": round(time.perf_counter() - self._started, 6),
            "final_loss": self._loss,
            "status": status,
        })
        self._started = None


def _catalog_names(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The metrics with ``CATALOG_NAMES`` applied, except where the catalog's name is logged too."""
    renamed: dict[str, Any] = {}
    for key, value in metrics.items():
        name = CATALOG_NAMES.get(key, key)
        renamed[key if name != key and name in metrics else name] = value
    return renamed


def _with_step(step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
    payload: dict[str, Any] = {"step": step}
    payload.update((key, value) for key, value in metrics.items() if key != "step")
    return payload
