"""``CadenceFilter``: log a ``train_step`` only every ``every_steps`` steps."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import structlog
from structlog.typing import EventDict, WrappedLogger

from speedtronic.checks import check_count

__all__ = ["CadenceFilter", "step_number"]


def step_number(step: object) -> int | None:
    """``step`` as an int when it is integer-like, else ``None``.

    Integer-like: an ``int`` (not ``bool``), a numpy integer, anything ``operator.index`` accepts, and a
    0-d integer tensor on the CPU. A tensor on an accelerator gives ``None`` without being read:
    reading it would wait for the device (a sync) on every step, skipped or not.
    """
    if type(step) is int:
        return step
    if step is None or isinstance(step, bool):
        return None
    device = getattr(step, "device", None)
    if device is not None and getattr(device, "type", "cpu") != "cpu":
        return None
    try:
        return operator.index(step)  # type: ignore[arg-type]  # anything with __index__
    except Exception:  # not integer-like (a float, a string, a multi-element tensor)
        return None


class CadenceFilter:
    """Drops a ``train_step`` whose integer-like ``step`` is not a multiple of ``every_steps``.

    Every other event passes, and so does a ``train_step`` whose step is not integer-like (see
    ``step_number``: a step held in an accelerator tensor is never read, so such events always pass;
    pass ``step`` as a Python int). In a chain, a dropped event raises ``structlog.DropEvent``.
    ``admits`` is the rule itself: ``MetricLogger.emit`` asks the chain's own ``CadenceFilter`` before
    building an event dict, so a skipped step costs one call and no clock read, device query or tensor
    conversion.
    """

    __slots__ = ("every_steps",)

    def __init__(self, every_steps: int = 1) -> None:
        check_count("every_steps", every_steps)
        self.every_steps = every_steps

    def admits(self, event: object, fields: Mapping[Any, Any]) -> bool:
        """Whether an event named ``event`` with these fields passes the cadence.

        A mapping that can't be read passes: whatever fails reading it fails the same way at every
        cadence, where the logger reports it.
        """
        if self.every_steps == 1 or event != "train_step":
            return True
        try:
            step = fields.get("step")
        except Exception:
            return True
        number = step_number(step)
        return number is None or number % self.every_steps == 0

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        if not self.admits(event_dict.get("event"), event_dict):
            raise structlog.DropEvent
        return event_dict
