"""emit from many threads at once: no interleaving, no loss, order per thread, hooks serial."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from speedtronic.profiling import MetricLogger
from tests.conftest import read_jsonl

THREADS = 8
EVENTS = 2_000


class ConcurrencyProbe:
    """A deliberately thread-unsafe hook that notices if two calls ever overlap."""

    def __init__(self) -> None:
        self.active = 0
        self.overlaps = 0
        self.count = 0

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self.active += 1
        if self.active > 1:
            self.overlaps += 1
        self.count += 1
        for _ in range(20):  # widen the window a race would need
            pass
        self.active -= 1


def test_many_threads(tmp_path: Path) -> None:
    """8 threads x 2,000 events: exact counts, every line parses, per-thread order, hooks serial."""
    probe = ConcurrencyProbe()
    text, jsonl = tmp_path / "train.log", tmp_path / "metrics.jsonl"
    start = threading.Barrier(THREADS)

    def worker(thread: int, logger: MetricLogger) -> None:
        start.wait()
        for i in range(EVENTS):
            blob = "x" * (10 + (i * 37 % 2_000))
            event = "outer_step" if thread % 2 else "train_step"
            logger.emit(event, {"step": i, "thread": thread, "blob": blob})

    with MetricLogger(file=text, json_file=jsonl, hooks=[probe]) as logger:
        threads = [threading.Thread(target=worker, args=(t, logger)) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    records = read_jsonl(jsonl)
    assert len(records) == THREADS * EVENTS
    for t in range(THREADS):
        assert [r["step"] for r in records if r["thread"] == t] == list(range(EVENTS))
    lines = text.read_text("utf-8").splitlines()
    assert len(lines) == THREADS * EVENTS
    assert all(" | INFO | " in line and line.endswith('"') is False for line in lines)
    assert probe.count == THREADS * EVENTS
    assert probe.overlaps == 0
