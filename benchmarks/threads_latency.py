"""How long an occasional ``emit`` waits while other threads keep the logger busy.

    python benchmarks/threads_latency.py              # 2 s a case
    python benchmarks/threads_latency.py --seconds 5

One thread emits every 10 ms while, in turn, one thread emits with 200 µs and then 20 µs of Python
work between its events (the GIL held, as a Python-heavy loop holds it), and three threads emit back
to back. Printed: the occasional ``emit``'s median, 99th percentile and longest time. It is the other
side of ``bench.py``'s threads goal: a way of waiting for the logger's lock that raises four threads'
throughput can make this wait far longer (docs/performance.md, "Four threads, one lock").
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from speedtronic.profiling import MetricLogger


def occasional_waits(directory: Path, busy: int, work_s: float, seconds: float) -> list[float]:
    """The times of an ``emit`` made every 10 ms for ``seconds`` while ``busy`` threads emit, each
    doing ``work_s`` of Python work between its events."""
    logger = MetricLogger(file=directory / "t.log", json_file=directory / "m.jsonl", hooks=[])
    stop = threading.Event()

    def keep_busy() -> None:
        step = 0
        while not stop.is_set():
            logger.emit("train_step", {"step": step, "loss": 1.0})
            step += 1
            until = time.perf_counter() + work_s
            while time.perf_counter() < until:
                pass

    threads = [threading.Thread(target=keep_busy) for _ in range(busy)]
    for thread in threads:
        thread.start()
    waits: list[float] = []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            start = time.perf_counter()
            logger.emit("checkpoint", {"step": len(waits)})
            waits.append(time.perf_counter() - start)
            time.sleep(0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        logger.close()
    return sorted(waits)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds a case (default 2)")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")  # fmt: skip
    cases = [
        ("1 thread, 200 µs of work between events", 1, 200e-6),
        ("1 thread, 20 µs of work between events", 1, 20e-6),
        ("3 threads emitting back to back", 3, 0.0),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for n, (name, busy, work_s) in enumerate(cases):
            directory = Path(tmp) / str(n)
            directory.mkdir()
            waits = occasional_waits(directory, busy, work_s, args.seconds)
            p99 = waits[min(len(waits) - 1, int(len(waits) * 0.99))]
            print(
                f"  {name:42} an emit every 10 ms waits {statistics.median(waits) * 1e3:7.2f} ms "
                f"(p99 {p99 * 1e3:.2f}, longest {waits[-1] * 1e3:.2f}; {len(waits)} emits)"
            )


if __name__ == "__main__":
    main()
