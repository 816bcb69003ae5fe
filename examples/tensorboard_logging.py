"""A short run into TensorBoard event files: `tensorboard --logdir runs/tensorboard` shows it.

The default ``TensorboardHook()`` writes every number of every event a run has many of as the tag
``<event>/<key>`` (``train_step/loss``, ``eval/val_loss``...), at the event's ``step``; a one-off
event's values (``train_start``, ``train_end``) go to the Text dashboard (``train_end/values``);
pass ``skip=`` to leave keys out, or ``events=`` to choose what is written.

(Not named tensorboard.py: run as a script, that file would shadow the tensorboard package.)
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from speedtronic.integrations import TensorboardHook
from speedtronic.profiling import MetricLogger

BATCH, SEQ_LEN = 32, 16  # sequences per step, tokens per sequence


def main(log_dir: Path = Path("runs/tensorboard")) -> int:
    with MetricLogger(every_steps=10, hooks=[TensorboardHook(log_dir)]) as logger:
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
                    "loss": loss,
                    "lr": 3e-4,
                    "samples": step * BATCH,
                    "tokens": step * BATCH * SEQ_LEN,
                    "microbatches": 1,
                    "samples_per_s": step * BATCH / seconds,
                    "tokens_per_s": step * BATCH * SEQ_LEN / seconds,
                },
            )
            if step % 25 == 0:
                logger.emit("eval", {"step": step, "val_loss": loss * 1.1})
        logger.emit(
            "train_end",
            {"step": 50, "steps_run": 50, "duration_s": time.perf_counter() - start, "final_loss": loss},
        )
    # Closing the logger closed the hook: every point is in the event file now.
    print(f"view it with: tensorboard --logdir {log_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(*(Path(arg) for arg in sys.argv[1:2])))
