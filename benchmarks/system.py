"""What ``SystemMonitor`` costs the training thread: a training-like loop with the sampler off and on.

    python benchmarks/system.py               # 7 interleaved rounds of 2,000 steps
    python benchmarks/system.py --quick       # 3 rounds of 500 steps

Each step does a fixed piece of CPU work (a small matrix product in pure Python, holding the GIL like
an interpreter-bound training step does) and emits ``train_step`` into a ``MetricLogger`` writing its
JSONL to a temporary file. Rounds alternate off / on, so load drifts hit both alike; the figures are
medians of the rounds' per-step times on the training thread, and the ratio on/off of those medians.
The sampler runs at ``--interval`` (default 0.01 s: a thousand times its default rate of one sample
per 10 s, so its share shows above the noise). Also printed: what one ``sample()`` costs on the
thread that takes it (the work the monitor keeps off the training thread), and the load average.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile
import time
from pathlib import Path

from speedtronic.integrations.system import SystemMonitor
from speedtronic.profiling import MetricLogger


def work(size: int = 24) -> float:
    """A fixed CPU-bound step: one ``size`` x ``size`` matrix product in pure Python."""
    a = [[(i * size + j) % 7 / 7 for j in range(size)] for i in range(size)]
    total = 0.0
    for row in a:
        for j in range(size):
            total += sum(row[k] * a[k][j] for k in range(size))
    return total


def round_time(steps: int, interval_s: float | None, directory: Path, index: int) -> float:
    """Seconds per step on this (the training) thread, with the sampler on at ``interval_s`` or off."""
    jsonl = directory / f"round{index}.jsonl"
    with MetricLogger(stream=io.StringIO(), json_file=jsonl, every_steps=1) as logger:
        monitor = SystemMonitor(logger, interval_s, gpus=False) if interval_s else None
        if monitor is not None:
            monitor.start()
        try:
            started = time.perf_counter()
            for step in range(1, steps + 1):
                loss = work()
                logger.emit("train_step", {"step": step, "loss": loss})
            elapsed = time.perf_counter() - started
        finally:
            if monitor is not None:
                monitor.close()
    return elapsed / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--interval", type=float, default=0.01)
    args = parser.parse_args()
    rounds, steps = (3, 500) if args.quick else (7, 2000)
    off: list[float] = []
    on: list[float] = []
    with tempfile.TemporaryDirectory() as directory:
        for index in range(rounds):
            off.append(round_time(steps, None, Path(directory), 2 * index))
            on.append(round_time(steps, args.interval, Path(directory), 2 * index + 1))
        with MetricLogger(stream=io.StringIO()) as logger:
            monitor = SystemMonitor(logger, gpus=True)
            samples = []
            for _ in range(200):
                started = time.perf_counter()
                monitor.sample()
                samples.append(time.perf_counter() - started)
    median_off, median_on = statistics.median(off), statistics.median(on)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print(f"{rounds} rounds of {steps} steps; sampler every {args.interval:g} s when on")
    for name, median, times in (("off", median_off, off), ("on: ", median_on, on)):
        each = ", ".join(f"{x * 1e6:.0f}" for x in times)
        print(f"per step, sampler {name} {median * 1e6:8.1f} us (rounds {each})")
    print(f"ratio on/off: {median_on / median_off:.3f}")
    print(f"one sample() on its own thread: {statistics.median(samples) * 1e6:.1f} us (median of 200)")


if __name__ == "__main__":
    main()
