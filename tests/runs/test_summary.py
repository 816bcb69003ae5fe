"""``speedtronic summarize``: the table, --json, several runs, and every failure path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from speedtronic.runs import RunError, read_frame, summary
from speedtronic.runs.summary import format_summaries, summarize_run
from tests.runs.conftest import CLI, FailsOnCheckpoint, append, assert_one_line_error, log_run, write_run


def table(text: str) -> dict[str, list[str]]:
    """The table's rows by label, cells split on runs of two or more spaces."""
    rows = {}
    for line in text.splitlines():
        label, *cells = [cell for cell in line.split("  ") if cell.strip()]
        rows[label.strip()] = [cell.strip() for cell in cells]
    return rows


class TestSummarizeRun:
    def test_facts_of_a_run(self, run_file: Path) -> None:
        """Steps, first/last/best loss, rates, checkpoints and trouble come out of one pass."""
        s = summarize_run(run_file)
        assert s.records == 14
        assert s.events["hook_error"] == 3  # the 1st and 2nd failure, then the total at close
        assert s.events["train_step"] == 4
        assert (s.step_min, s.step_max, s.target_step) == (1, 4, 6)
        assert (s.loss_first, s.loss_last, s.loss_best, s.loss_best_step) == (2.0, 0.75, 0.75, 4)
        assert s.non_finite_losses == 1
        rate = s.rates["samples_per_s"]
        assert (rate.mean, rate.last) == (200.0, 200.0)  # the Infinity is not averaged in
        assert s.checkpoints == 2
        assert s.last_checkpoint == {"step": 4, "path": "ckpt/step_4.pt"}
        assert s.finished
        assert s.final_loss == 0.75
        assert dict(s.warnings) == {"shape_warning": 1, "delta_upload_stale": 1}
        assert dict(s.errors) == {"delta_upload_failed": 1}
        assert s.hook_failures == {"FailsOnCheckpoint": 2}

    def test_events_the_hooks_never_got_are_counted(self, tmp_path: Path) -> None:
        """A hook_error with phase="drain" counts undelivered events, not a hook failure."""
        path = tmp_path / "m.jsonl"
        path.write_text(
            '{"event":"hook_error","hook":"*","phase":"drain","undelivered":12,'
            '"_speedtronic":{"origin":"speedtronic"}}\n'
        )
        s = summarize_run(path)
        assert (s.undelivered, s.hook_failures) == (12, {})
        assert table(format_summaries([s]))["undelivered"] == ["12"]

    def test_a_killed_run_is_not_finished(self, tmp_path: Path) -> None:
        """Without train_end the run reads as unfinished, and the torn tail is counted."""
        path = tmp_path / "m.jsonl"
        path.write_text('{"event":"train_step","step":1,"loss":1.0}\n{"event":"train_step","st')
        s = summarize_run(path)
        assert not s.finished
        assert s.skipped.by_reason() == {"torn last line": 1}
        assert table(format_summaries([s]))["finished"] == ["no train_end"]


