"""`speedtronic train` as a new user meets it: stops, errors and help, in subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from speedtronic.commands.train import typed
from tests.helpers import ACTIVATED_PATH, run_records
from tests.runs.conftest import assert_one_line_error
from tests.training.test_run_dirs import ROOT, train, write_config
from tests.training.test_rundir import WAIT_AT, wait_for


class TestAStopSaysHowToContinue:
    @pytest.mark.parametrize(
        ("stop", "code", "said"),
        [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")],
    )
    def test_the_printed_command_continues_the_run(
        self, tmp_path: Path, stop: signal.Signals, code: int, said: str
    ) -> None:
        """Stopped in step 6 (checkpoint at 4): one line naming the command, then where the run's files
        are, the logger closed; that command then trains steps 4 -> 8."""
        hook = {"type": WAIT_AT, "event": "train_step", "step": 6, "ready": "ready", "go": "never"}
        config = write_config(tmp_path / "c.yaml", logging={"hooks": [hook]}, train={"steps": 8})
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PATH": ACTIVATED_PATH}
        command = [sys.executable, "-m", "speedtronic", "train", "--no-progress"]
        process = subprocess.Popen(
            [*command, "--config", str(config), "--run-dir", "runs/my run"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(tmp_path / "ready", process)
            process.send_signal(stop)
        finally:
            _, stderr = process.communicate(timeout=180)
        assert process.returncode == code, stderr
        hint = (
            f"speedtronic: {said} at step 6 (latest checkpoint: step_00000004.pt); "
            "continue with: speedtronic train --run-dir 'runs/my run' --resume"
        )
        first, *files = stderr.splitlines()
        assert first == hint
        assert files == [
            "  text log     stdout",
            "  metrics      runs/my run/metrics.jsonl",
            "  checkpoints  runs/my run/checkpoints (latest: step_00000004.pt)",
            "  config       runs/my run/config.yaml",
        ]
        again = subprocess.run(
            ["bash", "-c", f"{hint.split('continue with: ')[1]} --no-progress"],  # as typed
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert again.returncode == 0, again.stderr
        assert "steps 4 -> 8 " in again.stderr
        run = run_records(tmp_path / "runs" / "my run")
        assert [r["start_step"] for r in run if r["event"] == "train_start"] == [0, 4]


class TestErrorsNameTheFileAndTheKey:
    def test_a_missing_config_file(self, tmp_path: Path) -> None:
        """--config naming no file: the path and the reason in words, no errno."""
        done = train("--config", "nope.yaml", cwd=tmp_path)
        assert_one_line_error(done, "nope.yaml: can't read it: no such file or directory")
        assert "Errno" not in done.stderr

    def test_an_unknown_hook_argument(self, tmp_path: Path) -> None:
        """The config file, the hook's key, the bad argument and the ones it takes; no Python jargon."""
        hooks = [{"type": "tensorboard", "bogus": 1}]
        config = write_config(tmp_path / "mine.yaml", logging={"hooks": hooks})
        done = train("--config", config, "--run-dir", "r", cwd=tmp_path)
        assert_one_line_error(
            done, f"{config}: logging.hooks[0]: ", "tensorboard hook", "'bogus'", "accepts", "log_dir"
        )
        assert "TypeError" not in done.stderr
        assert "__init__" not in done.stderr

    @pytest.mark.parametrize(
        ("hook", "problem"),
        [
            ({"type": "tensorboard", "log_dir": [1, 2]}, "log_dir: expected text or a path, got a list"),
            ({"type": "mlflow", "tracking_uri": 5}, "tracking_uri: expected text, got 5"),
        ],
        ids=["tensorboard_log_dir", "mlflow_tracking_uri"],
    )
    def test_a_hook_option_of_the_wrong_type(
        self, tmp_path: Path, hook: dict[str, object], problem: str
    ) -> None:
        """A hook's option of the wrong type names the config, the hook, the option and what it expected
        (it was 'can't be created: TypeError: expected str, bytes or os.PathLike object, not list');
        no run directory is made."""
        config = write_config(tmp_path / "mine.yaml", logging={"hooks": [hook]})
        done = train("--config", config, "--run-dir", "r", cwd=tmp_path)
        assert_one_line_error(done, f"{config}: logging.hooks[0]: {hook['type']} hook: {problem}")
        assert not (tmp_path / "r").exists()

    def test_a_hook_from_the_recorded_config_names_that_file(self, tmp_path: Path) -> None:
        """--resume without --config: a bad key in the run's own config.yaml is named there."""
        config = write_config(tmp_path / "c.yaml", train={"steps": 2})
        assert train("--config", config, "--run-dir", "r", cwd=tmp_path).returncode == 0
        recorded = tmp_path / "r" / "config.yaml"
        bad = "hooks: [{type: tensorboard, bogus: 1}]"
        recorded.write_text(recorded.read_text().replace("hooks: []", bad))
        done = train("--run-dir", "r", "--resume", "--steps", "4", cwd=tmp_path)
        assert_one_line_error(done, "r/config.yaml: logging.hooks[0]: ", "'bogus'")

    def test_cuda_without_cuda(self, tmp_path: Path) -> None:
        """train.device: cuda on a machine without CUDA: the file, the key, and what works instead."""
        if __import__("torch").cuda.is_available():
            pytest.skip("this machine has CUDA")
        config = write_config(tmp_path / "gpu.yaml", train={"device": "cuda"})
        done = train("--config", config, "--run-dir", "r", cwd=tmp_path)
        assert_one_line_error(done, f"{config}: train.device: ", "no CUDA", "'auto' or 'cpu'")
        assert not (tmp_path / "r").exists()

    def test_a_log_file_whose_directory_cant_be_made(self, tmp_path: Path) -> None:
        """logging.file under a regular file: the file, the key, the path in the way."""
        (tmp_path / "notes").write_text("a file\n")
        config = write_config(tmp_path / "log.yaml", logging={"file": "notes/train.log"})
        done = train("--config", config, "--run-dir", "r", cwd=tmp_path)
        assert_one_line_error(done, f"{config}: logging.file: ", "notes", "not a directory")

    def test_a_read_only_file_system_is_called_so(self, tmp_path: Path) -> None:
        """A run directory on a read-only mount: "read-only file system", not "permission denied"."""
        mount = tmp_path / "ro"
        mount.mkdir()
        inner = (
            f"mount -t tmpfs -o ro none {mount} && exec {sys.executable} -m speedtronic train "
            f"--no-progress --run-dir {mount} --steps 2"
        )
        try:
            done = subprocess.run(
                ["unshare", "-m", "sh", "-c", inner],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
        except FileNotFoundError:
            pytest.skip("needs unshare")
        if "mount" in done.stderr or "unshare" in done.stderr:
            pytest.skip(f"can't mount a read-only tmpfs here: {done.stderr.strip()}")
        assert_one_line_error(done, str(mount), "read-only file system")
        assert "permission denied" not in done.stderr.lower()


class TestPrintedCommandsAreTypable:
    @pytest.fixture
    def venv(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
        """A project with a ``.venv`` nobody activated (``make run``), this Python standing in for its."""
        scripts = tmp_path / ".venv" / "bin"
        scripts.mkdir(parents=True)
        for name in ("python", "speedtronic"):
            (scripts / name).write_text("#!/bin/sh\n")
            (scripts / name).chmod(0o755)
        monkeypatch.setattr(sys, "executable", str(scripts / "python"))
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("PATH", "/usr/bin:/bin")
        return scripts

    def test_an_unactivated_venv_is_named_by_its_path(self, venv: Path) -> None:
        """In the project: ``.venv/bin/speedtronic``; above it: relative; elsewhere: the absolute path."""
        assert typed("speedtronic") == ".venv/bin/speedtronic"
        os.chdir(venv.parents[2])
        assert typed("speedtronic") == f"{venv.parents[1].name}/.venv/bin/speedtronic"
        elsewhere = venv.parents[1] / "elsewhere"
        elsewhere.mkdir()
        os.chdir(elsewhere)
        assert typed("speedtronic") == str(venv / "speedtronic")

    def test_an_activated_venv_is_the_bare_name(self, venv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """PATH finds this venv's script: ``speedtronic``, as the user would type it."""
        monkeypatch.setenv("PATH", f"{venv}{os.pathsep}/usr/bin")
        assert typed("speedtronic") == "speedtronic"

    def test_a_command_not_beside_python_is_its_name(self, venv: Path) -> None:
        """Installed elsewhere (a system package): the name, found on PATH as usual."""
        assert typed("tensorboard") == "tensorboard"
