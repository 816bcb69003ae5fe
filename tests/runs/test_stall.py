"""Stall budgets: per rank, per phase, on an injected clock, over records of real runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from speedtronic.runs.follow import Follower
from speedtronic.runs.stall import StallBudgets, StallWatch
from tests.runs.conftest import log_run


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def follow(path: Path, watch: StallWatch) -> None:
    with Follower(path, poll=True) as follower:
        for record in follower.read():
            watch.see(record)


def steps(count: int, every: float, rank: int = 0, start: int = 1) -> list:
    return [
        ("train_step", {"step": step, "elapsed_s": step * every, "rank": rank})
        for step in range(start, start + count)
    ]


class TestStallWatch:
    def test_budget_is_five_p95_with_a_floor(self, tmp_path: Path) -> None:
        """Steps 30 s apart: budget 150 s; 2 s apart: the 60 s floor. One alert per stall."""
        clock = Clock()
        watch = StallWatch(clock=clock)
        log_run(tmp_path / "m.jsonl", [("train_start", {}), *steps(20, 30.0)])
        follow(tmp_path / "m.jsonl", watch)
        assert watch.budget(0) == (150.0, "steps")
        clock.now = 149.0
        assert watch.check() == []
        clock.now = 151.0
        [alert] = watch.check()
        assert (alert["rule"], alert["rank"], alert["step"], alert["value"]) == ("stall", 0, 20, 151.0)
        assert "rank 0" in alert["message"]
        assert "step 20" in alert["message"]
        assert watch.check() == []  # once per stall

    def test_start_up_budget_before_the_first_step(self, tmp_path: Path) -> None:
        """Before the first step the start-up budget holds, not the step floor."""
        clock = Clock()
        watch = StallWatch(StallBudgets(startup_s=300), clock=clock)
        log_run(tmp_path / "m.jsonl", [("train_start", {"start_step": 0})])
        follow(tmp_path / "m.jsonl", watch)
        clock.now = 299.0
        assert watch.check() == []
        clock.now = 301.0
        assert watch.check()[0]["phase"] == "start-up"

    def test_checkpoint_and_eval_steps_get_their_budgets(self, tmp_path: Path) -> None:
        """At a step where the run checkpoints (learned from its checkpoint events) the checkpoint budget
        holds; at an eval step the eval budget."""
        clock = Clock()
        watch = StallWatch(StallBudgets(checkpoint_s=600, eval_s=400), clock=clock)
        events = [("train_start", {}), *steps(10, 1.0), ("checkpoint", {"step": 10, "path": "c"})]
        events += [*steps(10, 1.0, start=11), ("checkpoint", {"step": 20, "path": "c"})]
        events += [("eval", {"step": 15, "loss": 1.0}), *steps(10, 1.0, start=21)]
        log_run(tmp_path / "m.jsonl", events)
        follow(tmp_path / "m.jsonl", watch)
        assert watch.budget(0) == (600.0, "checkpoint")  # step 30: a multiple of 10
        clock.now = 599.0
        assert watch.check() == []

    def test_an_ended_rank_is_no_stall(self, tmp_path: Path) -> None:
        """A rank whose last lifecycle record is train_end never stalls; another rank still can."""
        clock = Clock()
        watch = StallWatch(clock=clock)
        log_run(tmp_path / "m.jsonl", [("train_start", {}), *steps(5, 1.0), ("train_end", {"step": 5})])
        (tmp_path / "m.rank1.jsonl").write_text('{"event": "train_step", "step": 5, "rank": 1}\n')
        follow(tmp_path, watch)
        clock.now = 10_000.0
        assert [alert["rank"] for alert in watch.check()] == [1]

    def test_budgets_are_checked(self) -> None:
        """A budget that is not a number > 0 is a ValueError naming it."""
        with pytest.raises(ValueError, match="startup_s"):
            StallBudgets(startup_s=0)


def test_an_eval_between_logged_steps_gets_its_budget(tmp_path: Path) -> None:
    """Steps logged every 20 (``every_steps: 20``), evals every 50: after logged step 140 the run evaluates
    at step 150, before it logs step 160, so the eval budget holds there, not the step budget."""
    clock = Clock()
    watch = StallWatch(StallBudgets(eval_s=400), clock=clock)
    events: list = [("train_start", {})]
    for step in range(20, 160, 20):
        events.append(("train_step", {"step": step, "elapsed_s": step * 0.1}))
        if step in (40, 100):  # the evals at 50 and 100 are written after those steps' records
            events.append(("eval", {"step": step + 10 if step == 40 else step, "loss": 1.0}))
    log_run(tmp_path / "m.jsonl", events)
    follow(tmp_path / "m.jsonl", watch)
    assert watch.budget(0) == (400.0, "eval")  # last logged step 140; eval at 150
    clock.now = 399.0
    assert watch.check() == []
