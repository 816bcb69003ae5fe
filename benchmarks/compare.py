"""The `speedtronic compare --max-regression` gate on synthetic runs with realistic noise.

    python benchmarks/compare.py            # the two goals, PASS or MISS
    python benchmarks/compare.py --check    # the same; exits 1 if a goal is missed

Each synthetic run has 300 steps of a 100 ms step: lognormal noise (sigma 5%), 1% of steps 2-4x
longer (a GC pause, a data stall), and a 5-step warm-up 3x slower. Each run is written as a real
JSONL file by ``MetricLogger`` and read back by ``run_health``, as `compare` does, then gated by
``slowdown`` at 5%. Goals (issue 48): 0 false regressions over 20 clean pairs (different seeds),
and a 10% step-time slowdown caught in at least 95% of 100 trials. Deterministic: seeded noise and
a seeded bootstrap, so the figures are the same on any machine and load.
"""

from __future__ import annotations

import argparse
import io
import random
import sys
import tempfile
import time
from pathlib import Path

from speedtronic.profiling import MetricLogger
from speedtronic.runs.health import run_health, slowdown

LIMIT = 0.05
STEPS = 300


def write_run(path: Path, seed: int, factor: float = 1.0) -> Path:
    rng = random.Random(seed)
    with MetricLogger(stream=io.StringIO(), json_file=path) as logger:
        logger.emit("train_start", {"start_step": 0, "target_step": STEPS, "device": "cuda:0"})
        for step in range(1, STEPS + 1):
            took = 0.1 * factor * rng.lognormvariate(0, 0.05)
            if step <= 5:
                took *= 3
            elif rng.random() < 0.01:
                took *= rng.uniform(2, 4)
            logger.emit(
                "train_step", {"step": step, "loss": 1.0, "step_time_s": took, "tokens_per_s": 8192 / took}
            )
    return path


def regressed(a: Path, b: Path) -> bool:
    base, other = run_health(a), run_health(b)
    found = [
        slowdown("step time", base.step_times, other.step_times),
        slowdown("tokens/s", base.rates, other.rates, higher_is_better=True),
    ]
    return any(item is not None and item.regressed(LIMIT) for item in found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a goal is missed")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        false = sum(
            regressed(
                write_run(folder / f"clean{pair}a.jsonl", 2 * pair),
                write_run(folder / f"clean{pair}b.jsonl", 2 * pair + 1),
            )
            for pair in range(20)
        )
        caught = sum(
            regressed(
                write_run(folder / f"slow{trial}a.jsonl", 1000 + 2 * trial),
                write_run(folder / f"slow{trial}b.jsonl", 1001 + 2 * trial, 1.10),
            )
            for trial in range(100)
        )
    ok_false, ok_caught = false == 0, caught >= 95
    print(
        f"compare --max-regression 5% ({STEPS}-step synthetic runs, {time.perf_counter() - started:.1f} s):"
    )
    print(f"  {'PASS' if ok_false else 'MISS'}  false regressions over 20 clean pairs: {false} (goal 0)")
    print(f"  {'PASS' if ok_caught else 'MISS'}  10% slowdown caught: {caught} of 100 (goal >= 95)")
    return 1 if args.check and not (ok_false and ok_caught) else 0


if __name__ == "__main__":
    sys.exit(main())
