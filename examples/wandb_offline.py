"""A short run into Weights & Biases, offline: no account, no network; `wandb sync` uploads it later."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

from speedtronic.integrations import WandbHook
from speedtronic.profiling import MetricLogger

BATCH, SEQ_LEN = 32, 16  # sequences per step, tokens per sequence


def main(run_dir: Path = Path("runs/wandb_offline")) -> int:
    os.environ.setdefault("WANDB_MODE", "offline")
    run_dir.mkdir(parents=True, exist_ok=True)
    hook = WandbHook(project="speedtronic-examples", dir=str(run_dir), config={"lr": 3e-4})
    with MetricLogger(json_file=run_dir / "metrics.jsonl", every_steps=10, hooks=[hook]) as logger:
        logger.emit(
            "train_start",
            {
                "start_step": 0,
                "target_step": 50,
                "device": "cpu",
                "precision": "fp32",
                "grad_accum": 1,
                "parameters": 6_240,
            },
        )
        start = time.perf_counter()
        for step in range(1, 51):
            loss = round(2.0 * math.exp(-step / 20), 4)
            seconds = max(time.perf_counter() - start, 1e-9)
            logger.emit(
                "train_step",
                {
                    "step": step,
                    "loss": loss,
                    "lr": 3e-4,
                    "samples": step * BATCH,
                    "tokens": step * BATCH * SEQ_LEN,
                    "microbatches": 1,
                    "samples_per_s": step * BATCH / seconds,
                    "tokens_per_s": step * BATCH * SEQ_LEN / seconds,
                },
            )
            if step % 25 == 0:  # an outer-loop event between train steps: W&B keeps it, at this step
                logger.emit("outer_step", {"outer_step": step // 25, "candidates": 2, "included": 2})
        logger.emit(
            "train_end",
            {"step": 50, "steps_run": 50, "duration_s": time.perf_counter() - start, "final_loss": loss},
        )
    # The logger closed the hook, which finished the run (exit code 0: train_end was seen).
    print(
        f"W&B run in {Path(hook.run.dir).parent}; upload it with: wandb sync {Path(hook.run.dir).parent}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(*(Path(arg) for arg in sys.argv[1:2])))
