"""A run directory is one run: `speedtronic train` driven as a user would, in subprocesses."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import run_records
from tests.runs.conftest import assert_one_line_error
from tests.torch_run import train_cli

ROOT = Path(__file__).resolve().parents[2]
EXIT_AT = "tests.training.recording:ExitAt"


def train(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return train_cli(*args, cwd=cwd)


def write_config(path: Path, **sections: Any) -> Path:
    base: dict[str, Any] = {
        "model": {"hidden": 24},
        "train": {"steps": 12, "checkpoint_every": 4, "batch_size": 4, "device": "cpu", "warmup_steps": 2},
        "logging": {"every_steps": 1, "hooks": [], "validate": True},
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    path.write_text(yaml.safe_dump(base))
    return path


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of ``write_config``'s 12 steps with keep_checkpoints 2 (checkpoints at 4, 8 and
    12, the two newest kept), trained once for the tests below that read it or copy it (``copy_run``)."""
    folder = tmp_path_factory.mktemp("finished")
    config = write_config(folder / "c.yaml", train={"keep_checkpoints": 2})
    done = train("--config", config, "--run-dir", "r", cwd=folder)
    assert done.returncode == 0, done.stderr
    return folder / "r"


def copy_run(run_dir: Path, folder: Path) -> Path:
    """A copy of ``run_dir`` as ``folder``/r, for a test to resume or break on its own."""
    return Path(shutil.copytree(run_dir, folder / "r"))


def final_loss(run_dir: Path) -> float:
    """The loss of the last step of the run, the latest record of it."""
    return float([r for r in run_records(run_dir) if r["event"] == "train_end"][-1]["final_loss"])


