"""A short run into Weights & Biases, offline: no account, no network; `wandb sync` uploads it later."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

from speedtronic.integrations import WandbHook
from speedtronic.profiling import MetricLogger


def main(run_dir: Path = Path("runs/wandb_offline")) -> int:
    os.environ.setdefault("WANDB_MODE", "offline")
    run_dir.mkdir(parents=True, exist_ok=True)
    hook = WandbHook(project="speedtronic-examples", dir=str(run_dir), config={"lr": 3e-4})
    with MetricLogger(json_file=run_dir / "metrics.jsonl", every_steps=10, hooks=[hook]) as logger:
        logger.emit("train_start", {"start_step": 0, "target_step": 50})
        for step in range(1, 51):
            logger.emit("train_step", {"step": step, "loss": round(2.0 * math.exp(-step / 20), 4)})
            if step % 25 == 0:  # an outer-loop event between train steps: W&B keeps it, at this step
                logger.emit("outer_step", {"outer_step": step // 25, "deltas_included": 2})
        logger.emit("train_end", {"step": 50})
    # The logger closed the hook, which finished the run (exit code 0: train_end was seen).
    print(f"W&B run in {Path(hook.run.dir).parent}; upload it with: wandb sync {Path(hook.run.dir).parent}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(*(Path(arg) for arg in sys.argv[1:2])))
