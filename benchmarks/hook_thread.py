"""What the hook thread costs a pure-Python training loop, and where that cost comes from.

    python benchmarks/hook_thread.py [--rounds N]

Three loggers with one no-op hook, side by side in interleaved rounds (as in ``bench.py``):

- hooks inside ``emit`` (``background_hooks=False``);
- hooks on the hook thread (the default);
- hooks inside ``emit`` through a hook that does the hook thread's work on the emitting thread:
  it keeps each event with a copy of the context and, every ``WAKE_BATCH`` events, delivers the
  batch, each inside its context.

The third one pays the hook thread's Python work without a second thread. The difference between
it and the second is what the thread itself costs: waiting for the GIL while the hook thread
drains a batch, waking each other, and caches that the other thread left cold.
"""

from __future__ import annotations

import argparse
import collections
import contextvars
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import PAYLOAD, noop_hook, ratio, rotated  # benchmarks/bench.py, beside this script

from speedtronic.hooks.background import WAKE_BATCH
from speedtronic.profiling import MetricLogger


class BatchOnThisThread:
    """Queues each event with a copy of its context; every WAKE_BATCH events, delivers them all."""

    def __init__(self) -> None:
        self.queue: collections.deque[tuple[contextvars.Context, str, dict[str, Any]]] = collections.deque()

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        queue = self.queue
        queue.append((contextvars.copy_context(), event, payload))
        if len(queue) >= WAKE_BATCH:
            while queue:
                context, queued, fields = queue.popleft()
                context.run(noop_hook, queued, fields)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--events", type=int, default=10_000)
    args = parser.parse_args()
    samples: dict[str, list[float]] = collections.defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        loggers = {
            "hooks inside emit": MetricLogger(
                file=d / "a.log", json_file=d / "a.jsonl", hooks=[noop_hook], background_hooks=False
            ),
            "hook thread (default)": MetricLogger(
                file=d / "b.log", json_file=d / "b.jsonl", hooks=[noop_hook]
            ),
            "its work, on the emitting thread": MetricLogger(
                file=d / "c.log", json_file=d / "c.jsonl", hooks=[BatchOnThisThread()], background_hooks=False
            ),
        }
        names = list(loggers)
        for r in range(args.rounds):
            for name in rotated(names, r):
                payloads = [dict(PAYLOAD, step=i) for i in range(args.events)]
                emit = loggers[name].emit
                t0 = time.perf_counter()
                for payload in payloads:
                    emit("train_step", payload)
                samples[name].append((time.perf_counter() - t0) / args.events * 1e6)
                loggers[name].flush()
        for logger in loggers.values():
            logger.close()
    print(
        f"µs per event, median of {args.rounds} rounds x {args.events:,} events "
        "(ratios: medians of the ratios within each round)"
    )
    for name, values in samples.items():
        extra = ratio(samples, name, "hooks inside emit") - 1
        print(f"  {name:34s} {statistics.median(values):7.2f}   {extra:+6.1%} vs hooks inside emit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
