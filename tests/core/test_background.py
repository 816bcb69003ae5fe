"""Hooks on the logger's own thread: off the training thread, in order, bounded, drained on close."""

from __future__ import annotations

import io
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from speedtronic import HookFailureWarning, LoggingFailureWarning
from speedtronic.profiling import MetricLogger
from tests.conftest import read_jsonl


class Gate:
    """A hook that blocks on every event until the test opens the gate."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()
        self.events: list[tuple[str, int | None, str]] = []

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self.entered.set()
        self.open.wait(10)
        self.events.append((event, payload.get("step"), threading.current_thread().name))


def test_emit_returns_while_a_hook_is_busy() -> None:
    """A blocked hook doesn't block emit: the hook runs on the logger's thread, not the caller's."""
    gate = Gate()
    with MetricLogger(stream=io.StringIO(), hooks=[gate]) as logger:
        logger.emit("train_step", {"step": 1})
        assert gate.entered.wait(5)
        logger.emit("train_step", {"step": 2})  # would deadlock if hooks ran inside emit
        assert gate.events == []
        gate.open.set()
    assert [(e, s) for e, s, _ in gate.events] == [("train_step", 1), ("train_step", 2)]
    assert all(name.startswith("speedtronic-hooks-") for _, _, name in gate.events)


def test_order_kept_and_everything_delivered_by_close() -> None:
    """10,000 events reach the hook in emission order by the time close() returns."""
    seen: list[int] = []
    with MetricLogger(stream=io.StringIO(), hooks=[lambda e, p: seen.append(p["step"])]) as logger:
        for step in range(10_000):
            logger.emit("train_step", {"step": step})
    assert seen == list(range(10_000))


def test_full_queue_blocks_and_never_drops() -> None:
    """With the queue full, emit waits for the hook; no event is dropped."""
    gate = Gate()
    logger = MetricLogger(stream=io.StringIO(), hooks=[gate], hook_queue_size=2)
    returned: list[int] = []

    def producer() -> None:
        for step in range(6):
            logger.emit("train_step", {"step": step})
            returned.append(step)

    thread = threading.Thread(target=producer)
    thread.start()
    assert gate.entered.wait(5)
    thread.join(0.5)
    assert thread.is_alive(), "emit should block while the queue is full"
    assert len(returned) <= 3  # one in the hook, two queued
    gate.open.set()
    thread.join(10)
    logger.close()
    assert returned == list(range(6))
    assert [s for _, s, _ in gate.events] == list(range(6))


def test_flush_waits_for_delivery() -> None:
    """flush() returns once hooks have every event emitted so far; False when it times out."""
    gate = Gate()
    logger = MetricLogger(stream=io.StringIO(), hooks=[gate])
    logger.emit("a", {})
    assert logger.flush(timeout=0.2) is False
    gate.open.set()
    assert logger.flush(timeout=10) is True
    assert [e for e, _, _ in gate.events] == ["a"]
    logger.close()


def test_close_timeout_reports_what_was_not_delivered(jsonl_path: Path) -> None:
    """A hook stuck past close_timeout_s: close returns, and says how many events were lost."""
    gate = Gate()
    logger = MetricLogger(
        stream=io.StringIO(), json_file=jsonl_path, hooks=[gate], close_timeout_s=0.2
    )
    for step in range(5):
        logger.emit("train_step", {"step": step})
    assert gate.entered.wait(5)
    with pytest.warns(LoggingFailureWarning, match=r"event\(s\) not delivered"):
        logger.close()
    gate.open.set()
    (report,) = [r for r in read_jsonl(jsonl_path) if r["event"] == "hook_error"]
    assert report["phase"] == "drain"
    assert 4 <= report["undelivered"] <= 5


def test_hooks_added_later_miss_earlier_events() -> None:
    """The hooks of an event are the ones registered when it was emitted."""
    gate, late = Gate(), []
    logger = MetricLogger(stream=io.StringIO(), hooks=[gate])
    logger.emit("a", {})
    logger.hooks.append(lambda e, p: late.append(e))
    logger.emit("b", {})
    gate.open.set()
    logger.close()
    assert late == ["b"]
    assert [e for e, _, _ in gate.events] == ["a", "b"]