class TestSummarizeCommand:
    def test_table(self, cli: CLI, run_file: Path) -> None:
        """The table shows each fact on its own row, trouble included; nothing on stderr."""
        result = cli("summarize", run_file)
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        rows = table(result.stdout)
        assert rows["run"] == [str(run_file)]
        assert rows["train_step"] == ["4"]
        assert rows["steps"] == ["1-4 of 6"]
        assert rows["loss first"] == ["2"]
        assert rows["loss best"] == ["0.75 @ step 4"]
        assert rows["samples_per_s mean"] == ["200"]
        assert rows["checkpoints"] == ["2 (last at step 4)"]
        assert rows["finished"] == ["yes, final loss 0.75"]
        assert rows["warnings"] == ["shape_warning 1, delta_upload_stale 1"]
        assert rows["errors"] == ["delta_upload_failed 1"]
        assert rows["hook failures"] == ["FailsOnCheckpoint 2"]

    def test_several_runs_side_by_side(self, cli: CLI, run_file: Path, tmp_path: Path) -> None:
        """Two runs (a directory and a file) give one column each; an absent fact is "-"."""
        other = tmp_path / "other.jsonl"
        other.write_text('{"event":"train_step","step":7,"loss":3.0,"tokens_per_s":9.5}\n')
        result = cli("summarize", run_file.parent, other)
        assert result.returncode == 0, result.stderr
        rows = table(result.stdout)
        assert rows["run"] == [str(run_file.parent), str(other)]
        assert rows["steps"] == ["1-4 of 6", "7-7"]
        assert rows["tokens_per_s last"] == ["-", "9.5"]
        assert rows["checkpoints"] == ["2 (last at step 4)", "-"]

    def test_json(self, cli: CLI, run_file: Path) -> None:
        """--json prints strict JSON, one object per run, non-finite values as strings."""
        append(run_file, '{"event":"train_step","step":5,"loss":"NaN"}\n')
        result = cli("summarize", "--json", run_file)
        assert result.returncode == 0, result.stderr
        (run,) = json.loads(result.stdout, parse_constant=pytest.fail)
        loss = {"first": 2.0, "last": "NaN", "best": 0.75, "best_step": 4, "non_finite": 2, "key": "loss"}
        assert run["loss"] == loss
        assert run["steps"] == {"min": 1, "max": 5, "target": 6, "recorded": 5}
        assert run["segments"] == 1
        assert run["rates"]["samples_per_s"] == {"mean": 200.0, "last": 200.0}
        assert run["errors"] == {"delta_upload_failed": 1}
        assert run["skipped"] == {"lines": 0, "by_reason": {}, "other_ranks": {}, "other_rank_files": {}}

    def test_bad_lines_are_reported_on_stderr_with_line_numbers(self, cli: CLI, run_file: Path) -> None:
        """Junk and a torn tail: the summary is printed, stderr names the file, reasons and lines."""
        n = len(run_file.read_text().splitlines())
        append(run_file, '<html>\n{"event":"train_step","rank":1,"step":9}\n{"event":"chec')
        result = cli("summarize", run_file)
        assert result.returncode == 0, result.stderr
        assert table(result.stdout)["skipped"] == ["2 line(s), 1 of rank 1"]
        warnings = result.stderr.splitlines()
        assert warnings == [
            f"speedtronic: warning: {run_file}: skipped 1 not JSON (line {n + 1}); "
            f"1 torn last line (line {n + 3})",
            f"speedtronic: warning: {run_file}: left out 1 record(s) of rank 1 (read them with --rank 1)",
        ]

    def test_rank_option(self, cli: CLI, tmp_path: Path) -> None:
        """--rank 1 summarises rank 1's records; --rank bogus is a one-line error."""
        path = tmp_path / "m.jsonl"
        path.write_text('{"event":"train_step","step":1}\n{"event":"train_step","step":8,"rank":1}\n')
        assert table(cli("summarize", "--rank", "1", path).stdout)["steps"] == ["8-8"]
        assert table(cli("summarize", "--rank", "all", path).stdout)["steps"] == ["1-8"]
        assert_one_line_error(cli("summarize", "--rank", "bogus", path), "--rank", "'bogus'")

    def test_missing_file(self, cli: CLI) -> None:
        """A missing run: one line naming it, exit 2, no traceback, nothing on stdout."""
        result = cli("summarize", "missing.jsonl")
        assert_one_line_error(result, "missing.jsonl: No such file or directory")
        assert result.stdout == ""

    def test_unreadable_runs_are_listed_and_the_readable_ones_summarised(
        self, cli: CLI, run_file: Path, tmp_path: Path
    ) -> None:
        """runs/*: an empty directory and a missing file don't cost the good run; exit 0."""
        (tmp_path / "empty").mkdir()
        result = cli("summarize", run_file, "empty", "missing.jsonl")
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("run ")
        assert str(run_file) in result.stdout.splitlines()[0]
        assert result.stderr.splitlines() == [
            "speedtronic: warning: not summarised: empty: no *.jsonl file in this directory",
            "speedtronic: warning: not summarised: missing.jsonl: No such file or directory",
        ]

    def test_none_readable_is_an_error_listing_each(self, cli: CLI, tmp_path: Path) -> None:
        """Every run unreadable: each named on stderr, then the error, exit 2."""
        (tmp_path / "empty").mkdir()
        result = cli("summarize", "empty", "missing.jsonl")
        assert result.returncode == 2
        assert result.stderr.splitlines() == [
            "speedtronic: empty: no *.jsonl file in this directory",
            "speedtronic: missing.jsonl: No such file or directory",
            "speedtronic: error: none of the 2 runs could be read",
        ]

    @pytest.mark.parametrize("name", ["README.md", "step_00000010.pt"])
    def test_a_file_that_is_not_speedtronic_jsonl_is_an_error(
        self, cli: CLI, tmp_path: Path, name: str
    ) -> None:
        """A README or a checkpoint is no run: one line saying so, exit 2."""
        (tmp_path / name).write_bytes(b"# speedtronic\n\x80\x02}q\x00binary\n")
        assert_one_line_error(cli("summarize", name), f"{name}: not a speedtronic JSONL file")

    def test_a_document_quoting_a_record_is_not_a_run(self, cli: CLI, tmp_path: Path) -> None:
        """A README that shows one JSONL record among its prose is refused, not read as a run of 1 record."""
        record = '{"event":"train_step","step":2,"loss":1.2}'
        (tmp_path / "README.md").write_text(f"# speedtronic\n\nA record:\n\n{record}\n\nMore prose.\n")
        assert_one_line_error(cli("summarize", "README.md"), "README.md: not a speedtronic JSONL file")
        assert_one_line_error(cli("plot", "README.md", "-o", "p.png"), "README.md: not a speedtronic")
        assert_one_line_error(cli("replay", "README.md", "--hook", "x"), "README.md: not a speedtronic")
        with pytest.raises(RunError, match="line 1 is not a JSON object"):
            read_frame(tmp_path / "README.md", "train_step")

    def test_a_torn_first_line_is_still_a_run(self, tmp_path: Path) -> None:
        """A run whose first line a killed writer tore, then resumed, is read: the tear is skipped."""
        path = tmp_path / "m.jsonl"
        path.write_text('{"event":"train_st\n{"event":"train_step","step":1,"loss":1.0}\n')
        summary = summarize_run(path)
        assert (summary.records, summary.skipped.total_lines) == (1, 1)

    @pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
    def test_unreadable_file(self, cli: CLI, run_file: Path) -> None:
        """An unreadable run: one line naming it and the reason."""
        run_file.chmod(0)
        assert_one_line_error(cli("summarize", run_file), str(run_file), "Permission denied")

    def test_directory_as_a_file_path(self, cli: CLI, tmp_path: Path) -> None:
        """A directory without JSONL files: one line saying so."""
        (tmp_path / "empty").mkdir()
        assert_one_line_error(cli("summarize", "empty"), "empty: no *.jsonl file in this directory")


