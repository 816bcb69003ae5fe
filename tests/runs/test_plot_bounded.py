"""plot keeps a bounded number of points per line: every point up to MAX_BUCKETS, then envelopes."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from speedtronic.runs.plot import MAX_BUCKETS, Envelope, Series, ema, plot_runs

pytest.importorskip("matplotlib")

BOUND = 5 * MAX_BUCKETS + 64
"""The most points an ``Envelope`` holds (``Envelope``'s docstring)."""


def wave(count: int) -> list[float]:
    """A noisy decaying curve: no two neighbours equal, so the envelope has choices to make."""
    return [1 / (1 + i * 1e-3) + 0.01 * math.sin(i * 0.7) for i in range(count)]


def filled(values: list[float]) -> Envelope:
    envelope = Envelope()
    for at, value in enumerate(values):
        envelope.add(float(at), value)
    return envelope


class TestEnvelope:
    def test_up_to_the_cap_every_point_is_kept(self) -> None:
        """MAX_BUCKETS points: all of them, as given."""
        values = wave(MAX_BUCKETS)
        envelope = filled(values)
        assert list(envelope.y) == values
        assert list(envelope.x) == [float(at) for at in range(MAX_BUCKETS)]
        assert envelope.width == 1

    def test_a_long_line_is_bounded_and_keeps_its_ends_and_extremes(self) -> None:
        """200,000 points: at most BOUND kept, among them the first, last, lowest and highest."""
        values = wave(200_000)
        values[123_457] = 50.0  # a spike
        values[77_777] = -50.0  # a dip
        envelope = filled(values)
        assert len(envelope) <= BOUND
        assert envelope.width > 1
        kept = dict(zip(envelope.x, envelope.y, strict=True))
        assert kept[0.0] == values[0]
        assert kept[199_999.0] == values[-1]
        assert kept[123_457.0] == 50.0
        assert kept[77_777.0] == -50.0
        assert all(values[int(x)] == y for x, y in kept.items())  # points of the line, in order
        assert list(envelope.x) == sorted(envelope.x)

    def test_gaps_survive_and_are_counted(self) -> None:
        """NaN values far apart each leave a NaN point; together they stand for every NaN given."""
        values = wave(100_000)
        for at in range(1_000, 100_000, 10_000):
            values[at] = math.nan
        values[50_001] = values[50_002] = math.nan  # two in one bucket: one point stands for both
        envelope = filled(values)
        nan_at = [x for x, y in zip(envelope.x, envelope.y, strict=True) if math.isnan(y)]
        assert len(nan_at) == 11
        assert sum(envelope.gaps) == 12

    def test_rewind_below_the_cap_is_exact(self) -> None:
        """Rewinding drops exactly the points at x and after, and the NaN among them."""
        values = wave(100)
        values[60] = math.nan
        envelope = filled(values)
        assert envelope.rewind(50.0) == 1
        assert list(envelope.y) == values[:50]

    def test_a_line_rewound_below_the_cap_keeps_every_point_after(self) -> None:
        """Rewound to the middle of a short line and filled again: every point is kept, none merged."""
        envelope = filled(wave(100))
        envelope.rewind(80.0)
        for at in range(80, 300):
            envelope.add(float(at), 0.5)
        assert list(envelope.x) == [float(at) for at in range(300)]

    def test_rewind_past_the_cap_keeps_the_points_before(self) -> None:
        """A long line rewound: no point at or after x is left, points before it are, and it grows on."""
        envelope = filled(wave(100_000))
        envelope.rewind(60_000.0)
        assert envelope.x[-1] < 60_000.0
        assert envelope.x[-1] > 60_000.0 - 2 * envelope.width
        for at in range(60_000, 300_000):
            envelope.add(float(at), 0.5)
        assert len(envelope) <= BOUND
        assert list(envelope.x) == sorted(envelope.x)


class TestSeries:
    def test_short_smoothed_line_is_ema(self) -> None:
        """Below the cap the smoothed points are ema()'s, exactly, NaN gaps included."""
        values = wave(1_000)
        values[10] = math.nan
        series = Series("run", "loss", smooth=0.6)
        for at, value in enumerate(values):
            series.add(float(at), value)
        assert [y for y in series.smoothed.y if not math.isnan(y)] == [
            y for y in ema(values, 0.6) if not math.isnan(y)
        ]
        assert math.isnan(series.smoothed.y[10])

    def test_long_smoothed_line_runs_over_every_point(self) -> None:
        """Past the cap the EMA still sees every point: its last value is ema()'s last."""
        values = wave(100_000)
        series = Series("run", "loss", smooth=0.9)
        for at, value in enumerate(values):
            series.add(float(at), value)
        assert series.smoothed.y[-1] == ema(values, 0.9)[-1]
        assert len(series.smoothed) <= BOUND

    def test_rewind_restores_the_ema(self) -> None:
        """A restart below the cap: the EMA goes on from the last point kept, as ema() over the line."""
        series = Series("run", "loss", smooth=0.5)
        for at, value in enumerate([4.0, 3.0, 2.0, 1.0]):
            series.add(float(at), value)
        series.rewind(2.0)
        series.add(2.0, 8.0)
        assert list(series.smoothed.y) == ema([4.0, 3.0, 8.0], 0.5)


def long_run(path: Path, count: int) -> Path:
    """``count`` train_step records of loss alone, with a spike, written without a logger (fast)."""
    values = wave(count)
    values[count // 3] = 9.0
    with path.open("w") as file:
        for at, value in enumerate(values):
            file.write(f'{{"event":"train_step","step":{at},"loss":{value!r}}}\n')
    return path


class TestPlotRuns:
    def test_a_long_run_draws_bounded_points(self, tmp_path: Path) -> None:
        """plot_runs on more records than the cap: bounded points, first, last and spike among them."""
        run = long_run(tmp_path / "m.jsonl", 3 * MAX_BUCKETS * 4)
        result = plot_runs([run], tmp_path / "p.png", keys=["loss"], smooth=0.9)
        (series,) = result.series
        assert len(series.y) <= BOUND
        assert len(series.smoothed.y) <= BOUND
        assert series.x[0] == 0.0
        assert series.x[-1] == 3 * MAX_BUCKETS * 4 - 1
        assert max(series.y) == 9.0

    def test_a_resumed_run_draws_every_step(self, tmp_path: Path) -> None:
        """Steps 1-100, resumed from 80, then 81-300: 300 points, raw and smoothed, steps 1 to 300."""
        run = tmp_path / "m.jsonl"
        with run.open("w") as file:
            for first, last in ((1, 100), (81, 300)):
                file.write(f'{{"event":"train_start","start_step":{first - 1}}}\n')
                for step in range(first, last + 1):
                    file.write(f'{{"event":"train_step","step":{step},"loss":{1 / step!r}}}\n')
        result = plot_runs([run], tmp_path / "p.png", keys=["loss"], smooth=0.6)
        (series,) = result.series
        assert list(series.x) == [float(step) for step in range(1, 301)]
        assert list(series.smoothed.x) == list(series.x)

    @pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
    def test_peak_memory_does_not_grow_with_records(self, tmp_path: Path) -> None:
        """Plotting ten times as many records costs a few MiB more at most: the process's peak RSS
        (VmHWM: getrusage's ru_maxrss would count the parent's peak from before exec)."""
        peaks = []
        for count in (40_000, 400_000):
            run = long_run(tmp_path / f"m{count}.jsonl", count)
            code = (
                "import re, sys\n"
                "from speedtronic.runs.plot import plot_runs\n"
                "plot_runs([sys.argv[1]], sys.argv[2], keys=['loss'], smooth=0.6)\n"
                "status = open('/proc/self/status').read()\n"
                "print(re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1))\n"
            )
            done = subprocess.run(
                [sys.executable, "-c", code, str(run), str(tmp_path / "p.png")],
                capture_output=True, text=True, timeout=300, env={**os.environ},
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            peaks.append(int(done.stdout) / 1024)
        assert peaks[1] - peaks[0] < 8, peaks
