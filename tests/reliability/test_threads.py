"""Many threads emitting at once, with payloads from 10 bytes to 20 KB: nothing lost or interleaved."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

from speedtronic.profiling import MetricLogger
from tests.reliability.conftest import read_records

THREADS = 8
EVENTS = 1_000


def blob_size(rng: random.Random) -> int:
    """10 B to 20 KB, log-uniform: mostly small records, every size class present."""
    return int(10 * 2_000 ** rng.random())


class OverlapProbe:
    """A thread-unsafe hook that notices if two calls ever overlap, yielding the GIL to invite it."""

    def __init__(self) -> None:
        self.active = 0
        self.overlaps = 0
        self.seen: list[tuple[int, int]] = []

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self.active += 1
        if self.active > 1:
            self.overlaps += 1
        if payload["step"] % 50 == 0:
            time.sleep(0)  # hand the GIL to another thread mid-call
        self.seen.append((payload["thread"], payload["step"]))
        self.active -= 1


class TestManyThreads:
    def test_exact_counts_order_and_serial_hooks(self, tmp_path: Path) -> None:
        """8 threads x 1,000 events of 10 B-20 KB: N x M whole records, per-thread order, hooks serial."""
        probes = [OverlapProbe(), OverlapProbe()]
        text, jsonl = tmp_path / "train.log", tmp_path / "metrics.jsonl"
        start = threading.Barrier(THREADS)
        sizes: dict[int, list[int]] = {}

        def worker(thread: int, logger: MetricLogger) -> None:
            rng = random.Random(thread)
            sizes[thread] = [blob_size(rng) for _ in range(EVENTS)]
            start.wait()
            for step, size in enumerate(sizes[thread]):
                logger.emit("train_step", {"step": step, "thread": thread, "blob": "x" * size})

        with MetricLogger(file=text, json_file=jsonl, hooks=probes) as logger:
            threads = [threading.Thread(target=worker, args=(t, logger)) for t in range(THREADS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert logger.write_errors == 0

        assert max(max(s) for s in sizes.values()) > 15_000  # the large end was exercised
        records = read_records(jsonl)
        assert len(records) == THREADS * EVENTS
        for t in range(THREADS):
            mine = [r for r in records if r["thread"] == t]
            assert [r["step"] for r in mine] == list(range(EVENTS))
            assert [len(r["blob"]) for r in mine] == sizes[t]
        lines = text.read_bytes().split(b"\n")
        assert lines.pop() == b""
        assert len(lines) == THREADS * EVENTS
        assert all(b" | INFO | train_step step=" in line for line in lines)
        for probe in probes:
            assert probe.overlaps == 0
            assert len(probe.seen) == THREADS * EVENTS
            for t in range(THREADS):
                assert [s for th, s in probe.seen if th == t] == list(range(EVENTS))
