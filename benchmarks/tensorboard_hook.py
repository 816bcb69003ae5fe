"""What the default ``TensorboardHook()`` adds to a training step, against synchronous ``SummaryWriter``.

    python benchmarks/tensorboard_hook.py [--rounds N] [--steps N] [--step-ms MS] [--work sleep|numpy|python]

A training step is modelled by work that releases the GIL, as a step waiting on the accelerator does:
``time.sleep(step_ms)`` (default) or one numpy matrix product of about that length (which also keeps
a core or more busy, as the BLAS threads do). ``--work python`` holds the GIL through the step instead,
as a training loop busy in Python does: there the writer thread's work competes with training, and
``process=True`` is the variant to compare. Each variant runs the
same steps, in interleaved rounds (the order rotates), and logs one ``train_step`` per step:

- ``bare``: the step alone (the baseline every other variant is measured against);
- ``SummaryWriter``: ``torch.utils.tensorboard.SummaryWriter.add_scalar`` for each value the hook
  writes, on the training thread (what a user would write without speedtronic);
- ``TensorboardHook()``: the default hook's ``on_event`` with the same payload;
- ``TensorboardHook(process=True)``: the same, the event file written by a child process.

"Added" is a variant's wall time per step minus ``bare``'s in the same round. The ratio printed is the
median over rounds of hook-added / SummaryWriter-added; issue 13's goal for the default hook is ≤ 0.25.
Writing what is still queued after the loop (``flush``) is timed apart: it happens while training
goes on, not in a step. No variant may drop an event (checked).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from speedtronic.integrations import TensorboardHook

PAYLOAD: dict[str, Any] = {
    "loss": 2.345678, "lr": 0.000975, "grad_norm": 0.5743, "samples_per_s": 27090.5,
    "tokens_per_s": 433440.25, "samples": 64_000, "tokens": 1_024_000, "microbatches": 4,
    "memory_bytes": 1_234_567_890, "elapsed_s": 12.5,
}
"""A ``train_step`` payload as the logger delivers it to hooks (values already Python numbers)."""

WRITTEN = TensorboardHook.DEFAULT_EVENTS["train_step"] or ()
"""The keys the default hook writes for a train_step; SummaryWriter gets the same ones."""


def make_work(kind: str, step_s: float) -> Callable[[], None]:
    """One step: a sleep, one numpy matrix product (one call, the GIL released throughout), or a
    Python loop (the GIL held throughout: not the model the goal is set for, shown for comparison)."""
    if kind == "sleep":
        return lambda: time.sleep(step_s)
    if kind == "python":

        start, spins = time.perf_counter(), 100_000
        for _ in range(spins):
            pass
        spins = max(1, round(spins * step_s / (time.perf_counter() - start)))

        def busy() -> None:  # a fixed amount of Python work, not a deadline: time lost to others shows
            for _ in range(spins):
                pass

        return busy
    import numpy as np

    size = 64
    while True:  # the smallest square product that takes a step's time
        matrix = np.random.default_rng(0).random((size, size))
        start = time.perf_counter()
        np.matmul(matrix, matrix)
        if time.perf_counter() - start >= step_s or size >= 8192:
            break
        size = int(size * 1.25)

    def work() -> None:
        np.matmul(matrix, matrix)

    return work


def bare(step: int, payload: dict[str, Any]) -> None:
    """No logging: the baseline."""


def run(work: Callable[[], None], steps: int, log: Callable[[int, dict[str, Any]], None]) -> float:
    """Seconds per step of ``steps`` steps: ``work()``, then the step's payload to ``log``.

    Every variant builds the payload (a trainer has its metrics in hand either way), so the variants
    differ only in the logging call.
    """
    start = time.perf_counter()
    for step in range(1, steps + 1):
        work()
        log(step, {"step": step, **PAYLOAD})
    return (time.perf_counter() - start) / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--step-ms", type=float, default=1.0)
    parser.add_argument("--work", choices=("sleep", "numpy", "python"), default="sleep")
    args = parser.parse_args()
    from torch.utils.tensorboard import SummaryWriter

    work = make_work(args.work, args.step_ms / 1000)
    names = ["bare", "SummaryWriter", "TensorboardHook()", "TensorboardHook(process=True)"]
    added: dict[str, list[float]] = {name: [] for name in names[1:]}
    flushed: dict[str, list[float]] = {name: [] for name in names[1:]}
    ratios: dict[str, list[float]] = {name: [] for name in names[2:]}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            order = names[round_ % len(names):] + names[: round_ % len(names)]
            per_step: dict[str, float] = {}
            for name in order:
                log_dir = Path(tmp) / f"{round_}-{len(per_step)}"
                if name == "bare":
                    per_step[name] = run(work, args.steps, bare)
                    continue
                if name == "SummaryWriter":
                    writer = SummaryWriter(str(log_dir))

                    def add_scalars(step: int, payload: dict[str, Any], writer: Any = writer) -> None:
                        for key in WRITTEN:
                            writer.add_scalar(f"train_step/{key}", payload[key], step)

                    per_step[name] = run(work, args.steps, add_scalars)
                    start = time.perf_counter()
                    writer.flush()
                    flushed[name].append(time.perf_counter() - start)
                    writer.close()
                    continue
                hook = TensorboardHook(log_dir, process="process" in name)

                def on_event(step: int, payload: dict[str, Any], hook: TensorboardHook = hook) -> None:
                    hook.on_event("train_step", payload)

                per_step[name] = run(work, args.steps, on_event)
                start = time.perf_counter()
                hook.flush()
                flushed[name].append(time.perf_counter() - start)
                hook.close()
                if hook.dropped:
                    sys.exit(f"{name} dropped {hook.dropped} events: the comparison is void")
            for name in names[1:]:
                added[name].append(per_step[name] - per_step["bare"])
            for name in names[2:]:
                ratios[name].append(added[name][-1] / added["SummaryWriter"][-1])

    print(f"{args.rounds} rounds x {args.steps} steps of {args.work} {args.step_ms} ms; "
          f"{len(WRITTEN)} scalars per step ({', '.join(WRITTEN)})")
    print(f"{'variant':32} {'added per step':>16} {'flush after loop':>18} {'ratio (median)':>16}")
    for name in names[1:]:
        ratio = f"{statistics.median(ratios[name]):.3f}" if name in ratios else "1"
        print(f"{name:32} {statistics.median(added[name]) * 1e6:13.1f} µs "
              f"{statistics.median(flushed[name]) * 1e3:15.1f} ms {ratio:>16}")
    print("goal (issue 13): TensorboardHook() ratio <= 0.25")
    return 0


if __name__ == "__main__":
    sys.exit(main())
