"""Ctrl-C or SIGTERM at any moment of a short command's life: one line and exit code 130 or 143, or
the signal's own death before speedtronic's code runs; never a traceback or a crash. No timing is
asserted: every delay allows the same outcomes (benchmarks/startup_signals.py measures the window)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from speedtronic.commands.cli import main
from speedtronic.profiling import MetricLogger

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/<pid>/status")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small finished run for `summarize`."""
    path = tmp_path_factory.mktemp("startup") / "run"
    with MetricLogger(json_file=path / "metrics.jsonl", stream=io.StringIO()) as logger:
        logger.emit("train_start", {"steps": 20})
        for step in range(1, 21):
            logger.emit("train_step", {"step": step, "loss": 1.0 / step})
        logger.emit("train_end", {"step": 20, "status": "completed"})
    return path


def spawn(*command: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "speedtronic", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a terminal's SIGINT
    )


def handler_in(process: subprocess.Popen[str]) -> bool:
    """Wait until speedtronic's handlers are in (SIGTERM's bit in SigCgt); False if it ended first."""
    status = Path(f"/proc/{process.pid}/status")
    while process.poll() is None:
        try:
            caught = next(line for line in status.read_text().splitlines() if line.startswith("SigCgt:"))
        except (OSError, StopIteration):
            break
        if int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)):
            return True
    return False


def assert_allowed(process: subprocess.Popen[str], signum: int) -> None:
    """One `speedtronic:` line and 128 + the signal; or finished (0); or the signal's own death with
    nothing printed (before speedtronic's code ran, or in Python's last teardown after it)."""
    _, stderr = process.communicate(timeout=120)
    code = process.returncode
    assert "Traceback" not in stderr, stderr
    assert code not in (-signal.SIGSEGV, -signal.SIGABRT), stderr
    lines = stderr.strip().splitlines()
    if code == 128 + signum:
        assert len(lines) == 1, stderr
        assert lines[0].startswith(("speedtronic: interrupted", "speedtronic: terminated (SIGTERM)")), stderr
    elif code == -signum:
        assert lines == [], stderr
    else:
        assert code == 0, (code, stderr)


COMMANDS = {"summarize": ("summarize", "{run}"), "train --help": ("train", "--help")}


@pytest.mark.parametrize("delay_s", [0.0, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8])
@pytest.mark.parametrize("name", COMMANDS)
def test_sigterm_at_any_moment(name: str, delay_s: float, run: Path) -> None:
    """SIGTERM at delays spread over the start and the run: one line and 143, the signal's own death
    (before speedtronic's code ran), or the command had finished; never a traceback."""
    process = spawn(*(part.format(run=run) for part in COMMANDS[name]))
    time.sleep(delay_s)  # the delay spreads the signal over the start; nothing about time is asserted
    process.send_signal(signal.SIGTERM)
    assert_allowed(process, signal.SIGTERM)


@pytest.mark.parametrize("delay_s", [0.0, 0.005, 0.02, 0.05, 0.2])
@pytest.mark.parametrize("name", COMMANDS)
def test_ctrl_c_once_speedtronic_runs(name: str, delay_s: float, run: Path) -> None:
    """SIGINT at delays after speedtronic's handlers are in (imports, parsing, the command, its exit):
    one line and 130, or the command had finished; never a KeyboardInterrupt traceback or a crash."""
    process = spawn(*(part.format(run=run) for part in COMMANDS[name]))
    assert handler_in(process), "speedtronic's handlers never showed while the command ran"
    time.sleep(delay_s)
    process.send_signal(signal.SIGINT)
    assert_allowed(process, signal.SIGINT)


def test_main_called_in_process_puts_the_handlers_back(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """main() run inside another program (a test, a script) leaves its SIGINT and SIGTERM handlers as
    they were."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert main(["summarize", str(run)]) == 0
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert "run" in capsys.readouterr().out
