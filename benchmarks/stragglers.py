"""Stragglers' goal (issue 48) on real runs: 4 ranks of the reference trainer under torchrun on gloo.

    python benchmarks/stragglers.py            # every case, PASS or MISS per goal
    python benchmarks/stragglers.py --quick    # each case once, shorter runs (a smoke run)
    python benchmarks/stragglers.py --check    # the same as the first; exits 1 if a goal is missed

Cases: balanced; one rank slowed in data loading by 10% and by 30% of the balanced step time (a
``time.sleep`` before each batch it draws); one rank slowed in compute by 10% and 30% (a sleep in
its forward, a PyTorch forward pre-hook). The slowed rank changes from case to case and each case
is repeated. Each run's ``sync_wait_s`` is DDP's gradient sync timed by the trainer (docs/reading-
runs.md, *Stragglers*); the records are read back by ``speedtronic.runs.health.stragglers``, as
``speedtronic summarize --rank all --health`` does. Goals: the slowed rank is named in every slowed
run (and no other rank), no rank is named in a balanced run.

The slowing lives in this script, not in the library: ``--worker`` builds the run from a config as
``speedtronic train`` does (``build_runtime``), wraps one rank's data (``Trainer.data``) or hooks
its model's forward, then fits. Step times here are 4 processes sharing this machine's cores, so
the balanced step time is measured first (a balanced run's median) and the sleeps are shares of it.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench  # the Report and the machine line, beside this file

from speedtronic.runs.health import STRAGGLER_SCORE, Straggler, run_health, stragglers  # after bench's path

ROOT = Path(__file__).resolve().parents[1]
RANKS = 4
DEVICE_S = 0.06
"""Each forward's modelled accelerator time: a sleep, during which the host waits, as it would on
an accelerator. CPU-bound ranks sharing this machine's cores would absorb a slowdown (a rank that
sleeps frees a core for the others, so nobody waits for it): the harness keeps the host mostly idle."""


class SlowData:
    """``data``, each batch drawn ``seconds`` late: a rank slow in data loading."""

    def __init__(self, data: Iterable[Any], seconds: float) -> None:
        self.data, self.seconds = data, seconds

    def __iter__(self) -> Iterator[Any]:
        for batch in self.data:
            time.sleep(self.seconds)
            yield batch


def worker(config: Path, device_s: float, slow_rank: int, slow_in: str, seconds: float) -> None:
    """One rank of a harness run (under torchrun): the reference run, each forward ``device_s``
    longer (the accelerator's time), rank ``slow_rank`` ``seconds`` slower per batch."""
    import torch

    from speedtronic.training.from_config import build_runtime, fit_and_close

    torch.set_num_threads(1)
    trainer, info = build_runtime(config)
    forward_s = device_s
    if trainer.rank == slow_rank and slow_in == "data":
        trainer.data = SlowData(trainer.data, seconds)
    elif trainer.rank == slow_rank:
        forward_s += seconds
    if forward_s > 0:
        trainer.module.register_forward_pre_hook(lambda module, args: time.sleep(forward_s))
    fit_and_close(trainer, info)


def config(run_dir: Path, steps: int, seed: int) -> dict[str, Any]:
    """Every step logged (each one's ``sync_wait_s``), no checkpoint (the wrapped data has no state),
    no evaluation or system thread: the steps alone."""
    return {
        "run_dir": str(run_dir),
        "train": {
            "steps": steps,
            "seed": seed,
            "batch_size": 32,
            "device": "cpu",
            "checkpoint_every": 0,
            "eval_every": 0,
            "warmup_steps": 5,
        },
        "logging": {"every_steps": 1, "hooks": [], "system_interval_s": None},
    }


def run(folder: Path, name: str, steps: int, seed: int, slow: tuple[int, str, float] | None) -> Path:
    """A ``RANKS``-rank torchrun of ``worker``; ``slow``: (rank, "data" or "compute", seconds)."""
    run_dir = folder / name
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config(run_dir, steps, seed)))
    rank, slow_in, seconds = slow if slow is not None else (-1, "data", 0.0)
    command = [
        sys.executable,
        *("-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={RANKS}"),
        str(Path(__file__).resolve()),
        *("--worker", str(path), "--slow-rank", str(rank), "--slow-in", slow_in, "--slow-s", str(seconds)),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the harness run {name} failed:\n{done.stderr[-3000:]}")
    return run_dir


def scores(run_dir: Path) -> tuple[list[int], list[Straggler]]:
    """The ranks ``stragglers`` names, and every rank's score, highest first."""
    every = stragglers(run_dir, threshold=-math.inf)
    return [item.rank for item in every if item.score >= STRAGGLER_SCORE], every


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="each case once, shorter runs")
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--device-s", type=float, default=DEVICE_S, help=argparse.SUPPRESS)
    parser.add_argument("--slow-rank", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--slow-in", choices=("data", "compute"), default="data", help=argparse.SUPPRESS)
    parser.add_argument("--slow-s", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker, args.device_s, args.slow_rank, args.slow_in, args.slow_s)
        return 0
    steps, repeats = (40, 1) if args.quick else (60, 2)
    print(bench.machine())
    report = bench.Report()
    started = time.perf_counter()
    cases = [(slow_in, share) for slow_in in ("data", "compute") for share in (0.1, 0.3)]
    balanced: list[str] = []
    missed: list[str] = []
    causes = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        step = run_health(run(folder, "calibrate", steps, 99, None)).median_step_s or 0.0
        print(
            f"balanced step time {1000 * step:.1f} ms ({RANKS} ranks, gloo, CPU); a rank is named at a score"
        )
        print(f"of {STRAGGLER_SCORE} (the others wait for it {100 * STRAGGLER_SCORE:.0f}% of a step)")
        for repeat in range(repeats):
            name = f"balanced-{repeat}"
            named, ranks = scores(run(folder, name, steps, repeat, None))
            print(f"  {name:<19} named {named or 'none'}; highest score {ranks[0].score:.3f}")
            if named:
                balanced.append(f"{name} named {named}")
            for index, (slow_in, share) in enumerate(cases):
                rank = (index + repeat) % RANKS
                name = f"{slow_in}-{round(100 * share)}%-rank{rank}-{repeat}"
                named, ranks = scores(run(folder, name, steps, repeat, (rank, slow_in, share * step)))
                [slowed] = [item for item in ranks if item.rank == rank]
                others = max(item.score for item in ranks if item.rank != rank)
                print(
                    f"  {name:<19} named {named or 'none'}; rank {rank} score {slowed.score:.3f} "
                    f"({slowed.cause}), the others' highest {others:.3f}"
                )
                if named != [rank]:
                    missed.append(f"{name} named {named}")
                causes += slowed.cause == ("data loading" if slow_in == "data" else "compute")
    total = repeats * len(cases)
    print(f"({1 + repeats * (1 + len(cases))} runs of {steps} steps, {time.perf_counter() - started:.0f} s)")
    print(f"the cause (data loading or compute) right for the slowed rank in {causes} of {total} runs")
    report.goal(
        "slowed rank named (alone) in every slowed run",
        f"{total - len(missed)} of {total}" + (f"; {'; '.join(missed)}" if missed else ""),
        f"{total} of {total}",
        not missed,
    )
    report.goal(
        "no rank named in balanced runs",
        f"{repeats - len(balanced)} of {repeats} clean" + (f"; {'; '.join(balanced)}" if balanced else ""),
        f"{repeats} of {repeats}",
        not balanced,
    )
    return report.finish(args.check)


if __name__ == "__main__":
    sys.exit(main())
