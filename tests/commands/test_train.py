"""`speedtronic train` as a new user meets it: stops, errors and help, in subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.test_run_dirs import ROOT, records, train, write_config
from tests.training.test_rundir import WAIT_AT, wait_for


class TestAStopSaysHowToContinue:
    @pytest.mark.parametrize(
        ("stop", "code", "said"),
        [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")],
    )
    def test_the_printed_command_continues_the_run(
        self, tmp_path: Path, stop: signal.Signals, code: int, said: str
    ) -> None:
        """Stopped in step 6 (checkpoint at 4): one line naming the command, the logger closed; that
        command then trains steps 4 -> 8."""
        hook = {"type": WAIT_AT, "event": "train_step", "step": 6, "ready": "ready", "go": "never"}
        config = write_config(tmp_path / "c.yaml", logging={"hooks": [hook]}, train={"steps": 8})
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-m", "speedtronic", "train", "--no-progress"]
        process = subprocess.Popen(
            [*command, "--config", str(config), "--run-dir", "runs/my run"],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
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
        assert stderr.splitlines() == [hint]
        again = subprocess.run(
            ["bash", "-c", f"{sys.executable} -m {hint.split('continue with: ')[1]} --no-progress"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=False,
        )
        assert again.returncode == 0, again.stderr
        assert "steps 4 -> 8 " in again.stderr
        starts = [r["start_step"] for r in records(tmp_path / "runs" / "my run") if r["event"] == "train_start"]
        assert starts == [0, 4]
