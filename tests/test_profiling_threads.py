"""emit from many threads at once: no interleaving, no loss, order per thread, hooks serial."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from speedtronic.profiling import MetricLogger
from tests.helpers import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
THREADS = 8
EVENTS = 2_000


class ConcurrencyProbe:
    """A deliberately thread-unsafe hook that notices if two calls ever overlap."""

    def __init__(self) -> None:
        self.active = 0
        self.overlaps = 0
        self.count = 0

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self.active += 1
        if self.active > 1:
            self.overlaps += 1
        self.count += 1
        for _ in range(20):  # widen the window a race would need
            pass
        self.active -= 1


def test_many_threads(tmp_path: Path) -> None:
    """8 threads x 2,000 events: exact counts, every line parses, per-thread order, hooks serial."""
    probe = ConcurrencyProbe()
    text, jsonl = tmp_path / "train.log", tmp_path / "metrics.jsonl"
    start = threading.Barrier(THREADS)

    def worker(thread: int, logger: MetricLogger) -> None:
        start.wait()
        for i in range(EVENTS):
            blob = "x" * (10 + (i * 37 % 2_000))
            event = "outer_step" if thread % 2 else "train_step"
            logger.emit(event, {"step": i, "thread": thread, "blob": blob})

    with MetricLogger(file=text, json_file=jsonl, hooks=[probe]) as logger:
        threads = [threading.Thread(target=worker, args=(t, logger)) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    records = read_jsonl(jsonl)
    assert len(records) == THREADS * EVENTS
    for t in range(THREADS):
        assert [r["step"] for r in records if r["thread"] == t] == list(range(EVENTS))
    lines = text.read_text("utf-8").splitlines()
    assert len(lines) == THREADS * EVENTS
    assert all(" | INFO | " in line and line.endswith('"') is False for line in lines)
    assert probe.count == THREADS * EVENTS
    assert probe.overlaps == 0


HELD_LOGGER = r"""
import os, signal, sys, threading, time
from speedtronic.profiling import MetricLogger

logger = MetricLogger(stream=open(os.devnull, "w"), json_file=sys.argv[1], hooks=[])
held, release = threading.Event(), threading.Event()

def hold(event, payload):
    if event == "hold":
        held.set()
        release.wait()

logger.hooks.append(hold)
holder = threading.Thread(target=logger.emit, args=("hold", {}))  # inside emit until release is set
main = threading.get_ident()
state = f"/proc/self/task/{threading.main_thread().native_id}/stat"
calling = threading.Event()

def until_main_waits():
    calling.wait()
    while not (open(state).read().rpartition(")")[2].split()[0] == "S" and main_in_emit()):
        time.sleep(0)

def main_in_emit():  # asleep with emit on its stack: on the lock (not asleep elsewhere, on the GIL)
    frame = sys._current_frames().get(main)
    while frame is not None and frame.f_code is not MetricLogger.emit.__code__:
        frame = frame.f_back
    return frame is not None
"""
"""A child's start: a logger whose ``hold`` event stays inside ``emit`` until ``release`` is set, and
``until_main_waits()`` for a helper thread, once the main thread has set ``calling`` before its emit and
sleeps inside it (a thread waiting for the GIL sleeps too: after ``calling.set()``, before its emit)."""

WAITING_CHILD = (
    HELD_LOGGER
    + r"""
in_handler = threading.Event()

def handler(signum, frame):
    in_handler.set()
    logger.emit("from_handler", {})  # its thread already waits for the logger's lock

signal.signal(signal.SIGUSR1, handler)
holder.start()
held.wait()

def helper():
    until_main_waits()
    signal.pthread_kill(main, signal.SIGUSR1)
    in_handler.wait()
    release.set()

threading.Thread(target=helper).start()
calling.set()
logger.emit("waiting", {})
holder.join()
logger.close()
print("done")
"""
)


def test_a_signal_handler_emitting_while_its_thread_waits_for_the_logger(tmp_path: Path) -> None:
    """A thread waiting for the logger (another thread is inside emit) runs a signal handler that
    emits too: it waits its turn as well, nothing deadlocks, and all three records are written."""
    jsonl = tmp_path / "m.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", WAITING_CHILD, str(jsonl)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["done"]
    assert sorted(record["event"] for record in read_jsonl(jsonl)) == ["from_handler", "hold", "waiting"]


def test_a_thread_emitting_without_pause_does_not_keep_another_waiting_until_it_stops(
    tmp_path: Path,
) -> None:
    """Another thread's emit gets in between the events of a thread that emits back to back: it waits
    for the event in progress, not until the busy thread stops."""
    jsonl = tmp_path / "m.jsonl"
    done, started = threading.Event(), threading.Event()
    limit = 200_000  # seconds of back-to-back events: far past one event's wait, even when loaded
    emitted = 0

    def busy(logger: MetricLogger) -> None:
        nonlocal emitted
        while not done.is_set() and emitted < limit:
            logger.emit("outer_step", {"step": emitted})
            emitted += 1
            started.set()

    def other(logger: MetricLogger) -> None:
        started.wait()
        logger.emit("checkpoint", {"step": -1})
        done.set()

    with MetricLogger(file=tmp_path / "train.log", json_file=jsonl, hooks=[]) as logger:
        threads = [
            threading.Thread(target=busy, args=(logger,)),
            threading.Thread(target=other, args=(logger,)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert emitted < limit, "the other thread's emit waited until the busy thread stopped"
    events = [record["event"] for record in read_jsonl(jsonl)]
    assert events.count("checkpoint") == 1
    assert len(events) == emitted + 1


INTERRUPTED_CHILD = (
    HELD_LOGGER
    + r"""
class Interrupted(Exception):
    pass

def handler(signum, frame):
    raise Interrupted

signal.signal(signal.SIGUSR1, handler)
holder.start()
held.wait()

def helper():
    until_main_waits()
    signal.pthread_kill(main, signal.SIGUSR1)

threading.Thread(target=helper).start()
calling.set()
try:
    logger.emit("waiting", {})
except Interrupted:
    print("interrupted")
release.set()
holder.join()

def others(n):
    for step in range(n):
        logger.emit("outer_step", {"step": step})

workers = [threading.Thread(target=others, args=(500,)) for _ in range(2)]
for worker in workers:
    worker.start()
others(500)
for worker in workers:
    worker.join()
logger.close()
print("done")
"""
)


def test_an_emit_interrupted_while_it_waits_for_another_thread_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    """A signal handler that raises in a thread waiting for the logger (another thread is inside
    emit): that emit raises and writes nothing, the logger is not left held, and three threads then
    emit 1,500 events between them and the logger closes (a lock left held would hang them past the
    60 s timeout)."""
    jsonl = tmp_path / "m.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_CHILD, str(jsonl)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["interrupted", "done"]
    events = [record["event"] for record in read_jsonl(jsonl)]
    assert "waiting" not in events
    assert events.count("hold") == 1
    assert events.count("outer_step") == 1_500
