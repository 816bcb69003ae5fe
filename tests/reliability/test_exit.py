"""Normal exit, KeyboardInterrupt and SIGTERM: what is on disk and which hooks were given and closed."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from tests.reliability.conftest import popen, python, read_records

# A trainer that never closes its logger. Its hook counts events and writes the count when closed;
# after each emit returns, the trainer prints the step, so the test knows what emit returned for.
TRAINER = """
import os, signal, sys, time
from speedtronic.profiling import MetricLogger
import speedtronic.lifecycle

out = {out!r}

class CountingHook:
    def __init__(self):
        self.count = 0
    def on_event(self, event, payload):
        self.count += 1
    def close(self):
        with open(out + "/closed", "w") as f:
            f.write(str(self.count))

{setup}
logger = MetricLogger(stream=open(os.devnull, "w"), json_file=out + "/m.jsonl", hooks=[CountingHook()])
for step in range({steps}):
    logger.emit("train_step", {{"step": step}})
    print(step, flush=True)
    {pace}
"""


def trainer(out: Path, steps: int, setup: str = "", pace: str = "") -> str:
    return TRAINER.format(out=str(out), steps=steps, setup=setup, pace=pace or "pass")


def interrupt(out: Path, signum: int, setup: str = "") -> tuple[int, int]:
    """Run a slow trainer, send ``signum`` after its 20th step; its exit code and last step printed."""
    child = popen(trainer(out, 100_000, setup, pace="time.sleep(0.0005)"))
    assert child.stdout is not None
    for _ in range(20):
        child.stdout.readline()
    child.send_signal(signum)
    rest = finish(child, signum)
    printed = rest.split()
    return child.returncode, int(printed[-1]) if printed else 19


def finish(child: subprocess.Popen[str], signum: int) -> str:
    """The child's stdout once it has ended; a child still running a minute after the signal is a
    failure that says how far it got and what it printed on stderr."""
    try:
        return child.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        child.kill()
        rest, errors = child.communicate()
        pytest.fail(
            f"still running 60 s after signal {signum}, at step {rest.split()[-1:]}; stderr: {errors[-3000:]}"
        )


def closed_count(out: Path) -> int | None:
    marker = out / "closed"
    return int(marker.read_text()) if marker.exists() else None


class TestExit:
    def test_forgotten_logger_is_closed_at_exit(self, tmp_path: Path) -> None:
        """Never closed: at normal exit every event is on disk and the hook was given each and closed."""
        done = python(trainer(tmp_path, 500))
        assert done.returncode == 0, done.stderr
        assert [r["step"] for r in read_records(tmp_path / "m.jsonl")] == list(range(500))
        assert closed_count(tmp_path) == 500

    def test_keyboard_interrupt(self, tmp_path: Path) -> None:
        """Ctrl-C mid-run: every event emit returned for is on disk and was given to the hook, closed."""
        code, last = interrupt(tmp_path, signal.SIGINT)
        assert code == -signal.SIGINT  # Python ends by SIGINT after an uncaught KeyboardInterrupt
        steps = [r["step"] for r in read_records(tmp_path / "m.jsonl")]
        assert steps == list(range(len(steps)))
        assert last + 1 <= len(steps) <= last + 2  # at most the event in flight is extra
        hook_count = closed_count(tmp_path)
        assert hook_count is not None
        assert last + 1 <= hook_count <= len(steps)

    def test_default_sigterm_keeps_written_records(self, tmp_path: Path) -> None:
        """A default SIGTERM kills Python without atexit: records are on disk, hooks are not closed."""
        code, last = interrupt(tmp_path, signal.SIGTERM)
        assert code == -signal.SIGTERM
        steps = [r["step"] for r in read_records(tmp_path / "m.jsonl")]
        assert steps == list(range(len(steps)))
        assert last + 1 <= len(steps) <= last + 2
        assert closed_count(tmp_path) is None  # what close_on_signals() is for

    def test_close_on_signals_closes_then_dies_by_the_signal(self, tmp_path: Path) -> None:
        """With close_on_signals(), SIGTERM closes every logger (hooks included) and still kills."""
        setup = "speedtronic.lifecycle.close_on_signals()"
        code, last = interrupt(tmp_path, signal.SIGTERM, setup)
        assert code == -signal.SIGTERM  # the scheduler still sees "killed by SIGTERM"
        steps = [r["step"] for r in read_records(tmp_path / "m.jsonl")]
        assert steps == list(range(len(steps)))
        assert last + 1 <= len(steps) <= last + 2
        hook_count = closed_count(tmp_path)
        assert hook_count is not None
        assert last + 1 <= hook_count <= len(steps)

    def test_close_on_signals_chains_a_python_handler(self, tmp_path: Path) -> None:
        """A handler installed before close_on_signals() still runs, after the loggers are closed."""
        setup = (
            "def previous(signum, frame):\n"
            "    with open(out + '/previous', 'w') as f:\n"
            "        f.write(str(os.path.exists(out + '/closed')))\n"
            "    sys.exit(3)\n"
            "signal.signal(signal.SIGTERM, previous)\n"
            "speedtronic.lifecycle.close_on_signals()\n"
        )
        child = popen(trainer(tmp_path, 100_000, setup, pace="time.sleep(0.0005)"))
        assert child.stdout is not None
        child.stdout.readline()
        child.send_signal(signal.SIGTERM)
        finish(child, signal.SIGTERM)
        assert child.returncode == 3
        assert (tmp_path / "previous").read_text() == "True"  # it ran, and after the close

    def test_ignored_signal_stays_ignored(self) -> None:
        """close_on_signals() over SIG_IGN neither closes the loggers nor ends the process."""
        done = python(
            """
            import io, os, signal
            from speedtronic.profiling import MetricLogger
            from speedtronic.lifecycle import close_on_signals
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            close_on_signals()
            logger = MetricLogger(stream=io.StringIO())
            os.kill(os.getpid(), signal.SIGTERM)
            logger.emit("after", {})
            print("alive", logger.closed)
            """
        )
        assert done.stdout.strip() == "alive False", done.stderr

    def test_no_signal_handler_installed_behind_the_users_back(self) -> None:
        """Importing speedtronic and logging leave every signal's handler as it was."""
        done = python(
            """
            import io, signal
            before = {s: signal.getsignal(s) for s in signal.valid_signals() if s not in (32, 33)}
            import speedtronic, speedtronic.lifecycle
            from speedtronic.profiling import MetricLogger
            with MetricLogger(stream=io.StringIO()) as logger:
                logger.emit("x", {})
            after = {s: signal.getsignal(s) for s in before}
            assert before == after, [s for s in before if before[s] != after[s]]
            print("same")
            """
        )
        assert done.stdout.strip() == "same", done.stderr
