"""The one rule the framework adapters share: which logged metrics are evaluation metrics.

A metric named ``<split>_<name>`` or ``<split>/<name>``, where ``<split>`` is one of ``EVAL_SPLITS``
(``eval_loss`` from Hugging Face, ``val_loss`` or ``val/acc`` from Lightning, ``val_loss`` from
torchtune), is an evaluation metric. A call that logs any is an ``eval`` record per split, holding
the metrics under their bare names (``loss``), ``split`` and the call's other keys (``epoch``); a call
that logs none is a ``train_step``. Either way ``step`` is the framework's step.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from speedtronic.events import Event
from speedtronic.profiling import MetricLogger

__all__ = ["EVAL_SPLITS", "emit_metrics", "split_metrics"]

EVAL_SPLITS = ("eval", "val", "valid", "validation", "test")
"""Prefixes that mark a metric as measured on held-out data."""

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


def emit_metrics(logger: MetricLogger, step: int, metrics: Mapping[str, Any]) -> None:
    """Emit one framework logging call: an ``eval`` per split when it holds evaluation metrics, else a
    ``train_step``. ``step`` comes first, and wins over a metric named ``step``."""
    other, by_split = split_metrics(metrics)
    if not by_split:
        logger.emit(Event.TRAIN_STEP, _with_step(step, other))
        return
    for split, values in by_split.items():
        logger.emit(Event.EVAL, _with_step(step, {"split": split, **values, **other}))


def _with_step(step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
    payload: dict[str, Any] = {"step": step}
    payload.update((key, value) for key, value in metrics.items() if key != "step")
    return payload