def test_no_thread_without_hooks() -> None:
    """A logger without hooks starts no thread."""
    before = threading.active_count()
    with MetricLogger(stream=io.StringIO()) as logger:
        for step in range(10):
            logger.emit("train_step", {"step": step})
        assert threading.active_count() == before


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_delivers_only_its_own_events(tmp_path: Path) -> None:
    """A child forked with events queued delivers none of the parent's, and its own without deadlock."""
    import subprocess

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
logger = MetricLogger(stream=io.StringIO(), hooks=[hook])
for i in range(3):
    logger.emit(f"parent{{i}}", {{}})
pid = os.fork()
if pid == 0:
    gate.set()
    logger.emit("child", {{}})
    logger.close()
    os._exit(0)
gate.set()
os.waitpid(pid, 0)
logger.close()
print(pid)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    child = result.stdout.strip()
    assert (tmp_path / f"{child}.txt").read_text().split() == ["child"]
    parents = [p for p in tmp_path.iterdir() if p.name != f"{child}.txt"]
    assert [p.read_text().split() for p in parents] == [["parent0", "parent1", "parent2"]]


class Slow:
    """A hook that takes its time and notices overlapping calls, including close()."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.active, self.overlaps = seconds, 0, 0
        self.events: list[int] = []
        self.closed_at_events: int | None = None

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self.active += 1
        self.overlaps += self.active > 1
        __import__("time").sleep(self.seconds)
        self.events.append(payload["step"])
        self.active -= 1

    def close(self) -> None:
        self.closed_at_events = len(self.events)


def test_after_a_close_timeout_no_event_reaches_a_hook(jsonl_path: Path) -> None:
    """Past close_timeout_s the rest is dropped and counted: nothing is delivered after close()."""
    import time

    hook = Slow(0.05)
    logger = MetricLogger(stream=io.StringIO(), json_file=jsonl_path, hooks=[hook], close_timeout_s=0.12)
    for step in range(20):
        logger.emit("train_step", {"step": step})
    with pytest.warns(LoggingFailureWarning, match="not delivered"):
        logger.close()
    delivered_at_close = len(hook.events)
    time.sleep(0.3)
    assert len(hook.events) <= delivered_at_close + 1  # at most the call that was in flight
    (report,) = [r for r in read_jsonl(jsonl_path) if r["event"] == "hook_error"]
    assert report["undelivered"] >= 20 - delivered_at_close - 1


def test_flush_after_close_returns_at_once() -> None:
    """flush() on a closed logger never waits for a hook thread that is gone."""
    logger = MetricLogger(stream=io.StringIO(), hooks=[lambda e, p: None])
    logger.emit("a", {})
    logger.close()
    assert logger.flush() is True


def test_a_hook_that_flushes_its_own_logger_does_not_deadlock() -> None:
    """flush() from the hook thread returns instead of waiting for itself."""
    results: list[bool] = []
    logger = MetricLogger(stream=io.StringIO())
    logger.hooks.append(lambda e, p: results.append(logger.flush(timeout=5)))
    logger.emit("a", {})
    assert logger.flush(timeout=10)
    logger.close()
    assert len(results) == 1


def test_an_escalated_report_never_costs_the_event_being_emitted(jsonl_path: Path) -> None:
    """A deferred hook failure raising (under -W error) at the next emit: that event is written first."""

    def bad(event: str, payload: dict[str, Any]) -> None:
        raise ValueError("boom")

    logger = MetricLogger(stream=io.StringIO(), json_file=jsonl_path, hooks=[bad])
    logger.emit("a", {})
    assert logger._delivery is not None
    assert logger._delivery.flush(10)  # delivered (and failed) on the hook thread, not yet reported
    with pytest.raises(HookFailureWarning):
        logger.emit("b", {})
    with pytest.warns(HookFailureWarning):
        logger.close()
    assert [r["event"] for r in read_jsonl(jsonl_path) if r["event"] != "hook_error"] == ["a", "b"]
