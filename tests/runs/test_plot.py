"""``speedtronic plot``: a decodable PNG of the right size, the right points, and failure paths."""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any

import pytest

from speedtronic.runs.plot import NothingToPlot, ema, plot_runs
from tests.runs.conftest import CLI, append, assert_one_line_error, log_run

pytest.importorskip("matplotlib")


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG signature and IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def decoded(path: Path) -> Any:
    from matplotlib.image import imread

    return imread(path)


class TestPlotCommand:
    def test_default_keys_two_panels(self, cli: CLI, run_file: Path, tmp_path: Path) -> None:
        """loss and lr, one panel each: an 800x580 PNG that decodes, with more than one colour."""
        out = tmp_path / "out.png"
        result = cli("plot", run_file, "-o", out)
        assert result.returncode == 0, result.stderr
        assert png_size(out) == (800, 580)
        pixels = decoded(out)
        assert pixels.shape == (580, 800, 4)
        assert len({tuple(p) for p in pixels.reshape(-1, 4)[::97]}) > 10
        assert "1 non-finite 'loss' value(s) drawn as gaps" in result.stderr
        assert result.stderr.strip().endswith(f"wrote {out}")

    def test_runs_keys_x_smooth_log(self, cli: CLI, run_file: Path, tmp_path: Path) -> None:
        """Three keys against elapsed_s, two runs overlaid, smoothed, log y: a 3-panel PNG."""
        other = tmp_path / "b.jsonl"
        other.write_text(
            "".join(
                f'{{"event":"train_step","step":{i},"loss":{1 / i},"elapsed_s":{i / 10}}}\n'
                for i in range(1, 50)
            )
        )
        out = tmp_path / "three.png"
        result = cli(
            "plot",
            run_file,
            other,
            "-o",
            out,
            "--keys",
            "loss,lr,grad_norm",
            "--x",
            "elapsed_s",
            "--smooth",
            "0.6",
            "--log-y",
            "--title",
            "compare",
        )
        assert result.returncode == 0, result.stderr
        assert png_size(out) == (800, 3 * 260 + 60)

    def test_a_key_no_run_has_is_a_warning(self, cli: CLI, run_file: Path, tmp_path: Path) -> None:
        """A key absent from every run gets an empty panel and a warning; the PNG is still written."""
        out = tmp_path / "o.png"
        result = cli("plot", run_file, "-o", out, "--keys", "loss,momentum")
        assert result.returncode == 0, result.stderr
        assert "no run has a number under 'momentum' in its train_step records" in result.stderr
        assert png_size(out) == (800, 580)

    def test_a_key_of_text_only_is_named_as_no_number(self, cli: CLI, tmp_path: Path) -> None:
        """outer_step's `checksum` is text (a hex digest): the warning says there is no number under it,
        not that no run has it (was: "no run has 'checksum'", though every record has one)."""
        from tests.runs.conftest import write_run

        run = tmp_path / "m.jsonl"
        payloads = [
            {"outer_step": n, "step": 10 * n, "checksum": "60c07b01", "included": 2} for n in (1, 2, 3)
        ]
        write_run(run, [("outer_step", payload) for payload in payloads])
        result = cli(
            "plot", run, "-o", tmp_path / "o.png", "--event", "outer_step", "--keys", "included,checksum"
        )
        assert result.returncode == 0, result.stderr
        assert "speedtronic: warning: no run has a number under 'checksum' in its outer_step records" in (
            result.stderr.splitlines()
        )

    def test_torn_tail_and_junk(self, cli: CLI, run_file: Path, tmp_path: Path) -> None:
        """A torn tail and junk lines are reported and the rest is plotted."""
        append(run_file, 'junk\n{"event":"train_step","step":9,"loss":0.1')
        out = tmp_path / "o.png"
        result = cli("plot", run_file, "-o", out)
        assert result.returncode == 0, result.stderr
        assert "1 not JSON" in result.stderr
        assert "1 torn last line" in result.stderr
        assert out.exists()

    def test_missing_run_writes_nothing(self, cli: CLI, run_file: Path, tmp_path: Path) -> None:
        """A missing run among several: one-line error naming it, and no PNG."""
        out = tmp_path / "o.png"
        assert_one_line_error(cli("plot", run_file, "gone.jsonl", "-o", out), "gone.jsonl")
        assert not out.exists()

    def test_nothing_to_plot_writes_nothing(self, cli: CLI, tmp_path: Path) -> None:
        """Records without the keys: one-line error, exit 2, no PNG."""
        run = tmp_path / "m.jsonl"
        run.write_text('{"event":"checkpoint","step":1}\n')
        out = tmp_path / "o.png"
        assert_one_line_error(cli("plot", run, "-o", out), "no train_step record", "'step'")
        assert not out.exists()

    def test_unwritable_output(self, cli: CLI, run_file: Path, tmp_path: Path) -> None:
        """An output path that can't be written: one-line error naming it."""
        (tmp_path / "file").write_text("")
        assert_one_line_error(cli("plot", run_file, "-o", tmp_path / "file" / "o.png"), "o.png")

    def test_bad_smoothing(self, cli: CLI, run_file: Path, tmp_path: Path) -> None:
        """--smooth outside [0, 1) is a one-line error."""
        assert_one_line_error(cli("plot", run_file, "-o", tmp_path / "o.png", "--smooth", "1"), "--smooth")

    def test_a_folder_of_runs_plots_every_run(self, cli: CLI, tmp_path: Path) -> None:
        """plot runs/ draws each run directory in it, as summarize reads them."""
        for name in ("a", "b"):
            log_run(tmp_path / "runs" / name / "metrics.jsonl")
        out = tmp_path / "p.svg"
        result = cli("plot", tmp_path / "runs", "-o", out)
        assert result.returncode == 0, result.stderr
        svg = out.read_text()
        assert str(tmp_path / "runs" / "a") in svg
        assert str(tmp_path / "runs" / "b") in svg


class TestPlotRuns:
    def test_points_come_from_the_chosen_event_only(self, run_file: Path, tmp_path: Path) -> None:
        """Only train_step records give points; NaN and Infinity become gaps, counted."""
        result = plot_runs([run_file], tmp_path / "o.png", keys=["loss", "samples_per_s"], labels=["a"])
        loss, rate = result.series
        assert list(loss.x) == [1.0, 2.0, 3.0, 4.0]
        assert loss.y[:2].tolist() == [2.0, 1.5]
        assert math.isnan(loss.y[2])
        assert (loss.non_finite, rate.non_finite) == (1, 1)
        assert math.isnan(rate.y[2])
        assert loss.run == "a"

    def test_nothing_to_plot_raises_before_writing(self, run_file: Path, tmp_path: Path) -> None:
        """No points for any key raises NothingToPlot and writes no file."""
        with pytest.raises(NothingToPlot):
            plot_runs([run_file], tmp_path / "o.png", keys=["nope"])
        assert not (tmp_path / "o.png").exists()


def test_ema_is_tensorboards_debiased_smoothing() -> None:
    """The first point is kept, later ones move toward the values; NaN stays a gap."""
    out = ema([1.0, 3.0, math.nan, 3.0], 0.5)
    assert out[0] == 1.0
    assert out[1] == pytest.approx((0.25 + 1.5) / 0.75)
    assert math.isnan(out[2])
    assert ema([2.0, 2.0, 2.0], 0.9) == pytest.approx([2.0, 2.0, 2.0])
