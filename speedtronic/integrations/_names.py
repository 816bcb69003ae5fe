"""The metric names the tracker hooks write, ``<event>/<key>`` (one rule for W&B, TensorBoard and
MLflow), and the step they write them at."""

from __future__ import annotations

from typing import Any

from speedtronic.processors.convert import to_python

__all__ = ["metric_name", "section", "step_of"]


def section(event: str) -> str:
    """``event`` with ``%`` and ``/`` escaped (``%25``, ``%2F``), so it holds no ``/``."""
    return event.replace("%", "%25").replace("/", "%2F")


def metric_name(event: str, key: str) -> str:
    """``<event>/<key>``: the event (escaped: see ``section``), a slash, the key as it is.

    The first ``/`` of a name always ends the event, so two (event, key) pairs never share a name:
    event ``eval`` with key ``val/loss`` is ``eval/val/loss``, event ``eval/val`` with key ``loss`` is
    ``eval%2Fval/loss``.
    """
    return f"{section(event)}/{key}"


def step_of(value: Any) -> int | None:
    """An event's training step: an int (a 0-d tensor's value included), else ``None``."""
    value = to_python(value)
    return value if type(value) is int else None
