"""Hooks inside emit by default; on a worker thread when asked (bounded, in order, drained on close)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from speedtronic import HookFailureWarning, LoggingFailureWarning
from speedtronic.hooks import BackgroundHooks, background
from speedtronic.profiling import MetricLogger
from speedtronic.runs.summary import summarize_run
from tests.helpers import read_jsonl


class Gate:
    """A hook that blocks on every event until the test opens the gate."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()
        self.events: list[tuple[str, int | None, str]] = []

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self.entered.set()
        self.open.wait(60)  # only bounds a test that never opens it
        self.events.append((event, payload.get("step"), threading.current_thread().name))


class TestInsideEmit:
    def test_hooks_have_run_when_emit_returns(self) -> None:
        """By default a hook has acted before emit returns, on the emitting thread."""
        seen: list[tuple[str, str]] = []
        with MetricLogger(stream=io.StringIO()) as logger:
            logger.hooks.append(lambda e, p: seen.append((e, threading.current_thread().name)))
            logger.emit("train_step", {"step": 1})
            assert seen == [("train_step", threading.current_thread().name)]

    def test_a_failure_is_counted_when_emit_returns(self) -> None:
        """hook_errors counts a failure at once, with no flush."""

        def bad(event: str, payload: dict[str, Any]) -> None:
            raise ValueError("nan loss")

        with MetricLogger(stream=io.StringIO(), hooks=[bad]) as logger:
            with pytest.warns(HookFailureWarning):
                logger.emit("train_step", {"step": 1})
            assert dict(logger.hook_errors) == {
                "TestInsideEmit.test_a_failure_is_counted_when_emit_returns.<locals>.bad": 1
            }

    def test_a_hook_that_emits_into_its_own_logger_does_not_deadlock(self) -> None:
        """Re-entrant emit from a hook is logged (the lock is re-entrant)."""
        out = io.StringIO()
        with MetricLogger(stream=out) as logger:

            def echo(event: str, payload: dict[str, Any]) -> None:
                if event == "train_step":
                    logger.emit("checkpoint", {"step": payload["step"]})

            logger.hooks.append(echo)
            logger.emit("train_step", {"step": 3})
        assert [line.split(" | ")[2].split()[0] for line in out.getvalue().splitlines()] == [
            "train_step",
            "checkpoint",
        ]


