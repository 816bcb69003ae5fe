"""Read-back across a restart: a real `speedtronic train`, resumed, then summarize and plot on it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from speedtronic.runs import RunClock, read_records
from speedtronic.runs.summary import summarize_run
from tests.runs.conftest import CLI, EVENTS, assert_one_line_error, log_run, speedtronic

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run trained to step 6, then resumed to step 10: two segments in one metrics.jsonl (trained
    once for this module; the tests only read it, and write their outputs in their own tmp_path)."""
    base = tmp_path_factory.mktemp("resumed")
    config = base / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": {"hidden": 16},
                "train": {"steps": 6, "checkpoint_every": 3, "batch_size": 4, "device": "cpu"},
                "logging": {"every_steps": 1, "hooks": []},
            }
        )
    )
    env = {"OMP_NUM_THREADS": "1"}
    first = speedtronic("train", "--no-progress", "--config", config, "--run-dir", "run", cwd=base, env=env)
    assert first.returncode == 0, first.stderr
    again = speedtronic(
        "train", "--no-progress", "--run-dir", "run", "--resume", "--steps", "10", cwd=base, env=env
    )
    assert again.returncode == 0, again.stderr
    return base / "run"


def elapsed_by_segment(run: Path) -> list[float]:
    """The largest elapsed_s of each segment, as written."""
    out: dict[int, float] = {}
    for record in read_records(run):
        elapsed = record.payload.get("elapsed_s")
        if isinstance(elapsed, float):
            out[record.segment] = max(out.get(record.segment, 0.0), elapsed)
    return [out[i] for i in sorted(out)]


class TestSegments:
    def test_the_reader_numbers_the_segments(self, resumed_run: Path) -> None:
        """Each train_start begins a segment: 0 for the first run, 1 for the resumed one."""
        starts = [
            (r.segment, r.payload["start_step"])
            for r in read_records(resumed_run)
            if r.event == "train_start"
        ]
        assert starts == [(0, 0), (1, 6)]

    def test_summarize_adds_the_segments_up(self, resumed_run: Path) -> None:
        """elapsed is the total over segments; steps 1-10, each counted once; two segments."""
        summary = summarize_run(resumed_run)
        per_segment = elapsed_by_segment(resumed_run)
        assert len(per_segment) == 2
        assert summary.elapsed_s == pytest.approx(sum(per_segment))
        assert (summary.step_min, summary.step_max, summary.steps_recorded) == (1, 10, 10)
        assert summary.segments == 2
        assert summary.finished

    def test_summarize_counts_a_step_recorded_twice_once(self, tmp_path: Path) -> None:
        """A restart from an earlier checkpoint records steps again: they count once."""
        path = tmp_path / "m.jsonl"
        log_run(path, EVENTS[:3])  # steps 1, 2
        with path.open("a") as file:  # restarted from step 1: step 2 recorded again
            file.write(json.dumps({"event": "train_start", "start_step": 1, "target_step": 6}) + "\n")
            file.write(json.dumps({"event": "train_step", "step": 2, "loss": 1.25}) + "\n")
        summary = summarize_run(path)
        assert (summary.steps_recorded, summary.segments, summary.loss_last) == (2, 2, 1.25)

    def test_summarize_table_shows_segments(self, resumed_run: Path, cli: CLI) -> None:
        """The table has a segments row for a resumed run."""
        result = cli("summarize", resumed_run)
        assert result.returncode == 0, result.stderr
        assert re.search(r"^segments +2 \(1 restart\)$", result.stdout, re.MULTILINE), result.stdout


class TestPlotAcrossRestarts:
    def test_elapsed_is_cumulative(self, resumed_run: Path) -> None:
        """Against elapsed_s the points never go back in time: segment 2 starts where 1 ended."""
        clock = RunClock()
        times = [t for r in read_records(resumed_run) if (t := clock.add(r)) is not None]
        assert times == sorted(times)
        assert clock.total == pytest.approx(sum(elapsed_by_segment(resumed_run)))

    @pytest.mark.parametrize(
        ("suffix", "magic"), [(".png", b"\x89PNG"), (".pdf", b"%PDF"), (".svg", b"<?xml")]
    )
    def test_the_suffix_names_the_format(
        self, resumed_run: Path, cli: CLI, tmp_path: Path, suffix: str, magic: bytes
    ) -> None:
        """plot -o x.pdf writes a PDF, .svg an SVG, .png a PNG; --x elapsed_s across the restart."""
        out = tmp_path / f"x{suffix}"
        result = cli("plot", resumed_run, "-o", out, "--x", "elapsed_s")
        assert result.returncode == 0, result.stderr
        assert out.read_bytes().startswith(magic)

    def test_an_unknown_suffix_is_one_line(self, resumed_run: Path, cli: CLI) -> None:
        """plot -o x.jpg: one line naming the formats it can write, exit 2."""
        assert_one_line_error(cli("plot", resumed_run, "-o", "x.jpg"), "x.jpg", ".png, .pdf, .svg")

    def test_an_unwritable_output_is_one_line(self, resumed_run: Path, cli: CLI) -> None:
        """plot -o into a missing directory: one line naming the output, exit 2."""
        assert_one_line_error(cli("plot", resumed_run, "-o", "nowhere/x.png"), "nowhere/x.png", "can't write")


class TestReplayTargets:
    def test_tensorboard_into_a_file_is_one_line(self, run_file: Path, cli: CLI, tmp_path: Path) -> None:
        """replay --tensorboard naming a file: one line, exit 2, nothing written."""
        (tmp_path / "f").write_text("x\n")
        result = cli("replay", run_file, "--tensorboard", "f")
        assert_one_line_error(result, "f: expected a directory")

    def test_tensorboard_under_a_file_is_one_line(self, run_file: Path, cli: CLI, tmp_path: Path) -> None:
        """replay --tensorboard under a file: one line naming the path, exit 2."""
        (tmp_path / "f").write_text("x\n")
        assert_one_line_error(cli("replay", run_file, "--tensorboard", "f/tb"), "f/tb", "can't create")
