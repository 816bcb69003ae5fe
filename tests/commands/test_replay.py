"""`speedtronic replay` as a user runs it: a failed replay leaves no target behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runs.conftest import assert_one_line_error, log_run


@pytest.fixture
def run_file(tmp_path: Path) -> Path:
    path = tmp_path / "run" / "metrics.jsonl"
    log_run(path)
    return path


def replay(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "speedtronic", "replay", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=dict(os.environ),
    )


class TestAFailedReplayCreatesNoTarget:
    @pytest.mark.parametrize("first", [True, False], ids=["bad_hook_last", "bad_hook_first"])
    def test_a_bad_hook_option(self, tmp_path: Path, run_file: Path, first: bool) -> None:
        """--tensorboard tb with a --hook whose option the hook doesn't take: exit 2, one line naming
        the option and the accepted ones, and neither tb nor the hook's directory exists."""
        pytest.importorskip("tensorboard")
        good = ("--tensorboard", "tb")
        bad = ("--hook", "tensorboard:log_dir=tb2,bogus=1")
        done = replay(run_file, *(good + bad if first else bad + good), cwd=tmp_path)
        assert_one_line_error(done, "tensorboard hook", "'bogus'", "accepts", "log_dir")
        assert not (tmp_path / "tb").exists()
        assert not (tmp_path / "tb2").exists()

    def test_a_target_directory_that_was_there_stays(self, tmp_path: Path, run_file: Path) -> None:
        """An empty TensorBoard directory the user made stays, empty, when the replay fails."""
        pytest.importorskip("tensorboard")
        (tmp_path / "tb").mkdir()
        bad = "tensorboard:log_dir=tb2,bogus=1"
        done = replay(run_file, "--tensorboard", "tb", "--hook", bad, cwd=tmp_path)
        assert done.returncode == 2
        assert list((tmp_path / "tb").iterdir()) == []
