"""A symbolic link planted in a run directory in place of a file the run writes: refused with one
line naming it, and the file it points to is never written, truncated or emptied."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.runs.conftest import assert_one_line_error

from .test_checkpoints import finished, train  # noqa: F401  # `finished` is a fixture used below
from .test_run_dirs import write_config

VICTIM = "someone else's file\n"


def plant(link: Path, tmp_path: Path) -> Path:
    """``link`` made a symbolic link to a file outside the run, ``../victim.txt`` as the issue had it."""
    victim = tmp_path / "victim.txt"
    victim.write_text(VICTIM)
    link.unlink(missing_ok=True)
    link.symlink_to(Path("..") / "victim.txt")
    return victim


def test_a_linked_lock_file_is_refused(tmp_path: Path) -> None:
    """`.speedtronic.lock` linked to a file outside: one line naming the lock, exit 2, the file untouched."""
    (tmp_path / "run").mkdir()
    victim = plant(tmp_path / "run" / ".speedtronic.lock", tmp_path)
    done = train("--run-dir", "run", "--steps", "2", cwd=tmp_path)
    assert_one_line_error(done, "run/.speedtronic.lock: is a symbolic link (to ../victim.txt)")
    assert victim.read_text() == VICTIM
    assert (tmp_path / "run" / ".speedtronic.lock").is_symlink()  # what was there before stays


def test_a_linked_text_log_is_refused(tmp_path: Path) -> None:
    """A config whose text log is `{run_dir}/train.log`, linked to a file outside: refused, untouched."""
    config = write_config(tmp_path / "c.yaml", logging={"file": "{run_dir}/train.log"}, train={"steps": 2})
    (tmp_path / "run").mkdir()
    victim = plant(tmp_path / "run" / "train.log", tmp_path)
    done = train("--config", config, "--run-dir", "run", cwd=tmp_path)
    assert_one_line_error(done, "run/train.log: is a symbolic link (to ../victim.txt)")
    assert victim.read_text() == VICTIM


@pytest.mark.parametrize("name", ["metrics.jsonl", "config.yaml"])
def test_a_linked_file_of_a_resumed_run_is_refused(name: str, finished: Path, tmp_path: Path) -> None:  # noqa: F811  # the fixture
    """A resumed run whose metrics.jsonl or config.yaml is a link to a file outside: refused, untouched."""
    run = shutil.copytree(finished, tmp_path / "r")
    victim = plant(run / name, tmp_path)
    if name == "config.yaml":  # a config a resume can read, so the start gets as far as writing it
        victim.write_text((finished / name).read_text())
    before = victim.read_text()
    done = train("--run-dir", "r", "--resume", "--steps", "10", cwd=tmp_path)
    assert_one_line_error(done, f"r/{name}: is a symbolic link (to ../victim.txt)")
    assert victim.read_text() == before
