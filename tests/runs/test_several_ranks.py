"""Several chosen ranks: read_records, read_frames and plot take a list of ranks and open only their
files; a bad rank is an early error naming the argument."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from speedtronic.runs import Skipped, read_records
from speedtronic.runs.frames import read_frames
from speedtronic.runs.plot import plot_runs
from tests.runs.conftest import assert_one_line_error, speedtronic

pytest.importorskip("polars")
pytest.importorskip("pandas")
pytest.importorskip("matplotlib")


def rank_files(run: Path, ranks: int) -> Path:
    """A run directory of one file per rank, each with 300 train_step records (loss = rank + step/1000)."""
    run.mkdir()
    for rank in range(ranks):
        name = "metrics.jsonl" if rank == 0 else f"metrics.rank{rank}.jsonl"
        lines = [
            {"event": "train_step", "step": step, "loss": rank + step / 1000, "rank": rank}
            for step in range(300)
        ]
        (run / name).write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return run


class TestReadRecords:
    def test_only_the_listed_ranks_files_are_opened(self, tmp_path: Path) -> None:
        """rank=[1, 3] of five: their records, in file order; three files counted, not opened."""
        run = rank_files(tmp_path / "run", 5)
        skipped = Skipped()
        ranks = [record.rank for record in read_records(run, skipped, rank=[3, 1])]
        assert ranks == [1] * 300 + [3] * 300
        assert dict(skipped.other_rank_files) == {0: 1, 2: 1, 4: 1}
        assert not skipped.other_ranks

    @pytest.mark.parametrize("rank", [-1, [], [1, "2"], "2", 1.0, True, [0, -3], "last"])
    def test_a_bad_rank_is_an_error_before_reading(self, tmp_path: Path, rank: Any) -> None:
        """A value that is no rank choice: ValueError naming rank and what was expected, at the call."""
        run = rank_files(tmp_path / "run", 2)
        with pytest.raises(ValueError, match=r"^rank: expected a rank \(an integer >= 0\), a non-empty list"):
            read_records(run, rank=rank)


class TestReadFrames:
    def test_the_listed_ranks_rows(self, tmp_path: Path) -> None:
        """read_frames(rank=[0, 2]): those ranks' rows in both libraries; the other files not opened."""
        run = rank_files(tmp_path / "run", 4)
        skipped = Skipped()
        frame = read_frames(run, library="polars", events=["train_step"], rank=[0, 2], skipped=skipped)
        assert frame["train_step"]["rank"].to_list() == [0] * 300 + [2] * 300
        assert dict(skipped.other_rank_files) == {1: 1, 3: 1}
        pandas = read_frames(run, events=["train_step"], rank=(2, 0))["train_step"]
        assert pandas["loss"].tolist() == [step / 1000 for step in range(300)] + [
            2 + step / 1000 for step in range(300)
        ]

    def test_a_bad_rank(self, tmp_path: Path) -> None:
        """The same early error as read_records'."""
        run = rank_files(tmp_path / "run", 2)
        with pytest.raises(ValueError, match=r"^rank: expected"):
            read_frames(run, rank=[0, None])  # type: ignore[list-item]  # the wrong type on purpose


