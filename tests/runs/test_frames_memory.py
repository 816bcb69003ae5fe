"""read_frames' working set: what it holds above the imports grows with the records as the tables it
returns do (the tables, and the parsed parts they are built from), never by whole batches kept by an
allocator."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("polars")
pytest.importorskip("pyarrow")

LINE = (
    '{"event":"train_step","step":%d,"loss":%r,"lr":0.0003,"grad_norm":%r,"elapsed_s":%r,'
    '"_speedtronic":{"v":2,"origin":"user","converted":[],"truncated":[],'
    '"non_finite":{"nan":[],"inf":[],"neg_inf":[]}},"timestamp":"2026-01-01T12:00:00.%06dZ"}\n'
)
"""Today's writer's line (its note makes pyarrow's engine read it), written here without a logger: fast."""

MEASURE = """
import re, sys
import polars, pyarrow, pyarrow.json, pyarrow.compute
def peak():
    return int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) / 1024
base = peak()
from speedtronic.runs.frames import read_frames
frame = read_frames(sys.argv[1], library="polars", events=["train_step"])["train_step"]
print(len(frame), frame.estimated_size() / 2**20, peak() - base)
"""


def steps(path: Path, count: int) -> Path:
    with path.open("w") as file:
        for step in range(count):
            file.write(LINE % (step, 2.0 / (1 + step), 1.0 + step % 7, step * 0.01, step % 1_000_000))
    return path


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_working_set_grows_no_more_than_the_tables(tmp_path: Path) -> None:
    """4x the records: the peak above the imports grows by at most 3x the tables' growth and 16 MiB
    for the threads' timing (with 32 MiB batches in pyarrow's pool it grew by 64 MiB here)."""
    figures = []
    for count in (50_000, 200_000):
        done = subprocess.run(
            [sys.executable, "-c", MEASURE, str(steps(tmp_path / f"m{count}.jsonl", count))],
            capture_output=True, text=True, timeout=300, env={**os.environ},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        rows, result, above = done.stdout.split()
        assert int(rows) == count
        figures.append((float(result), float(above)))
    (small_result, small_above), (large_result, large_above) = figures
    assert large_above - small_above <= 3 * (large_result - small_result) + 16, figures
