"""What the reliability guarantees cost, per record (prints a table; asserts nothing).

    .venv/bin/python benchmarks/write_cost.py

- unbuffered: one os.write(2) per record on an O_APPEND fd (what LineFile does: a record reaches the
  OS before emit returns) vs a buffered file written without flushing (records sit in user space and
  die with the process) vs buffered and flushed per record (what a StreamHandler does);
- rotation check: one os.stat of the path vs the time.monotonic() gate LineFile pays per write;
- emit end to end, with redaction and the line cap on and off.
"""

from __future__ import annotations

import io
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

N = 100_000
LINE = (
    b'{"event":"train_step","step":12345,"loss":1.2345678,"lr":0.0003,"elapsed_s":12.345678,'
    b'"timestamp":"2026-01-01T12:00:00.123Z"}\n'
)


def per_call_us(fn: Callable[[], object], n: int = N) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / n * 1e6


def main() -> None:
    from speedtronic.processors import CapLine, JSONLRenderer, Redact
    from speedtronic.profiling import MetricLogger

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.jsonl"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        rows = [("os.write per record (O_APPEND, unbuffered)", per_call_us(lambda: os.write(fd, LINE)))]
        os.close(fd)
        with open(path, "ab") as f:
            rows.append(("buffered write, never flushed", per_call_us(lambda: f.write(LINE))))

            def write_flush() -> None:
                f.write(LINE)
                f.flush()

            rows.append(("buffered write + flush per record", per_call_us(write_flush)))
        rows.append(("os.stat(path) (a rotation check)", per_call_us(lambda: os.stat(path))))
        rows.append(("time.monotonic() (the check's gate)", per_call_us(time.monotonic)))

        payload = {"step": 1, "loss": 1.2345678, "lr": 3e-4, "tokens_per_s": 12345.6}
        event = {"event": "train_step", **payload, "elapsed_s": 1.5}
        redact, render = Redact(), JSONLRenderer(as_bytes=True)
        capped = CapLine(render)
        rows.append(("Redact() on a 6-key flat event", per_call_us(lambda: redact(None, "", dict(event)))))
        rows.append(("  (dict copy alone, for reference)", per_call_us(lambda: dict(event))))
        rows.append(("JSONLRenderer", per_call_us(lambda: render(None, "info", event))))
        rows.append(("CapLine(JSONLRenderer), line fits", per_call_us(lambda: capped(None, "info", event))))
        for label, options in [
            ("emit, JSONL + text to a StringIO, defaults", {}),
            ("emit, redact=False", {"redact": False}),
            ("emit, max_line_bytes=None", {"max_line_bytes": None}),
            ("emit, redact=False, max_line_bytes=None", {"redact": False, "max_line_bytes": None}),
        ]:
            with MetricLogger(stream=io.StringIO(), json_file=Path(tmp) / "e.jsonl", **options) as logger:
                rows.append((label, per_call_us(lambda: logger.emit("train_step", payload), 20_000)))

    width = max(len(label) for label, _ in rows)
    for label, us in rows:
        print(f"{label:<{width}}  {us:7.2f} us")


if __name__ == "__main__":
    main()