class TestFolderOfRuns:
    def test_a_folder_of_runs_is_every_run_in_it(self, cli: CLI, tmp_path: Path) -> None:
        """`speedtronic summarize runs` (where `make run` writes) summarises each run inside, by name."""
        for name, loss in (("2026-01-02", 0.5), ("2026-01-01", 0.25)):
            (tmp_path / "runs" / name).mkdir(parents=True)
            path = tmp_path / "runs" / name / "metrics.jsonl"
            path.write_text(f'{{"event":"train_step","step":1,"loss":{loss}}}\n')
        (tmp_path / "runs" / "notes").mkdir()  # a folder without JSONL is no run
        result = cli("summarize", "runs")
        assert result.returncode == 0, result.stderr
        rows = table(result.stdout)
        assert rows["run"] == [os.path.join("runs", "2026-01-01"), os.path.join("runs", "2026-01-02")]
        assert rows["loss last"] == ["0.25", "0.5"]
        assert result.stderr == ""

    def test_a_folder_without_runs_is_still_an_error(self, cli: CLI, tmp_path: Path) -> None:
        """A directory with neither JSONL files nor run directories: one line saying so, exit 2."""
        (tmp_path / "runs" / "notes").mkdir(parents=True)
        assert_one_line_error(cli("summarize", "runs"), "runs: no *.jsonl file in this directory")