class TestBackgroundHooksOnTheLogger:
    def test_emit_returns_while_a_hook_is_busy(self) -> None:
        """With background_hooks=True a blocked hook doesn't block emit: it runs on the worker thread."""
        gate = Gate()
        with MetricLogger(stream=io.StringIO(), hooks=[gate], background_hooks=True) as logger:
            logger.emit("train_step", {"step": 1})
            assert gate.entered.wait(60)
            logger.emit("train_step", {"step": 2})
            assert gate.events == []
            gate.open.set()
        assert [(e, s) for e, s, _ in gate.events] == [("train_step", 1), ("train_step", 2)]
        assert all(name.startswith("speedtronic-hooks-") for _, _, name in gate.events)

    def test_order_kept_and_everything_delivered_by_close(self) -> None:
        """10,000 events reach the hook in emission order by the time close() returns."""
        seen: list[int] = []
        hooks = [lambda e, p: seen.append(p["step"])]
        with MetricLogger(stream=io.StringIO(), hooks=hooks, background_hooks=True) as logger:
            for step in range(10_000):
                logger.emit("train_step", {"step": step})
        assert seen == list(range(10_000))

    def test_a_stalled_hook_costs_emit_at_most_the_put_timeout(self, jsonl_path: Path) -> None:
        """Queue full: emit waits hook_put_timeout_s, then drops the event for hooks only, counted (the
        next one at once, as the worker has taken nothing since)."""
        gate = Gate()
        logger = MetricLogger(
            stream=io.StringIO(),
            json_file=jsonl_path,
            hooks=[gate],
            background_hooks=True,
            hook_queue_size=1,
            hook_put_timeout_s=0.05,
            close_timeout_s=5,
        )
        logger.emit("train_step", {"step": 0})
        assert gate.entered.wait(60)  # the worker holds step 0: the queue (of 1) is empty
        with pytest.warns(HookFailureWarning, match="queue full"):
            for step in range(1, 4):  # 1 queued; 2 waits and is dropped; 3 dropped without waiting
                logger.emit("train_step", {"step": step})
        assert logger.hook_errors["BackgroundHooks"] == 2
        gate.open.set()
        logger.close()
        assert [r["step"] for r in read_jsonl(jsonl_path) if r["event"] == "train_step"] == [0, 1, 2, 3]
        assert [s for _, s, _ in gate.events] == [0, 1]

    def test_flush_waits_for_delivery(self) -> None:
        """flush() returns once hooks have every event emitted so far; False when it times out."""
        gate = Gate()
        logger = MetricLogger(stream=io.StringIO(), hooks=[gate], background_hooks=True)
        logger.emit("a", {})
        assert logger.flush(timeout=0.2) is False
        gate.open.set()
        assert logger.flush(timeout=10) is True
        assert [e for e, _, _ in gate.events] == ["a"]
        logger.close()

    def test_close_timeout_reports_what_was_not_delivered(self, jsonl_path: Path) -> None:
        """A hook stuck past close_timeout_s: close returns, says how many events were lost, and
        never closes a hook that is still running."""
        gate = Gate()
        closed: list[bool] = []
        gate.close = lambda: closed.append(True)  # type: ignore[attr-defined]
        logger = MetricLogger(
            stream=io.StringIO(),
            json_file=jsonl_path,
            hooks=[gate],
            close_timeout_s=0.2,
            background_hooks=True,
        )
        for step in range(5):
            logger.emit("train_step", {"step": step})
        assert gate.entered.wait(60)
        with pytest.warns((LoggingFailureWarning, HookFailureWarning)) as caught:
            logger.close()
        gate.open.set()
        messages = [str(w.message) for w in caught]
        assert any("event(s) not delivered" in m for m in messages)
        assert any("still running after 0.2 s: not closed" in m for m in messages)
        reports = [r for r in read_jsonl(jsonl_path) if r["event"] == "hook_error" and r["phase"] == "drain"]
        assert len(reports) == 1
        assert 4 <= reports[0]["undelivered"] <= 5
        assert closed == []

    def test_hooks_added_later_miss_earlier_events(self) -> None:
        """A hook added after an event was handed over doesn't get it."""
        gate, late = Gate(), []
        gate.open.set()
        logger = MetricLogger(stream=io.StringIO(), hooks=[gate], background_hooks=True)
        logger.emit("a", {})
        logger.flush(10)
        logger.hooks.append(lambda e, p: late.append(e))
        logger.emit("b", {})
        logger.close()
        assert late == ["b"]
        assert [e for e, _, _ in gate.events] == ["a", "b"]

    def test_a_hook_that_flushes_or_emits_into_its_own_logger_does_not_deadlock(self) -> None:
        """flush() from the worker returns at once; emit() from it is logged."""
        results: list[bool] = []
        out = io.StringIO()
        logger = MetricLogger(stream=out, background_hooks=True)

        def hook(event: str, payload: dict[str, Any]) -> None:
            if event == "a":
                results.append(logger.flush(timeout=5))
                logger.emit("from_hook", {})

        logger.hooks.append(hook)
        logger.emit("a", {})
        assert logger.flush(timeout=10)
        logger.close()
        assert len(results) == 1
        assert "from_hook" in out.getvalue()

    def test_base_exception_in_a_hook_reaches_the_emitting_thread(self) -> None:
        """A hook's SystemExit on the worker is raised from the next emit or flush."""

        def leave(event: str, payload: dict[str, Any]) -> None:
            raise SystemExit(3)

        logger = MetricLogger(stream=io.StringIO(), hooks=[leave], background_hooks=True)
        logger.emit("a", {})
        with pytest.raises(SystemExit):
            logger.flush(10)
        logger.close()


