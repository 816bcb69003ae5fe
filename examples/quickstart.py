"""A realistic run's events through a MetricLogger: text on stdout, JSONL under runs/quickstart/."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from speedtronic.profiling import MetricLogger

BATCH, SEQ_LEN = 32, 16  # sequences per step, tokens per sequence


def main(run_dir: Path = Path("runs/quickstart")) -> int:
    """Each payload carries what speedtronic.events lists for its event (docs/events.md)."""
    losses: list[float] = []
    with MetricLogger(json_file=run_dir / "metrics.jsonl", every_steps=10) as logger:
        logger.hooks.append(lambda event, payload: losses.append(payload.get("loss", math.nan)))
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
            loss = 2.0 * math.exp(-step / 20)
            seconds = max(time.perf_counter() - start, 1e-9)
            logger.emit(
                "train_step",
                {
                    "step": step,
                    "loss": round(loss, 4),
                    "lr": 3e-4,
                    "samples": step * BATCH,
                    "tokens": step * BATCH * SEQ_LEN,
                    "microbatches": 1,
                    "samples_per_s": step * BATCH / seconds,
                    "tokens_per_s": step * BATCH * SEQ_LEN / seconds,
                },
            )
        logger.emit("checkpoint", {"step": 50, "path": str(run_dir / "step_50.pt")})
        logger.emit(
            "train_end",
            {
                "step": 50,
                "steps_run": 50,
                "duration_s": time.perf_counter() - start,
                "final_loss": round(loss, 4),
            },
        )
    print(f"wrote {run_dir / 'metrics.jsonl'}; the hook saw {len(losses)} events", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
