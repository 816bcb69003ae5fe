"""A run directory is one run: its config revisions, its lock, and a start that fails leaves no trace.

Driven as a user would, through `speedtronic train` in subprocesses (``tests.training.test_run_dirs``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from speedtronic.training import rundir
from tests.commands.test_train_signals import STARTING, loaded_libtorch, stop_when
from tests.helpers import run_records
from tests.runs.conftest import assert_one_line_error
from tests.torch_run import train_cli
from tests.training.test_run_dirs import ROOT, copy_run, train, write_config

DUMP = "tests.training.recording:DumpHook"


@pytest.fixture(scope="module")
def four_steps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 4-step run (``write_config`` with train.steps 4), trained once for the tests below
    that copy it (``copy_run``) to resume or break on their own."""
    folder = tmp_path_factory.mktemp("four-steps")
    config = write_config(folder / "c.yaml", train={"steps": 4})
    done = train("--config", config, "--run-dir", "r", cwd=folder)
    assert done.returncode == 0, done.stderr
    return folder / "r"


def tree(path: Path) -> dict[str, bytes | None]:
    """Every path under ``path`` with its bytes (``None`` for a directory)."""
    return {
        str(item.relative_to(path)): None if item.is_dir() else item.read_bytes()
        for item in sorted(path.rglob("*"))
    }