def test_summarize_starts_without_dataframe_or_plotting_libraries(run_file: Path) -> None:
    """`speedtronic summarize` imports no torch, numpy, pandas, polars, pyarrow, matplotlib, nor the
    dataframe reader: a user pays for what the command loads before it reads a byte."""
    probe = (
        "import sys\n"
        "from speedtronic.commands.cli import main\n"
        "code = main(['summarize', sys.argv[1]])\n"
        "heavy = {'torch', 'numpy', 'pandas', 'polars', 'pyarrow', 'matplotlib', 'wandb', 'tensorboard'}\n"
        "loaded = sorted(m for m in sys.modules if m.partition('.')[0] in heavy)\n"
        "ours = [m for m in ('speedtronic.runs.frames', 'speedtronic.profiling') if m in sys.modules]\n"
        "print(code, loaded + ours)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(run_file)], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.splitlines()[-1] == "0 []"


class TestCountsAcrossSegments:
    def test_hook_failures_add_up_over_a_resumed_run(self, tmp_path: Path) -> None:
        """A hook failing 5 times, then 3 times after the resume: summarize counts 8, also in pieces."""
        path = tmp_path / "m.jsonl"
        for checkpoints in (5, 3):
            log_run(path, [("train_start", {"start_step": 0})] + [
                ("checkpoint", {"step": step, "path": f"c{step}.pt"}) for step in range(checkpoints)
            ], hooks=[FailsOnCheckpoint()])  # fmt: skip
        assert summarize_run(path).hook_failures == {"FailsOnCheckpoint": 8}
        assert summarize_run(path, workers=2).hook_failures == {"FailsOnCheckpoint": 8}

    def test_ranks_that_never_restarted_are_one_segment(self, tmp_path: Path, cli: CLI) -> None:
        """--rank all over three ranks, each started once: one segment, no segments row."""
        run = tmp_path / "run"
        for rank in range(3):
            name = "metrics.jsonl" if rank == 0 else f"metrics.rank{rank}.jsonl"
            records = [("train_start", {"rank": rank}), ("train_step", {"step": 1, "rank": rank})]
            write_run(run / name, records)
        assert summarize_run(run, rank="all").segments == 1
        result = cli("summarize", run, "--rank", "all")
        assert result.returncode == 0, result.stderr
        assert "segments" not in result.stdout


class TestStepsOffTheBitmapScale:
    """Steps counted in samples or tokens (2**27 on) or negative: a step recorded again counts once."""

    @staticmethod
    def resumed(path: Path, first: int, stride: int) -> int:
        """A run of 20 steps resumed 10 steps back for 20 more (40 records, 30 steps), written by a
        real MetricLogger; its distinct steps counted independently from the file's lines."""
        for start in (0, 10):
            steps = [first + stride * i for i in range(start, start + 20)]
            records = [("train_step", {"step": step, "loss": 1.0, "elapsed_s": 0.5 * n})
                       for n, step in enumerate(steps)]  # fmt: skip
            write_run(path, [("train_start", {"start_step": steps[0]}), *records])
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        return len({line["step"] for line in lines if line["event"] == "train_step"})

    @pytest.mark.parametrize(
        ("first", "stride"),
        [(2**27, 1), (2**27 - 15, 1), (2**40, 4096), (-50, 1), (-100_000, 8192), (-25, 3)],
    )
    @pytest.mark.parametrize("pieces", [False, True])
    def test_a_step_recorded_again_counts_once(
        self, tmp_path: Path, first: int, stride: int, pieces: bool, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """30 distinct steps recorded 40 times over a resume: 30, in one pass and in pieces of a line."""
        path = tmp_path / "m.jsonl"
        distinct = self.resumed(path, first, stride)
        assert distinct == 30
        if pieces:
            monkeypatch.setattr(summary, "PIECE_BYTES", 1)
        got = summarize_run(path, workers=2 if pieces else 1)
        assert got.steps_recorded == distinct
        assert (got.step_min, got.step_max) == (first, first + 29 * stride)

    def test_the_table_counts_them_once(self, tmp_path: Path, cli: CLI) -> None:
        """`speedtronic summarize --json` of such a run: steps.recorded is the distinct count."""
        path = tmp_path / "m.jsonl"
        distinct = self.resumed(path, 2**33, 1_000_000)
        result = cli("summarize", path, "--json")
        assert result.returncode == 0, result.stderr
        assert [run["steps"]["recorded"] for run in json.loads(result.stdout)] == [distinct]
