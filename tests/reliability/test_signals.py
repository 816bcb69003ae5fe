"""Signal handlers never hang on a lock the interrupted frame holds (background hooks' queue above all).

Each case runs in child processes with timeouts, many times over, so a signal lands at many points of
an emit, including inside the hand-over to the background hooks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRIES = 24
TIMEOUT_S = 120

SIGTERM_CHILD = textwrap.dedent(
    """
    import sys
    from speedtronic.hooks import background
    from speedtronic.lifecycle import close_on_signals
    from speedtronic.profiling import MetricLogger

    mode, path = sys.argv[1], sys.argv[2]
    hooks = [lambda event, payload: None]
    if mode == "wrapped":
        hooks = [background(hooks[0])]
    logger = MetricLogger(json_file=path, stream=open("/dev/null", "w"), hooks=hooks,
                          background_hooks=(mode == "logger"))
    close_on_signals()
    step = 0
    while True:
        step += 1
        logger.emit("train_step", {"step": step})
        if step == 200:
            print("ready", flush=True)
    """
)

ALARM_CHILD = textwrap.dedent(
    """
    import signal, sys
    from speedtronic.profiling import MetricLogger

    logger = MetricLogger(json_file=sys.argv[1], file=sys.argv[1] + ".log",
                          hooks=[lambda event, payload: None], background_hooks=True)
    fired = 0

    def alarm(signum, frame):
        global fired
        fired += 1
        logger.emit("alarm", {"n": fired})

    signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)
    for step in range(20_000):
        logger.emit("train_step", {"step": step})
    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    logger.close()
    print("done", fired, logger.write_errors, flush=True)
    """
)


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.parametrize("mode", ["logger", "wrapped"])
def test_sigterm_with_background_hooks_never_hangs(tmp_path: Path, mode: str) -> None:
    """close_on_signals() with background_hooks=True or background(hook): SIGTERM at any point of an
    emit ends the process by the signal, every time."""
    children = [
        subprocess.Popen(
            [sys.executable, "-c", SIGTERM_CHILD, mode, str(tmp_path / f"m{i}.jsonl")],
            stdout=subprocess.PIPE, text=True, env=env(),
        )
        for i in range(TRIES)
    ]  # fmt: skip
    hung = 0
    for child in children:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGTERM)
    for child in children:
        try:
            assert child.wait(TIMEOUT_S) == -signal.SIGTERM
        except subprocess.TimeoutExpired:
            hung += 1
            child.kill()
            child.wait()
    assert hung == 0


def test_emit_from_a_signal_handler_with_background_hooks_never_hangs(tmp_path: Path) -> None:
    """A SIGALRM handler emitting every 2 ms while the main thread emits with background hooks: the
    run finishes, and every record of either kind is in the files (an alarm that interrupted a
    hand-over to the hooks is dropped for the hooks only)."""
    for i in range(4):
        path = tmp_path / f"m{i}.jsonl"
        done = subprocess.run(
            [sys.executable, "-c", ALARM_CHILD, str(path)],
            capture_output=True, text=True, env=env(), timeout=TIMEOUT_S,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        fired, lost = map(int, done.stdout.split()[1:])
        assert lost == 0
        lines = path.read_text().splitlines()
        assert sum('"event":"train_step"' in line for line in lines) == 20_000
        assert sum('"event":"alarm"' in line for line in lines) == fired
