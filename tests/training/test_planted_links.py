"""Something planted in a run directory in place of a file the run opens (a symbolic or hard link, a
FIFO, a socket, a directory): refused with one line naming it, or replaced; never waited on, and the
file a link points to is never written, truncated or emptied."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from speedtronic.training import rundir
from tests.helpers import ACTIVATED_PATH
from tests.runs.conftest import assert_one_line_error
from tests.torch_run import train_cli

from .test_checkpoints import train
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
def test_a_linked_file_of_a_resumed_run_is_refused(name: str, logged: Path, tmp_path: Path) -> None:
    """A resumed run whose metrics.jsonl or config.yaml is a link to a file outside: refused, untouched."""
    run = shutil.copytree(logged, tmp_path / "r")
    victim = plant(run / name, tmp_path)
    if name == "config.yaml":  # a config a resume can read, so the start gets as far as writing it
        victim.write_text((logged / name).read_text())
    before = victim.read_text()
    done = train("--run-dir", "r", "--resume", "--steps", "10", cwd=tmp_path)
    assert_one_line_error(done, f"r/{name}: is a symbolic link (to ../victim.txt)")
    assert victim.read_text() == before


# -- each kind of file planted in place of each file a resumed run opens ---------------------------

STEP_8 = "checkpoints/step_00000008.pt"
FILES = [
    "trackers.json",
    "config.yaml",
    STEP_8,  # the newest checkpoint
    "metrics.jsonl",
    "train.log",
    ".speedtronic.lock",
    "config.yaml.partial",  # the temporary name config.yaml is written under
    "checkpoints/step_00000012.pt.partial",  # the temporary name of the checkpoint this run writes
]
KINDS = ["fifo", "symlink", "hardlink", "socket", "directory"]
HUNG = 180
"""Seconds after which a run that has not ended counts as hung: a guard that fails the test (the run
blocked on an open), not a timing assertion: a refused run ends before training."""


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run trained to step 8 (checkpoints at 4 and 8) whose text log is `{run_dir}/train.log`."""
    base = tmp_path_factory.mktemp("logged")
    config = write_config(base / "c.yaml", logging={"file": "{run_dir}/train.log"}, train={"steps": 8})
    done = train_cli(
        "--config", config, "--run-dir", "r", cwd=base, env={"PATH": ACTIVATED_PATH}, timeout=HUNG
    )
    assert done.returncode == 0, done.stderr
    (base / "r" / "trackers.json").write_text("{}\n")  # as a run with trackers that have no run yet
    return base / "r"


