"""Where the tracker hooks put a value: its name ``<event>/<key>`` and its x, one rule for W&B and
TensorBoard, so a point lands at the same place in both."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any

from speedtronic.record.values import to_python, unique_key

__all__ = [
    "CONFIG_EVENTS",
    "ONE_OFF_EVENTS",
    "SKIPPED_KEYS",
    "StepAxis",
    "flat_items",
    "metric_name",
    "section",
    "step_of",
    "tracked",
]

CONFIG_EVENTS = frozenset({"train_start", "hyperparams"})
"""Events whose ``config`` mapping is the run's hyperparameters (W&B's run config, TensorBoard's
HParams and text), not metrics."""

ONE_OFF_EVENTS = frozenset(
    {"train_start", "train_end", "hyperparams", "compile", "shape_profile", "ooo_backprop"}
)
"""Events a run has once (once per ``fit()``): a chart of one point says nothing, so the trackers keep
their values as the run's summary (W&B) or text (TensorBoard)."""

SKIPPED_KEYS = frozenset({"elapsed_s"})
"""Keys no tracker charts unless asked (a hook's ``skip=``): ``elapsed_s``, the logger's own clock on
every event, is no metric of the event (the JSONL record keeps it)."""


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
    """``value`` as a training step: a whole number (``5``, ``5.0``, a 0-d tensor), else ``None``."""
    value = to_python(value)
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    return None


class StepAxis:
    """The x of each event: its own whole-number step, else the last step seen (0 before any)."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last = 0
        """The last whole-number step an event carried."""

    def at(self, step: int | None) -> int:
        """The x of an event whose own step (``step_of`` its ``step``) is ``step``."""
        if step is None:
            return self.last
        self.last = step
        return step


def flat_items(payload: Mapping[Any, Any], skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, Any]]:
    """The payload's ``(key, value)`` pairs with string keys (a non-string key made unique, as in the
    JSONL record), a nested mapping's values under ``<key>/<inner key>`` (at any depth); keys in
    ``skip`` left out at the top level."""
    taken: dict[str, None] | None = None  # built only for a non-string key
    for key, value in payload.items():
        if key in skip:
            continue
        if type(key) is not str:
            taken = taken if taken is not None else dict.fromkeys(k for k in payload if type(k) is str)
            key = unique_key(taken, key)
            taken[key] = None
        if type(value) in _LEAVES or not isinstance(value, Mapping):
            yield key, value
        else:
            for inner, inner_value in flat_items(value):
                yield f"{key}/{inner}", inner_value


def tracked(
    axis: StepAxis, event: str, payload: Mapping[Any, Any], skip: Collection[str] = SKIPPED_KEYS
) -> tuple[int, Mapping[Any, Any] | None, Iterator[tuple[str, Any]]]:
    """An event as a run tracker (W&B, MLflow) records it: its x (``axis``), the run's config when
    the event carries one (``CONFIG_EVENTS``), and its other values flattened (``flat_items``),
    without ``timestamp`` (the trackers keep their own), the step that is the x, the config, or the
    keys in ``skip``."""
    step = step_of(payload["step"]) if "step" in payload else None
    skip = {"timestamp", *skip} if step is None else {"timestamp", "step", *skip}
    config = payload.get("config") if event in CONFIG_EVENTS else None
    if isinstance(config, Mapping):
        skip.add("config")
    else:
        config = None
    return axis.at(step), config, flat_items(payload, frozenset(skip))


_LEAVES = frozenset({int, float, str, bool, type(None)})
"""Value types that are never mappings: no ``isinstance`` check (an ABC's is slow) on the hot path."""
