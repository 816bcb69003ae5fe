"""``--rank N`` of every command that takes it, on a run without rank N: one line, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from speedtronic.commands.cli import main
from tests.runs.conftest import write_run


def steps(rank: int, count: int = 4) -> list[tuple[str, dict[str, object]]]:
    return [("train_step", {"step": step, "loss": 1.0 + step, "rank": rank}) for step in range(1, count + 1)]


@pytest.fixture
def four_ranks(tmp_path: Path) -> Path:
    """A run directory as a job of four writes it: metrics.jsonl (rank 0), metrics.rank<r>.jsonl."""
    run = tmp_path / "run"
    for rank in range(4):
        write_run(run / ("metrics.jsonl" if rank == 0 else f"metrics.rank{rank}.jsonl"), steps(rank))
    return run


@pytest.fixture
def two_ranks_one_file(tmp_path: Path) -> Path:
    """One JSONL holding ranks 0 and 1 (a merged file): only its records say which ranks it has."""
    path = tmp_path / "merged.jsonl"
    write_run(path, [*steps(0), *steps(1)])
    return path


def command_argv(command: str, run: Path, rank: str, tmp_path: Path) -> list[str]:
    """``command`` on ``run`` with ``--rank rank``, writing (if it gets that far) under ``tmp_path``."""
    writes = {"summarize": ["--json"], "plot": ["-o", str(tmp_path / "p.png")]}
    return [command, str(run), "--rank", rank, *writes.get(command, ["--tensorboard", str(tmp_path / "tb")])]


@pytest.mark.parametrize("command", ["summarize", "plot", "replay"])
class TestARankTheRunDoesNotHave:
    """Every command that takes --rank (``add_rank_argument``)."""

    def test_per_rank_files(
        self, command: str, four_ranks: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--rank 5 on a run of ranks 0-3: one line naming the run, the rank and the ranks it has,
        exit 2, nothing written (summarize printed an empty row and exited 0)."""
        assert main(command_argv(command, four_ranks, "5", tmp_path)) == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert err == f"speedtronic: error: {four_ranks}: --rank 5: the run has no rank 5; it has ranks 0-3\n"
        assert sorted(path.name for path in tmp_path.iterdir()) == ["run"]

    def test_ranks_found_in_one_file(
        self, command: str, two_ranks_one_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A merged file holding ranks 0 and 1, --rank 3: read through, its ranks named."""
        assert main(command_argv(command, two_ranks_one_file, "3", tmp_path)) == 2
        assert capsys.readouterr().err == (
            f"speedtronic: error: {two_ranks_one_file}: --rank 3: the run has no rank 3; it has ranks 0, 1\n"
        )


def test_plot_names_every_rank_missing(
    four_ranks: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """plot --rank 0,7,5: the ranks the run lacks, sorted; the one it has is not named; no file written."""
    assert main(["plot", str(four_ranks), "-o", str(tmp_path / "p.png"), "--rank", "0,7,5"]) == 2
    assert capsys.readouterr().err == (
        f"speedtronic: error: {four_ranks}: --rank 0,7,5: the run has no ranks 5, 7; it has ranks 0-3\n"
    )
    assert not (tmp_path / "p.png").exists()


def test_a_rank_the_run_has_is_read(four_ranks: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--rank 2 of four, --rank all, --rank first: read as before, exit 0."""
    for rank in ("2", "all", "first"):
        assert main(["summarize", str(four_ranks), "--rank", rank, "--json"]) == 0, capsys.readouterr().err
        assert '"steps"' in capsys.readouterr().out


def test_a_folder_of_runs_names_the_run_without_it(tmp_path: Path) -> None:
    """A folder of runs where one run lacks rank 1: the real command names that run, one line, exit 2."""
    write_run(tmp_path / "runs" / "a" / "metrics.jsonl", [*steps(0), *steps(1)])
    write_run(tmp_path / "runs" / "b" / "metrics.jsonl", steps(0))
    done = subprocess.run(
        [sys.executable, "-m", "speedtronic", "summarize", "runs", "--rank", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "speedtronic: error: runs/b: --rank 1: the run has no rank 1; it has rank 0\n"


@pytest.mark.parametrize(
    "target",
    [
        ["--tensorboard", "tb"],
        ["--hook", "tensorboard:log_dir=tb"],
        ["--wandb", "p", "--wandb-mode", "offline"],
    ],
)
def test_several_ranks_into_one_chart_is_refused(
    four_ranks: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], target: list[str]
) -> None:
    """replay --rank all --tensorboard DIR put every rank's step 10 on one chart, where TensorBoard
    dropped all but one as out of order: one line, exit 2, no target made; one rank replays."""
    argv = ["replay", str(four_ranks), "--rank", "all", *target]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        assert main(argv) == 2
        assert capsys.readouterr().err == (
            "speedtronic: error: --rank all: a TensorBoard or W&B target keeps one series per key, by "
            "step, so several ranks' records would overwrite each other there; replay one rank at a time "
            "(--rank N), each into its own target\n"
        )
        assert not (tmp_path / "tb").exists()
        assert not (tmp_path / "wandb").exists()
        if target[0] != "--wandb":
            assert main(["replay", str(four_ranks), "--rank", "1", *target]) == 0
            assert (tmp_path / "tb").is_dir()
