"""emit from many threads at once: no interleaving, no loss, order per thread, hooks serial."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from speedtronic.profiling import MetricLogger
from tests.conftest import read_jsonl

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


WAITING_CHILD = r"""
import os, signal, sys, threading, time
from speedtronic.profiling import MetricLogger

logger = MetricLogger(stream=open(os.devnull, "w"), json_file=sys.argv[1], hooks=[])
held, release = threading.Event(), threading.Event()

def hold(event, payload):
    if event == "hold":
        held.set()
        release.wait()

logger.hooks.append(hold)
in_handler = threading.Event()

def handler(signum, frame):
    in_handler.set()
    logger.emit("from_handler", {})  # its thread already waits for the logger's lock

signal.signal(signal.SIGUSR1, handler)
holder = threading.Thread(target=logger.emit, args=("hold", {}))
holder.start()
held.wait()
main = threading.get_ident()
state = f"/proc/self/task/{threading.main_thread().native_id}/stat"
calling = threading.Event()

def helper():
    calling.wait()
    while open(state).read().rpartition(")")[2].split()[0] != "S":  # until it sleeps on the lock
        time.sleep(0)
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
