"""Four threads' throughput over one thread's for a reference loop making emit's system calls.

    python benchmarks/threads_reference.py            # 9 interleaved rounds
    python benchmarks/threads_reference.py --rounds 15

Each event is what ``MetricLogger.emit`` asks of the kernel with default options, and nothing else:
a ``poll(2)`` and a ``write(2)`` of a text line, a ``poll(2)`` and a ``write(2)`` of a JSONL line
(both pre-formatted), under one lock. Two ways of waiting for the lock are measured in turns:
sleeping on it (``threading.Lock`` and ``RLock``, as ``emit`` does) and backing off (try, then sleep
50 µs doubling to 5 ms: the scheme measured and not kept, as it makes an occasional emit wait behind
a busy thread). What four threads lose here is what waiting costs any Python code making those
system calls, before any work of speedtronic's: ``bench.py``'s threads goal is read against it
(docs/performance.md, "Four threads, one lock").
"""

from __future__ import annotations

import argparse
import os
import select
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import thread_throughput  # the same four-threads-over-one measure as bench.py's goal

TEXT = b"2026-01-01 12:00:00 | INFO | train_step step=1 loss=1.2 lr=0.0003 grad_norm=0.5\n"
JSON = b'{"event":"train_step","step":1,"loss":1.2,"lr":0.0003,"timestamp":"2026-01-01T12:00:00.000000Z"}\n'


def reference(directory: Path, waiting: str) -> Callable[[dict[str, Any]], None]:
    """One event's system calls under a lock, called as ``bench.py``'s emits are (its payload, built
    per event by the caller, is not read); ``waiting``: ``lock``, ``rlock`` or ``backoff``."""
    text = os.open(directory / f"{waiting}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    jsonl = os.open(directory / f"{waiting}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    quiet, _ = os.pipe()  # nothing is ever written: each poll finds no event, as inotify's mostly do
    polls = [select.poll(), select.poll()]
    for poller in polls:
        poller.register(quiet, select.POLLIN)
    first, second = polls[0].poll, polls[1].poll

    def calls() -> None:
        first(0)
        os.write(text, TEXT)
        second(0)
        os.write(jsonl, JSON)

    lock = threading.RLock() if waiting == "rlock" else threading.Lock()
    if waiting != "backoff":

        def sleeping(payload: dict[str, Any]) -> None:
            with lock:
                calls()

        return sleeping

    def backoff(payload: dict[str, Any]) -> None:
        delay = 5e-5
        while not lock.acquire(blocking=False):
            time.sleep(delay)
            delay = min(delay * 2, 5e-3)
        try:
            calls()
        finally:
            lock.release()

    return backoff


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds (default 9)")
    parser.add_argument("--events", type=int, default=20_000, help="events per thread count and round")
    args = parser.parse_args()
    kinds = ["lock", "rlock", "backoff"]
    ratios: dict[str, list[float]] = {kind: [] for kind in kinds}
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        events = {kind: reference(Path(tmp), kind) for kind in kinds}
        for round_ in range(args.rounds):
            for kind in kinds[round_ % 3 :] + kinds[: round_ % 3]:
                ratios[kind].append(thread_throughput(events[kind], args.events))
    for kind, values in ratios.items():
        print(f"  {kind:8} {statistics.median(values):.2f}x  (4 threads' throughput / 1 thread's)")


if __name__ == "__main__":
    main()