class TestPlot:
    def test_a_series_per_listed_rank(self, tmp_path: Path) -> None:
        """plot_runs(rank=[1, 3]): one series per listed rank, labelled as with rank="all"."""
        run = rank_files(tmp_path / "run", 5)
        result = plot_runs([run], tmp_path / "p.png", keys=["loss"], rank=[3, 1], labels=["run"])
        assert [(s.run, s.rank, len(s.y)) for s in result.series] == [
            ("run rank 1", 1, 300), ("run rank 3", 3, 300)
        ]  # fmt: skip
        assert dict(result.skipped["run"].other_rank_files) == {0: 1, 2: 1, 4: 1}

    def test_cli_takes_ranks_separated_by_commas(self, tmp_path: Path) -> None:
        """--rank 0,2: both drawn, the others named as left out on one line."""
        run = rank_files(tmp_path / "run", 4)
        done = speedtronic("plot", run, "-o", "p.png", "--keys", "loss", "--rank", "0,2", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "left out 2 other rank(s) (1, 3): 2 file(s) not opened" in done.stderr
        assert (tmp_path / "p.png").stat().st_size > 0

    @pytest.mark.parametrize("value", ["0,x", "1,,2", "-1", "0;1", ""])
    def test_cli_bad_rank_is_one_line(self, tmp_path: Path, value: str) -> None:
        """A bad --rank: one line naming --rank and what it expects, exit 2, no file written."""
        run = rank_files(tmp_path / "run", 2)
        done = speedtronic("plot", run, "-o", "p.png", "--rank", value, cwd=tmp_path)
        assert_one_line_error(done, "--rank: expected a rank (an integer >= 0), ranks separated by commas")
        assert not (tmp_path / "p.png").exists()

    def test_summarize_takes_one_rank(self, tmp_path: Path) -> None:
        """summarize's --rank is one rank or all: a list is the same one-line error, without the list."""
        run = rank_files(tmp_path / "run", 2)
        done = speedtronic("summarize", run, "--rank", "0,1", cwd=tmp_path)
        assert_one_line_error(done, "--rank: expected a rank (an integer >= 0) or 'all', got '0,1'")


class TestSummarize:
    @pytest.mark.parametrize("workers", [1, 2])
    def test_the_listed_ranks_summary(self, tmp_path: Path, workers: int) -> None:
        """summarize_run(rank=[1, 3]): the steps and losses of those ranks alone, in one process or in
        workers alike; the other ranks' files counted, not opened."""
        from speedtronic.runs.summary import summarize_run

        run = rank_files(tmp_path / "run", 5)
        summary = summarize_run(run, rank=[3, 1], workers=workers)
        assert (summary.records, summary.steps_recorded) == (600, 300)
        assert (summary.loss_first, summary.loss_last, summary.loss_best) == (1.0, 3.299, 1.0)
        assert dict(summary.skipped.other_rank_files) == {0: 1, 2: 1, 4: 1}


class TestHowEachRankEnded:
    """`summarize --rank all` of a job whose ranks ended differently says how each did: it showed the
    rank read last only (a job whose rank 0 failed and whose rank 1 was killed read "no train_end")."""

    @staticmethod
    def _job(run: Path) -> Path:
        run.mkdir()
        ends: list[dict[str, Any] | None] = [
            {"status": "failed", "error": "RuntimeError: gloo: peer 1 died"},
            None,  # SIGKILLed: no train_end
            {"status": "completed"},
        ]
        for rank, end in enumerate(ends):
            name = "metrics.jsonl" if rank == 0 else f"metrics.rank{rank}.jsonl"
            ranked = {"rank": rank, "world_size": 3}
            rows = [("train_start", {"start_step": 0}), ("train_step", {"step": 10, "loss": 1.0})]
            rows += [("train_end", end)] if end is not None else []
            (run / name).write_bytes(
                b"".join(
                    orjson.dumps({"event": event, **payload, **ranked, "elapsed_s": 0.5}) + b"\n"
                    for event, payload in rows
                )
            )
        return run

    def test_the_table_names_each_way_and_its_ranks_the_worst_first(self, tmp_path: Path) -> None:
        self._job(tmp_path / "job")
        done = speedtronic("summarize", "job", "--rank", "all", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        (row,) = [line for line in done.stdout.splitlines() if line.startswith("finished")]
        assert row.split(None, 1)[1] == (
            "failed: RuntimeError: gloo: peer 1 died (rank 0); no train_end (rank 1); completed (rank 2)"
        )

    def test_json_has_each_ranks_end(self, tmp_path: Path) -> None:
        self._job(tmp_path / "job")
        done = speedtronic("summarize", "job", "--rank", "all", "--json", cwd=tmp_path)
        (summary,) = orjson.loads(done.stdout)
        assert summary["ends"] == [
            {"rank": 0, "finished": True, "status": "failed", "error": "RuntimeError: gloo: peer 1 died"},
            {"rank": 1, "finished": False, "status": None, "error": None},
            {"rank": 2, "finished": True, "status": "completed", "error": None},
        ]

    def test_ranks_that_ended_alike_read_as_one_run_did(self, tmp_path: Path) -> None:
        """Every rank completed: the row is what it is for one process (the final loss)."""
        run = tmp_path / "job"
        run.mkdir()
        for rank in (0, 1):
            name = "metrics.jsonl" if rank == 0 else f"metrics.rank{rank}.jsonl"
            rows = [("train_start", {}), ("train_end", {"status": "completed", "final_loss": 0.5})]
            (run / name).write_bytes(
                b"".join(
                    orjson.dumps({"event": e, **p, "rank": rank, "world_size": 2, "elapsed_s": 0.1}) + b"\n"
                    for e, p in rows
                )
            )
        done = speedtronic("summarize", "job", "--rank", "all", cwd=tmp_path)
        (row,) = [line for line in done.stdout.splitlines() if line.startswith("finished")]
        assert row.split(None, 1)[1] == "completed, final loss 0.5"
