"""What the default ``TensorboardHook()`` adds to a training step, against synchronous ``SummaryWriter``.

    python benchmarks/tensorboard_hook.py [--rounds N] [--steps N] [--python-ms MS] [--wait-ms MS]

A training step on an accelerator is Python work that holds the GIL (the framework dispatching
kernels) and a wait that releases it (the device working, then the sync). A sleep-only step hides
what a writer thread costs: its work fits in the sleep. So each variant runs two step models, the
goal's (issue 19):

- ``gil then wait``: ``--python-ms`` of Python work (the GIL held), then a ``--wait-ms`` sleep (the
  sync, the GIL released);
- ``native then python``: one numpy matrix product of about ``--wait-ms`` (native work releasing the
  GIL, and keeping a core busy as BLAS does), then ``--python-ms`` of Python work: the next step's
  calls, which need the GIL back from whichever thread took it meanwhile.

Each variant logs one ``train_step`` per step, in interleaved rounds (the order rotates):

- ``bare``: the step alone (the baseline every other variant is measured against);
- ``SummaryWriter``: ``torch.utils.tensorboard.SummaryWriter.add_scalar`` for each value the hook
  writes, on the training thread (what a user would write without speedtronic);
- ``TensorboardHook()``: the default hook's ``on_event`` with the same payload (a writer process);
- ``TensorboardHook(process=False)``: the same, the records built by the hook's writer thread.

"Added" is a variant's wall time per step minus ``bare``'s in the same round. The ratio printed is the
median over rounds of hook-added / SummaryWriter-added (and, beside it, the ratio of the medians);
the goal for the default hook is <= 0.25 on both models. On a shared machine, other processes' load
is noise of the same size as what is measured: run it quiet (or ``nice -n -5``), and with
``OPENBLAS_NUM_THREADS=1`` to leave the writer a core on a 2-core machine. Writing what is still
gathered after the loop (``flush``) is timed apart: it happens while training goes on, not in a
step. No variant may drop an event (checked).
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
    "loss": 2.345678,
    "lr": 0.000975,
    "grad_norm": 0.5743,
    "samples_per_s": 27090.5,
    "tokens_per_s": 433440.25,
    "samples": 64_000,
    "tokens": 1_024_000,
    "microbatches": 4,
    "memory_bytes": 1_234_567_890,
    "elapsed_s": 12.5,
}
"""A ``train_step`` payload as the logger delivers it to hooks (values already Python numbers)."""

WRITTEN = tuple(PAYLOAD)
"""The keys the default hook writes for a train_step (every number but step); SummaryWriter gets the
same ones."""

MODELS = ("gil then wait", "native then python")


def python_work(seconds: float) -> Callable[[], None]:
    """A fixed amount of Python work (the GIL held) taking about ``seconds`` alone: time lost to other
    threads shows as a longer step, as it would in a training loop."""
    start, spins = time.perf_counter(), 200_000
    for _ in range(spins):
        pass
    spins = max(1, round(spins * seconds / (time.perf_counter() - start)))

    def busy() -> None:
        for _ in range(spins):
            pass

    return busy


def native_work(seconds: float) -> Callable[[], None]:
    """One numpy matrix product (one call, the GIL released throughout) of about ``seconds``."""
    import numpy as np

    size = 32
    while True:  # the smallest square product that takes a step's time
        matrix = np.random.default_rng(0).random((size, size))
        start = time.perf_counter()
        np.matmul(matrix, matrix)
        if time.perf_counter() - start >= seconds or size >= 8192:
            break
        size = int(size * 1.25) + 1

    def work() -> None:
        np.matmul(matrix, matrix)

    return work


def make_step(model: str, python_s: float, wait_s: float) -> Callable[[], None]:
    busy = python_work(python_s)
    if model == "gil then wait":

        def step() -> None:
            busy()
            time.sleep(wait_s)

        return step
    native = native_work(wait_s)

    def native_step() -> None:
        native()
        busy()

    return native_step


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


def measure(work: Callable[[], None], args: argparse.Namespace, tmp: str, model: str) -> dict[str, Any]:
    """Interleaved rounds of every variant on one step model: added µs, flush ms and ratios."""
    from torch.utils.tensorboard import SummaryWriter

    names = ["bare", "SummaryWriter", "TensorboardHook()", "TensorboardHook(process=False)"]
    added: dict[str, list[float]] = {name: [] for name in names[1:]}
    flushed: dict[str, list[float]] = {name: [] for name in names[1:]}
    ratios: dict[str, list[float]] = {name: [] for name in names[2:]}
    for round_ in range(args.rounds):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        per_step: dict[str, float] = {}
        for name in order:
            log_dir = Path(tmp) / f"{model}-{round_}-{len(per_step)}"
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
            hook = TensorboardHook(log_dir, process="process=False" not in name)
            hook.flush()  # the writer process started: its start is not a step's cost

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
    return {"names": names, "added": added, "flushed": flushed, "ratios": ratios}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--python-ms", type=float, default=0.5, help="Python work per step (GIL held)")
    parser.add_argument("--wait-ms", type=float, default=1.0, help="sleep or native work per step")
    args = parser.parse_args()
    print(
        f"{args.rounds} rounds x {args.steps} steps of {args.python_ms} ms Python + {args.wait_ms} ms "
        f"wait; {len(WRITTEN)} scalars per step ({', '.join(WRITTEN)})"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for model in MODELS:
            work = make_step(model, args.python_ms / 1000, args.wait_ms / 1000)
            result = measure(work, args, tmp, model)
            print(f"\nstep model: {model}")
            print(
                f"{'variant':32} {'added per step':>16} {'flush after loop':>18} {'ratio (median)':>16} "
                f"{'of medians':>12}"
            )
            added = {name: statistics.median(values) for name, values in result["added"].items()}
            for name in result["names"][1:]:
                ratios = result["ratios"]
                ratio = f"{statistics.median(ratios[name]):.3f}" if name in ratios else "1"
                print(
                    f"{name:32} {added[name] * 1e6:13.1f} µs "
                    f"{statistics.median(result['flushed'][name]) * 1e3:15.1f} ms {ratio:>16} "
                    f"{added[name] / added['SummaryWriter']:12.3f}"
                )
    print("\ngoal (issue 19): TensorboardHook() ratio <= 0.25 on both step models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
