"""Stall detection from outside the trainer: no new ``train_step`` from a rank for longer than its budget."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from speedtronic.alerts import Alert
from speedtronic.runs.reader import Record, as_number

__all__ = ["STALL", "StallBudgets", "StallWatch"]

STALL = "stall"
"""The ``rule`` of a stall alert."""


@dataclass(frozen=True)
class StallBudgets:
    """How long a rank may stay silent, per phase (see the module). Seconds, and a factor."""

    step_factor: float = 5.0
    step_min_s: float = 60.0
    startup_s: float = 900.0
    checkpoint_s: float = 600.0
    eval_s: float = 600.0
    window: int = 64

    def __post_init__(self) -> None:
        for name in ("step_factor", "step_min_s", "startup_s", "checkpoint_s", "eval_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"StallBudgets({name}={value!r}): expected a number > 0")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 2:
            raise ValueError(f"StallBudgets(window={self.window!r}): expected an int >= 2")


class _Rank:
    __slots__ = (
        "alerted",
        "ended",
        "intervals",
        "last_elapsed",
        "last_seen",
        "last_step",
        "segment",
        "stride",
        "where",
    )

    def __init__(self, window: int, now: float) -> None:
        self.last_seen = now
        self.last_step: int | None = None
        self.last_elapsed: float | None = None
        self.intervals: deque[float] = deque(maxlen=window)
        self.ended = False
        self.alerted = False
        self.segment: object = None
        self.stride = 1  # steps between the rank's last two logged steps (its logging cadence)
        self.where = "start-up"


class StallWatch:
    """Per-rank silence against per-phase budgets; ``check()`` gives the ``stall`` alerts due now."""

    __slots__ = ("_budgets", "_clock", "_periods", "_ranks")

    def __init__(
        self, budgets: StallBudgets | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._budgets = budgets if budgets is not None else StallBudgets()
        self._clock = clock
        self._ranks: dict[int, _Rank] = {}
        self._periods: dict[str, list[int]] = {"checkpoint": [], "eval": []}

    def see(self, record: Record) -> None:
        """Take a record just followed (any event; only the logger's own and other tools' are ignored)."""
        now = self._clock()
        rank = self._ranks.get(record.rank)
        if rank is None:
            rank = self._ranks[record.rank] = _Rank(self._budgets.window, now)
        rank.last_seen, rank.alerted = now, False
        event = record.event
        if event == "train_start":
            rank.ended, rank.where, rank.last_elapsed = False, "start-up", None
        elif event == "train_end":
            rank.ended = True
        elif event == "train_step":
            step = record.payload.get("step")
            elapsed = as_number(record.payload.get("elapsed_s"))
            last = rank.last_elapsed if rank.last_step is not None and rank.where == "steps" else None
            if elapsed is not None and last is not None and elapsed >= last:
                rank.intervals.append(elapsed - last)
            rank.last_elapsed = elapsed
            if type(step) is int and rank.last_step is not None and step > rank.last_step:
                rank.stride = step - rank.last_step
            rank.last_step = step if type(step) is int else rank.last_step
            rank.where = "steps"
        elif event in self._periods:
            step = record.payload.get("step")
            if type(step) is int and step > 0 and step not in self._periods[event]:
                self._periods[event].append(step)
            rank.last_elapsed = None  # the interval across a save or an eval is no step interval

    def resume(self, rank: int, last_step: int | None, *, ended: bool) -> None:
        """Know a rank from before a restart of the watcher (``WatchState``): silent since now."""
        state = self._ranks[rank] = _Rank(self._budgets.window, self._clock())
        state.ended, state.last_step = ended, last_step
        state.where = "steps" if last_step is not None else "start-up"

    def budget(self, rank: int) -> tuple[float, str]:
        """The rank's budget now, and its phase: ``start-up``, ``steps``, ``checkpoint`` or ``eval``."""
        state = self._ranks[rank]
        budgets = self._budgets
        if state.where == "start-up" or state.last_step is None:
            return budgets.startup_s, "start-up"
        budget, phase = max(budgets.step_factor * _p95(state.intervals), budgets.step_min_s), "steps"
        for event, extra in (("checkpoint", budgets.checkpoint_s), ("eval", budgets.eval_s)):
            period = _period(self._periods[event])
            # The silence after a logged step holds the steps up to the next logged one: with a cadence
            # (``every_steps``) a save or eval at any of them.
            due = -(-state.last_step // period) * period if period else 0
            if period and due < state.last_step + state.stride and extra > budget:
                budget, phase = extra, event
        return budget, phase

    def check(self) -> list[dict[str, Any]]:
        """A ``stall`` alert payload for each rank silent past its budget and not yet alerted."""
        now = self._clock()
        out = []
        for number, state in sorted(self._ranks.items()):
            if state.ended or state.alerted:
                continue
            budget, phase = self.budget(number)
            silent = now - state.last_seen
            if silent <= budget:
                continue
            state.alerted = True
            after = f"step {state.last_step}" if state.last_step is not None else "start-up"
            message = (
                f"rank {number}: no train_step for {silent:.0f} s after {after} "
                f"(budget {budget:.0f} s, {phase})"
            )
            alert = Alert(
                STALL,
                "error",
                "train_step",
                state.last_step,
                round(silent, 3),
                round(budget, 3),
                message,
                {"rank": number, "phase": phase, "silent_s": round(silent, 3)},
            )
            out.append(alert.payload())
        return out

    @property
    def ranks(self) -> dict[int, tuple[bool, int | None]]:
        """Each rank seen: whether it ended (``train_end`` its last lifecycle record), its last step."""
        return {number: (state.ended, state.last_step) for number, state in sorted(self._ranks.items())}


def _p95(values: deque[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def _period(steps: list[int]) -> int:
    """The interval between a run's checkpoint (or eval) steps: the last two's difference, else the
    first step; 0 when there is none."""
    if len(steps) >= 2:
        return abs(steps[-1] - steps[-2])
    return steps[0] if steps else 0