class TestResume:
    def test_resume_uses_the_recorded_config_not_the_defaults(self, tmp_path: Path) -> None:
        """--resume without --config: the model size the run recorded, not the default one."""
        config = write_config(tmp_path / "big.yaml", model={"hidden": 40})
        assert train("--config", config, "--run-dir", "runs/b", "--steps", "4", cwd=tmp_path).returncode == 0
        done = train("--run-dir", "runs/b", "--resume", "--steps", "8", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "steps 4 -> 8 " in done.stderr
        run_dir = tmp_path / "runs" / "b"
        assert yaml.safe_load((run_dir / "config.yaml").read_text())["model"]["hidden"] == 40
        first = yaml.safe_load((run_dir / "config.1.yaml").read_text())
        assert (first["train"]["steps"], first["model"]["hidden"]) == (4, 40)
        (start,) = [r for r in run_records(run_dir) if r["event"] == "train_start" and r["start_step"] == 4]
        assert start["config_changes"] == [{"key": "train.steps", "old": 4, "new": 8}]
        assert start["lr_schedule_steps"] == 4  # the schedule keeps its horizon: documented

    def test_training_into_a_run_without_resume_is_refused(self, tmp_path: Path, finished: Path) -> None:
        """One line naming --resume and --run-dir, exit 2; the run's files are untouched."""
        copy_run(finished, tmp_path)
        config = write_config(tmp_path / "c.yaml")
        before = (tmp_path / "r" / "metrics.jsonl").read_bytes()
        done = train("--config", config, "--run-dir", "r", cwd=tmp_path)
        assert_one_line_error(done, "r: already holds a run", "--resume", "--run-dir")
        assert (tmp_path / "r" / "metrics.jsonl").read_bytes() == before


def test_parallel_launches_get_their_own_run_directories(tmp_path: Path) -> None:
    """Three `speedtronic train` started together: three directories, each holding one run."""
    config = write_config(tmp_path / "c.yaml", train={"steps": 2, "checkpoint_every": 0})
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "speedtronic", "train", "--no-progress", "--config", str(config)]
    launched = [
        subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    for process in launched:
        assert process.wait(timeout=180) == 0, process.stderr.read() if process.stderr else ""
        if process.stderr:
            process.stderr.close()
    run_dirs = sorted((tmp_path / "runs").iterdir())
    assert len(run_dirs) == 3
    for run_dir in run_dirs:
        assert [r["event"] for r in run_records(run_dir)].count("train_start") == 1


class TestReproduce:
    @pytest.mark.parametrize("outer_every", [0, 4])
    def test_an_interrupted_run_resumed_ends_where_the_uninterrupted_one_does(
        self, tmp_path: Path, outer_every: int
    ) -> None:
        """Killed right after its step-4 checkpoint and resumed: the same final loss, to the bit."""
        train_section = {"outer_every": outer_every}
        whole = write_config(tmp_path / "whole.yaml", train=train_section)
        assert train("--config", whole, "--run-dir", "whole", cwd=tmp_path).returncode == 0
        killed = write_config(
            tmp_path / "killed.yaml",
            train=train_section,
            logging={"hooks": [{"type": EXIT_AT, "event": "checkpoint", "step": 4}], "strict_hooks": True},
        )
        crashed = train("--config", killed, "--run-dir", "cut", cwd=tmp_path)
        assert crashed.returncode == 3  # os._exit in the hook: no train_end, no summary
        no_hooks = write_config(tmp_path / "no-hooks.yaml", logging={"hooks": []})
        done = train("--config", no_hooks, "--run-dir", "cut", "--resume", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "resumed      from cut/checkpoints/step_00000004.pt" in done.stderr
        assert final_loss(tmp_path / "cut") == final_loss(tmp_path / "whole")


class TestCheckpoints:
    def test_keep_checkpoints_keeps_the_newest(self, finished: Path) -> None:
        """keep_checkpoints 2 over checkpoints at 4, 8 and 12: 8 and 12 remain."""
        names = sorted(p.name for p in (finished / "checkpoints").iterdir())
        assert names == ["step_00000008.pt", "step_00000012.pt"]

    def test_a_corrupt_latest_checkpoint_falls_back_with_a_warning(
        self, tmp_path: Path, finished: Path
    ) -> None:
        """A truncated newest checkpoint is skipped for the one before; an event and a warning name it."""
        latest = copy_run(finished, tmp_path) / "checkpoints" / "step_00000012.pt"
        latest.write_bytes(latest.read_bytes()[:100])
        done = train("--run-dir", "r", "--resume", "--steps", "14", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "steps 8 -> 14 " in done.stderr
        warning = [line for line in done.stderr.splitlines() if line.startswith("speedtronic: warning:")]
        assert len(warning) == 1
        assert f"skipped checkpoint r/checkpoints/{latest.name}" in warning[0]
        (skipped,) = [r for r in run_records(tmp_path / "r") if r["event"] == "checkpoint_skipped"]
        assert (skipped["step"], skipped["path"]) == (12, f"r/checkpoints/{latest.name}")


class TestFileSystemErrors:
    def test_a_file_as_run_dir(self, tmp_path: Path) -> None:
        """--run-dir naming a file: one line, exit 2."""
        (tmp_path / "README.md").write_text("hi\n")
        done = train("--run-dir", "README.md", cwd=tmp_path)
        assert_one_line_error(done, "README.md: expected a directory")

    def test_a_file_as_the_run_dirs_parent(self, tmp_path: Path) -> None:
        """--run-dir under a file: one line naming the path, exit 2."""
        (tmp_path / "f").write_text("hi\n")
        done = train("--run-dir", "f/run", cwd=tmp_path)
        assert_one_line_error(done, "f/run", "can't create the run directory")

    def test_a_file_where_the_checkpoints_go(self, tmp_path: Path) -> None:
        """checkpoints/ is a file: one line naming it, exit 2, no traceback."""
        config = write_config(tmp_path / "c.yaml")
        (tmp_path / "r").mkdir()
        (tmp_path / "r" / "checkpoints").write_text("not a directory\n")
        done = train("--config", config, "--run-dir", "r", "--resume", cwd=tmp_path)
        assert_one_line_error(done, "r/checkpoints")

    def test_lost_records_are_counted_and_fail_the_run(self, tmp_path: Path) -> None:
        """json_file on a full disk: the summary says how many records were lost and where; exit 1."""
        if not Path("/dev/full").exists():
            pytest.skip("needs /dev/full")
        config = write_config(tmp_path / "c.yaml", logging={"json_file": "/dev/full"}, train={"steps": 2})
        done = train("--config", config, "--run-dir", "r", cwd=tmp_path)
        assert done.returncode == 1
        assert "record(s) could not be written to /dev/full" in done.stderr.splitlines()[-1]
        assert "Traceback" not in done.stderr
        assert all(line.startswith(("speedtronic", "  ")) for line in done.stderr.splitlines()), (
            done.stderr
        )  # warnings are one line each, pointing at no source line