class TestConfigChanges:
    def test_a_changed_hook_config_leaks_no_secret(self, tmp_path: Path) -> None:
        """Resumed with other credentials in a hook: no secret in the records, the text log, a hook's
        view, stdout or stderr; the change is a structured record naming the key."""
        dump = tmp_path / "hook.txt"
        old = {"type": DUMP, "path": str(dump), "api_key": "s3cret-old", "password": "hunter2-old"}
        first = write_config(tmp_path / "a.yaml", logging={"hooks": [old]}, train={"steps": 4})
        assert train("--config", first, "--run-dir", "r", cwd=tmp_path).returncode == 0
        new = {**old, "api_key": "s3cret-new", "password": "hunter2-new"}
        second = write_config(tmp_path / "b.yaml", logging={"hooks": [new]}, train={"steps": 8})
        done = train("--config", second, "--run-dir", "r", "--resume", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        run_dir = tmp_path / "r"
        seen = {
            "stdout": done.stdout,
            "stderr": done.stderr,
            "hook": dump.read_text(),
            **{
                str(path): path.read_bytes().decode("utf-8", "replace")
                for path in run_dir.rglob("*")
                if path.is_file() and not path.name.startswith("config.")  # the user's own config
            },
        }
        for secret in ("s3cret-old", "hunter2-old", "s3cret-new", "hunter2-new"):
            for where, text in seen.items():
                assert secret not in text, (secret, where)
        (start,) = [r for r in run_records(run_dir) if r["event"] == "train_start" and r["start_step"] == 4]
        changes = {change["key"]: change for change in start["config_changes"]}
        assert set(changes) == {"train.steps", "logging.hooks"}
        assert (changes["train.steps"]["old"], changes["train.steps"]["new"]) == (4, 8)
        assert changes["logging.hooks"]["new"][0]["api_key"] == "[REDACTED]"
        assert changes["logging.hooks"]["new"][0]["path"] == str(dump)  # the rest stays readable
        assert "train.steps: 4 -> 8" in done.stderr

    def test_changes_are_fixed_keys_a_reader_can_infer(self, tmp_path: Path, four_steps: Path) -> None:
        """Every change is {key, old, new}: polars reads train_start.config_changes as a list of structs."""
        polars = pytest.importorskip("polars")
        copy_run(four_steps, tmp_path)
        assert train("--run-dir", "r", "--resume", "--steps", "8", cwd=tmp_path).returncode == 0
        frame = polars.read_ndjson(tmp_path / "r" / "metrics.jsonl", infer_schema_length=None)
        starts = frame.filter(polars.col("event") == "train_start")
        changes = starts.get_column("config_changes").to_list()
        assert changes == [None, [{"key": "train.steps", "old": 4, "new": 8}]]


WAIT_AT = "tests.training.recording:WaitAt"


def wait_for(path: Path, process: subprocess.Popen[str], timeout_s: float = 120) -> None:
    """Until ``path`` exists; fails if ``process`` ends first or the time runs out."""
    import time

    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def start_paused(tmp_path: Path, *args: str, step: int = 2) -> subprocess.Popen[str]:
    """`speedtronic train` paused inside ``step`` (a hook waits for the file ``go``)."""
    hook = {"type": WAIT_AT, "event": "train_step", "step": step, "ready": "ready", "go": "go"}
    config = write_config(tmp_path / "paused.yaml", logging={"hooks": [hook]}, train={"steps": 4})
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "speedtronic", "train", "--no-progress", "--config", str(config)]
    return subprocess.Popen(
        [*command, *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


class TestOneRunAtATime:
    def test_a_second_run_on_a_directory_in_use_is_refused(self, tmp_path: Path, four_steps: Path) -> None:
        """While a run trains in r, a second `train --resume` on r: one line, exit 2, r untouched."""
        copy_run(four_steps, tmp_path)
        first = start_paused(tmp_path, "--run-dir", "r", "--resume", "--steps", "8", step=6)
        try:
            wait_for(tmp_path / "ready", first)
            before = tree(tmp_path / "r")
            second = train("--run-dir", "r", "--resume", "--steps", "12", cwd=tmp_path)
            assert_one_line_error(second, "r: ", "in use by another run", f"pid {first.pid}")
            assert tree(tmp_path / "r") == before
        finally:
            (tmp_path / "go").touch()
            _, stderr = first.communicate(timeout=180)
        assert first.returncode == 0, stderr
        assert [r["start_step"] for r in run_records(tmp_path / "r") if r["event"] == "train_start"] == [0, 4]

    def test_a_killed_run_leaves_no_lock_behind(self, tmp_path: Path) -> None:
        """SIGKILL in the middle of a run: the OS drops the lock, and --resume continues at once."""
        first = start_paused(tmp_path, "--run-dir", "r")
        try:
            wait_for(tmp_path / "ready", first)
            first.send_signal(signal.SIGKILL)
        finally:
            first.communicate(timeout=180)
        assert first.returncode == -signal.SIGKILL
        done = train("--run-dir", "r", "--resume", "--steps", "4", cwd=tmp_path)
        assert done.returncode == 0, done.stderr


class TestResumeNeedsARun:
    def test_a_mistyped_resume_directory_is_an_error(self, tmp_path: Path, four_steps: Path) -> None:
        """--resume naming a directory that holds no run (runs/a holds one): one line, exit 2, nothing
        created."""
        shutil.copytree(four_steps, tmp_path / "runs" / "a")
        done = train("--run-dir", "runs/b", "--resume", cwd=tmp_path)
        assert_one_line_error(done, "runs/b: holds no run to resume", "--resume")
        assert not (tmp_path / "runs" / "b").exists()

    def test_an_empty_directory_is_not_a_run(self, tmp_path: Path) -> None:
        """An existing but empty directory: the same error, and it stays empty."""
        (tmp_path / "empty").mkdir()
        done = train("--run-dir", "empty", "--resume", cwd=tmp_path)
        assert_one_line_error(done, "empty: holds no run to resume")
        assert tree(tmp_path / "empty") == {}


BROKEN = "tests.training.recording:broken_factory"


class TestAFailedStartLeavesNoTrace:
    def test_a_new_run_whose_hook_fails_can_be_retried(self, tmp_path: Path) -> None:
        """A hook that can't be built: exit 2, no run directory left, and the retry runs."""
        tensorboard = {"type": "tensorboard", "log_dir": "{run_dir}/tb"}
        hooks = [tensorboard, {"type": BROKEN}]
        bad = write_config(tmp_path / "bad.yaml", logging={"hooks": hooks}, train={"steps": 2})
        done = train("--config", bad, "--run-dir", "runs/x", cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert "logging.hooks[1]" in done.stderr
        assert not (tmp_path / "runs").exists()
        good = write_config(tmp_path / "good.yaml", logging={"hooks": [tensorboard]}, train={"steps": 2})
        retry = train("--config", good, "--run-dir", "runs/x", cwd=tmp_path)
        assert retry.returncode == 0, retry.stderr

    def test_an_unopenable_log_file_leaves_the_directory_as_found(self, tmp_path: Path) -> None:
        """logging.file in a directory that can't be made: exit 2; a directory that held other
        files keeps exactly them."""
        (tmp_path / "r").mkdir()
        (tmp_path / "r" / "notes.txt").write_text("mine\n")
        (tmp_path / "blocker").write_text("a file, not a directory\n")
        bad = write_config(tmp_path / "bad.yaml", logging={"file": "blocker/train.log"}, train={"steps": 2})
        before = tree(tmp_path / "r")
        done = train("--config", bad, "--run-dir", "r", cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert tree(tmp_path / "r") == before

    def test_a_failed_resume_keeps_the_run_as_it_was(self, tmp_path: Path, four_steps: Path) -> None:
        """--resume with a broken hook: no new config revision, no new files, the old schedule kept."""
        copy_run(four_steps, tmp_path)
        before = tree(tmp_path / "r")
        bad = write_config(tmp_path / "bad.yaml", logging={"hooks": [{"type": BROKEN}]}, train={"steps": 6})
        for _ in range(2):
            done = train("--config", bad, "--run-dir", "r", "--resume", cwd=tmp_path)
            assert done.returncode == 2, done.stderr
        assert tree(tmp_path / "r") == before
        done = train("--run-dir", "r", "--resume", "--steps", "8", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())["train"]["schedule_steps"] == 4
        assert sorted(path.name for path in (tmp_path / "r").glob("config*.yaml")) == [
            "config.1.yaml",
            "config.yaml",
        ]


def without_torch(tmp_path: Path) -> dict[str, str]:
    """An environment whose first ``PYTHONPATH`` entry holds a ``torch`` that can't be imported (as
    where torch is not installed): a start that imports torch fails with the missing-torch hint."""
    fake = tmp_path / "no-torch" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n'
    )
    return {"PYTHONPATH": os.pathsep.join([str(fake.parent), str(ROOT)])}


class TestARefusedStartNeedsNoTorch:
    def test_a_directory_another_run_holds(self, tmp_path: Path, four_steps: Path) -> None:
        """--resume of a run another live run holds (this process), torch not importable: the one-line
        refusal naming the holder, exit 2, the run untouched."""
        run = copy_run(four_steps, tmp_path)
        before = tree(run)
        held = rundir.open_run(str(run), resume=True)
        try:
            done = train_cli(
                "--run-dir", "r", "--resume", "--steps", "8", cwd=tmp_path, env=without_torch(tmp_path)
            )
        finally:
            held.release()
        assert_one_line_error(done, "r: in use by another run", f"(pid {os.getpid()})")
        assert tree(run) == before

    def test_a_linked_lock_file(self, tmp_path: Path) -> None:
        """`.speedtronic.lock` a symbolic link, torch not importable: the one-line refusal, exit 2."""
        (tmp_path / "run").mkdir()
        (tmp_path / "victim.txt").write_text("someone else's\n")
        (tmp_path / "run" / rundir.LOCK_NAME).symlink_to(Path("..") / "victim.txt")
        done = train_cli("--run-dir", "run", "--steps", "2", cwd=tmp_path, env=without_torch(tmp_path))
        assert_one_line_error(done, "run/.speedtronic.lock: is a symbolic link (to ../victim.txt)")
        assert (tmp_path / "victim.txt").read_text() == "someone else's\n"

    def test_a_resume_of_a_directory_holding_no_run(self, tmp_path: Path) -> None:
        """--resume of a directory that holds no run, torch not importable: the one-line refusal."""
        done = train_cli("--run-dir", "nothing", "--resume", cwd=tmp_path, env=without_torch(tmp_path))
        assert_one_line_error(done, "nothing: holds no run to resume")
        assert not (tmp_path / "nothing").exists()

    def test_a_start_that_needs_torch_says_so_and_leaves_no_trace(self, tmp_path: Path) -> None:
        """A start the run directory allows, torch not importable: the missing-torch hint, exit 2, and
        the directory it opened first is gone again."""
        done = train_cli("--run-dir", "runs/a", cwd=tmp_path, env=without_torch(tmp_path))
        assert_one_line_error(done, "torch", "speedtronic train")
        assert not (tmp_path / "runs").exists()


class TestAStartRefusedAfterOpening:
    """A start that fails once the run directory is open (the device, a stop while torch imports)
    leaves the directory as it found it, its lock file holding no pid."""

    @pytest.fixture
    def cuda(self, tmp_path: Path) -> Path:
        if pytest.importorskip("torch").cuda.is_available():
            pytest.skip("needs a machine without CUDA")
        return write_config(tmp_path / "cuda.yaml", train={"device": "cuda", "steps": 8})

    def test_a_new_run_on_a_device_it_cant_use(self, tmp_path: Path, cuda: Path) -> None:
        """train.device: cuda on this CPU build, in a new directory: one line, exit 2, none left."""
        done = train("--config", cuda, "--run-dir", "runs/new", cwd=tmp_path)
        assert_one_line_error(done, "cuda.yaml: train.device: 'cuda' needs CUDA")
        assert not (tmp_path / "runs").exists()

    def test_a_directory_with_files_on_a_device_it_cant_use(self, tmp_path: Path, cuda: Path) -> None:
        """The same in a directory holding a user's file: exactly that file is left."""
        (tmp_path / "r").mkdir()
        (tmp_path / "r" / "notes.txt").write_text("mine\n")
        before = tree(tmp_path / "r")
        done = train("--config", cuda, "--run-dir", "r", cwd=tmp_path)
        assert_one_line_error(done, "train.device: 'cuda' needs CUDA")
        assert tree(tmp_path / "r") == before

    def test_a_resumed_run_on_a_device_it_cant_use(
        self, tmp_path: Path, four_steps: Path, cuda: Path
    ) -> None:
        """--resume with train.device: cuda: one line, exit 2, the run exactly as it was; it resumes."""
        run = copy_run(four_steps, tmp_path)
        before = tree(run)
        done = train("--config", cuda, "--run-dir", "r", "--resume", cwd=tmp_path)
        assert_one_line_error(done, "train.device: 'cuda' needs CUDA")
        assert tree(run) == before
        done = train("--run-dir", "r", "--resume", "--steps", "6", cwd=tmp_path)
        assert done.returncode == 0, done.stderr

    def test_a_sigterm_while_torch_imports_leaves_the_resumed_run_as_it_was(
        self, tmp_path: Path, four_steps: Path
    ) -> None:
        """SIGTERM inside torch's import, the run directory already open: exit 143, the one line,
        the run exactly as it was."""
        run = copy_run(four_steps, tmp_path)
        before = tree(run)
        command = [
            sys.executable,
            "-m",
            "speedtronic",
            "train",
            "--no-progress",
            "--run-dir",
            "r",
            "--resume",
        ]
        process = subprocess.Popen(
            [*command, "--steps", "100000"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        stderr = stop_when(process, loaded_libtorch, 0.0)
        assert process.returncode == 128 + signal.SIGTERM, stderr
        assert stderr.splitlines() == [STARTING]
        assert tree(run) == before
