"""Emit after close, and close racing emits from other threads: whole record or LoggerClosedError."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from speedtronic import LoggerClosedError
from speedtronic.profiling import MetricLogger
from tests.reliability.conftest import read_records

THREADS = 6


class Journal:
    """Journals every call, close included, so the test can see nothing arrives after close."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self.calls.append((payload["thread"], payload["step"]))

    def close(self) -> None:
        self.calls.append("close")


@pytest.mark.parametrize("seed", range(8))
def test_close_racing_emits(seed: int, tmp_path: Path) -> None:
    """6 threads emit until close() lands: each emit that returned is on disk and hooked, whole;
    every other raised LoggerClosedError; nothing reaches a file or hook after close."""
    text, jsonl = tmp_path / "t.log", tmp_path / "m.jsonl"
    hook = Journal()
    logger = MetricLogger(file=text, json_file=jsonl, hooks=[hook])
    returned: dict[int, list[int]] = {t: [] for t in range(THREADS)}
    refused: dict[int, int] = dict.fromkeys(range(THREADS), 0)
    start = threading.Barrier(THREADS + 1)

    def worker(thread: int) -> None:
        start.wait()
        step = 0
        while True:
            try:
                logger.emit("train_step", {"thread": thread, "step": step, "blob": "b" * (step % 3000)})
            except LoggerClosedError:
                refused[thread] += 1
                if refused[thread] == 3:  # a few more tries after close: all refused
                    return
            else:
                returned[thread].append(step)
            step += 1

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    start.wait()
    time.sleep(random.Random(seed).uniform(0.001, 0.02))
    logger.close()
    sizes = (text.stat().st_size, jsonl.stat().st_size)
    for thread in threads:
        thread.join()

    assert (text.stat().st_size, jsonl.stat().st_size) == sizes  # nothing written after close
    records = [r for r in read_records(jsonl) if r["event"] == "train_step"]
    for t in range(THREADS):
        assert [r["step"] for r in records if r["thread"] == t] == returned[t]
    assert hook.calls[-1] == "close"
    assert sorted(hook.calls[:-1]) == sorted((t, s) for t in range(THREADS) for s in returned[t])
    assert len(text.read_bytes().splitlines()) == len(records)


def test_emit_after_close_reopens_nothing(tmp_path: Path) -> None:
    """After close, emit raises LoggerClosedError and a removed file is not created again."""
    text, jsonl = tmp_path / "t.log", tmp_path / "m.jsonl"
    logger = MetricLogger(file=text, json_file=jsonl)
    logger.emit("a", {})
    logger.close()
    text.unlink()
    jsonl.unlink()
    with pytest.raises(LoggerClosedError):
        logger.emit("b", {})
    assert not text.exists()
    assert not jsonl.exists()