class TestBackgroundWrapper:
    def test_only_the_wrapped_hook_runs_on_a_worker(self) -> None:
        """background(hook) moves one hook off the training thread; the others stay inside emit."""
        gate = Gate()
        inline: list[str] = []
        with MetricLogger(
            stream=io.StringIO(), hooks=[background(gate), lambda e, p: inline.append(e)]
        ) as logger:
            logger.emit("a", {})
            assert inline == ["a"]
            assert gate.entered.wait(60)
            gate.open.set()
        assert [e for e, _, _ in gate.events] == ["a"]
        assert gate.events[0][2] == "speedtronic-hooks"

    def test_a_wrapped_hooks_failures_are_the_loggers(self, tmp_path: Path) -> None:
        """A background(hook)'s failure is counted in hook_errors, written as a hook_error record and
        shown by summarize, as with background_hooks=True (it was only warned from the worker)."""

        def failing(event: str, payload: dict[str, Any]) -> None:
            raise RuntimeError(f"no {event}")

        path = tmp_path / "m.jsonl"
        with (
            pytest.warns(HookFailureWarning, match="no train_step"),
            MetricLogger(stream=io.StringIO(), json_file=path, hooks=[background(failing)]) as logger,
        ):
            logger.emit("train_step", {"step": 1, "loss": 1.0})
            assert logger.flush(10)
            counted = dict(logger.hook_errors)
        name = next(iter(counted))
        assert name.endswith("failing")
        assert counted == {name: 1}
        errors = [r for r in read_jsonl(path) if r["event"] == "hook_error"]
        assert [(r["hook"], r["phase"], r.get("during")) for r in errors] == [
            (name, "on_event", "train_step"),
            (name, "total", None),
        ]
        assert summarize_run(path).hook_failures == {name: 1}

    def test_a_wrapped_hooks_undelivered_events_are_a_drain_record(self, jsonl_path: Path) -> None:
        """A background(hook) stuck past its own close_timeout_s: the logger's close reports what it
        could not deliver (a drain hook_error record and a warning), as for background_hooks=True."""
        gate = Gate()
        logger = MetricLogger(
            stream=io.StringIO(), json_file=jsonl_path, hooks=[background(gate, close_timeout_s=0.2)]
        )
        for step in range(5):
            logger.emit("train_step", {"step": step})
        assert gate.entered.wait(60)
        with pytest.warns((LoggingFailureWarning, HookFailureWarning)) as caught:
            logger.close()
        gate.open.set()
        assert any("event(s) not delivered" in str(w.message) for w in caught)
        (drain,) = [r for r in read_jsonl(jsonl_path) if r["event"] == "hook_error" and r["phase"] == "drain"]
        assert (drain["timeout_s"], 4 <= drain["undelivered"] <= 5) == (0.2, True)

    def test_a_wrapped_hook_added_later_reports_to_the_logger(self) -> None:
        """A background(hook) appended to logger.hooks after the logger was made is counted too."""

        def failing(event: str, payload: dict[str, Any]) -> None:
            raise RuntimeError("boom")

        with pytest.warns(HookFailureWarning), MetricLogger(stream=io.StringIO()) as logger:
            logger.hooks.append(background(failing))
            logger.emit("a", {})
            assert logger.flush(10)
            assert list(logger.hook_errors.values()) == [1]

    def test_a_wrapped_hook_keeps_its_own_on_error(self) -> None:
        """An on_error given to background(...) keeps the failures: the logger doesn't take them."""
        seen: list[str] = []

        def failing(event: str, payload: dict[str, Any]) -> None:
            raise RuntimeError("boom")

        wrapped = background(failing, on_error=lambda hook, error, during: seen.append(str(during)))
        with MetricLogger(stream=io.StringIO(), hooks=[wrapped]) as logger:
            logger.emit("a", {})
            assert logger.flush(10)
            assert dict(logger.hook_errors) == {}
        assert seen == ["a"]

    def test_close_closes_the_wrapped_hooks_after_delivering(self) -> None:
        """close() delivers what is queued, then closes the hooks."""
        journal: list[str] = []

        class Hook:
            def on_event(self, event: str, payload: dict[str, Any]) -> None:
                time.sleep(0.01)
                journal.append(event)

            def close(self) -> None:
                journal.append("close")

        wrapper = BackgroundHooks([Hook()])
        for name in ("a", "b", "c"):
            wrapper.on_event(name, {})
        assert wrapper.close(10) == 0
        assert journal == ["a", "b", "c", "close"]

    @pytest.mark.parametrize(
        "bad", [{"queue_size": 0}, {"put_timeout_s": float("inf")}, {"put_timeout_s": 0}]
    )
    def test_bad_options_are_refused(self, bad: dict[str, Any]) -> None:
        """Queue size and timeout are checked when the wrapper is made."""
        with pytest.raises(ValueError, match=next(iter(bad))):
            BackgroundHooks([], **bad)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_delivers_only_its_own_events(tmp_path: Path) -> None:
    """A child forked with events queued delivers none of the parent's, and its own, even without close."""
    code = f"""
import io, os, sys, threading
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from speedtronic.profiling import MetricLogger
gate = threading.Event()
out = {str(tmp_path)!r}
def hook(event, payload):
    gate.wait(10)
    with open(os.path.join(out, f"{{os.getpid()}}.txt"), "a") as f:
        f.write(event + "\\n")
logger = MetricLogger(stream=io.StringIO(), hooks=[hook], background_hooks=True)
for i in range(3):
    logger.emit(f"parent{{i}}", {{}})
pid = os.fork()
if pid == 0:
    gate.set()
    for i in range(5):
        logger.emit(f"child{{i}}", {{}})
    sys.exit(0)
gate.set()
os.waitpid(pid, 0)
logger.close()
print(pid)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    child = result.stdout.strip()
    assert (tmp_path / f"{child}.txt").read_text().split() == [f"child{i}" for i in range(5)]
    parents = [p for p in tmp_path.iterdir() if p.name != f"{child}.txt"]
    assert [p.read_text().split() for p in parents] == [["parent0", "parent1", "parent2"]]


def test_a_hook_that_closes_its_logger_from_the_worker(jsonl_path: Path) -> None:
    """close() from a background hook: queued events never reach the closed hooks; the loss is said."""
    delivered: list[int] = []
    closed: list[int] = []
    gate = threading.Event()
    logger = MetricLogger(stream=io.StringIO(), json_file=jsonl_path, background_hooks=True)

    class Hook:
        def on_event(self, event: str, payload: dict[str, Any]) -> None:
            gate.wait(10)
            delivered.append(payload["step"])
            if payload["step"] == 0:
                logger.close()

        def close(self) -> None:
            closed.append(len(delivered))

    logger.hooks.append(Hook())
    with pytest.warns(LoggingFailureWarning, match="not delivered"):
        for step in range(5):
            logger.emit("train_step", {"step": step})
        gate.set()
        deadline = time.monotonic() + 60  # only bounds a failure
        while not closed:  # the worker closes the hooks last: once the closing event is done
            assert time.monotonic() < deadline, "the hooks were never closed"
            time.sleep(0.01)
    assert delivered == [0]
    assert closed == [1]