def plant_kind(kind: str, path: Path, victim: Path) -> None:
    """``kind`` in place of ``path``: a FIFO, a symbolic link or a hard link to ``victim`` (a file
    outside the run), a bound Unix socket, or a directory."""
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    path.unlink(missing_ok=True)
    path.parent.mkdir(exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        path.symlink_to(os.path.relpath(victim, path.parent))
    elif kind == "hardlink":
        os.link(victim, path)
    elif kind == "device":  # /dev/null's numbers: a character device that reads as empty, never blocks
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("making a device node needs root (CAP_MKNOD)")
    elif kind == "socket":
        here = os.getcwd()
        os.chdir(path.parent)  # a relative name: a socket's path is limited to about 100 bytes
        try:
            with socket.socket(socket.AF_UNIX) as server:
                server.bind(path.name)
        finally:
            os.chdir(here)
    else:
        path.mkdir()


def refused(kind: str, name: str) -> bool:
    """Whether a run refuses ``kind`` in place of ``name``: anything but a plain file of its own is
    refused, except under a temporary name (removed, and the file made anew there) and a hard link
    to a file it only reads or replaces whole (renamed over, never written through)."""
    if name.endswith(".partial"):
        return kind == "directory"  # the one thing the run can't remove and won't
    if kind == "hardlink":
        return name in ("metrics.jsonl", "train.log", ".speedtronic.lock")  # written in place
    return True


EXPECTED = {
    "fifo": "is a FIFO, expected a regular file",
    "socket": "is a socket, expected a regular file",
    "directory": "is a directory, expected",
    "symlink": "is a symbolic link (to ",
    "hardlink": "has 2 hard links, expected 1",
    "device": "is a character device, expected a regular file",
}


@pytest.mark.parametrize(
    ("name", "kind"),
    [(name, kind) for name in FILES for kind in KINDS]
    + [(name, "device") for name in ("trackers.json", "config.yaml", STEP_8)],
)
def test_a_planted_file_is_refused_or_replaced_never_waited_on_or_written_through(
    name: str, kind: str, logged: Path, tmp_path: Path
) -> None:
    """`train --resume` with a FIFO, socket, directory, symbolic or hard link (or a device node) in
    place of one of the run's files: it never blocks; refused in one line naming the file and what
    was expected (exit 2), or, for a temporary name or a file renamed over, replaced (exit 0); the
    file outside untouched."""
    run = shutil.copytree(logged, tmp_path / "r")
    if name == "config.yaml":  # the config this resume records, so it is rewritten, not kept aside
        recorded = yaml.safe_load((run / name).read_text())
        recorded["train"]["steps"] = 12
        (run / name).write_text("# as written by hand\n" + yaml.safe_dump(recorded))
    victim = tmp_path / "victim.txt"
    if (run / name).is_file():  # a hard link's other name holds what the run's file held
        shutil.copyfile(run / name, victim)
    else:
        victim.write_text(VICTIM)
    before = victim.read_bytes()
    plant_kind(kind, run / name, victim)
    try:
        done = train_cli(
            "--run-dir",
            "r",
            "--resume",
            "--steps",
            "12",
            cwd=tmp_path,
            env={"PATH": ACTIVATED_PATH},
            timeout=HUNG,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"train --resume with a {kind} in place of {name} did not end in {HUNG} s: it hung")
    if refused(kind, name):
        assert_one_line_error(done, f"r/{name}: {EXPECTED[kind]}")
    else:
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        if name == "config.yaml":
            assert (run / name).stat().st_nlink == 1  # renamed over: the run's own file now
    assert victim.read_bytes() == before


class TestRunFileHelpers:
    """`rundir.write_text` and `rundir.read_text`, every write and read of a run's own file."""

    @pytest.mark.parametrize(
        ("at", "kind"),
        [("trackers.json", "symlink"), ("trackers.json", "hardlink")]
        + [("trackers.json.partial", kind) for kind in ("symlink", "hardlink", "fifo", "socket")],
    )
    def test_a_file_written_whole_is_never_written_through_what_is_planted(
        self, at: str, kind: str, tmp_path: Path
    ) -> None:
        """A link at the file's name, or a link, FIFO or socket at its temporary name: replaced, the
        file outside untouched."""
        run = tmp_path / "r"
        run.mkdir()
        victim = tmp_path / "victim.txt"
        victim.write_text(VICTIM)
        plant_kind(kind, run / at, victim)
        rundir.write_text(run / "trackers.json", '{"wandb": ["abc"]}\n')
        assert victim.read_text() == VICTIM
        info = os.lstat(run / "trackers.json")
        assert (stat.S_ISREG(info.st_mode), info.st_nlink) == (True, 1)
        assert (run / "trackers.json").read_text() == '{"wandb": ["abc"]}\n'
        assert not os.path.lexists(run / "trackers.json.partial")

    @pytest.mark.parametrize("kind", ["fifo", "socket", "directory", "symlink", "device"])
    def test_reading_what_is_planted_is_refused_at_once(self, kind: str, tmp_path: Path) -> None:
        """read_text of a FIFO nobody writes, a socket, a directory, a link or a device node:
        RunDirError naming it."""
        victim = tmp_path / "victim.txt"
        victim.write_text(VICTIM)
        plant_kind(kind, tmp_path / "config.yaml", victim)
        got: list[BaseException] = []

        def read() -> None:
            try:
                rundir.read_text(tmp_path / "config.yaml")
            except BaseException as error:  # handed to the test thread to check
                got.append(error)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(HUNG)  # a guard: a read that blocks fails the test instead of hanging the suite
        assert not reader.is_alive(), f"read_text of a {kind} blocked"
        (error,) = got
        assert isinstance(error, rundir.RunDirError)
        assert str(error).startswith(f"{tmp_path / 'config.yaml'}: {EXPECTED[kind]}")
