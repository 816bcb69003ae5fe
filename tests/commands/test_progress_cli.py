"""`speedtronic train` on a terminal: a live bar on stdout, the text log in train.log; piped: plain log."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

pytest.importorskip("tqdm", reason="the progress bar needs tqdm (the progress extra)")


def run_on_a_terminal(args: list[str], cwd: Path, size: tuple[int, int] = (40, 120)) -> tuple[int, str]:
    """Run ``python -m speedtronic ARGS`` with stdout on a pseudo-terminal of ``size`` (rows, columns;
    ``(0, 0)``: a terminal that reports no size, and no ``COLUMNS``); return (code, screen)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", *size, 0, 0))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": str(size[1])}
    if size[1] == 0:
        del env["COLUMNS"]
        env.pop("LINES", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "speedtronic", *args],
        cwd=cwd,
        env=env,
        stdout=follower,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    os.close(follower)
    screen = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            process.kill()
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process ended
            break
        if not chunk:
            break
        screen += chunk
    os.close(leader)
    code = process.wait(timeout=60)
    assert process.stderr is not None
    process.stderr.close()
    return code, screen.decode("utf-8", "replace")


def test_terminal_gets_a_bar_and_the_log_goes_to_a_file(tmp_path: Path) -> None:
    """On a TTY: a tqdm bar reaching 100% on stdout, no text log lines there; train.log has them."""
    run_dir = tmp_path / "run"
    code, screen = run_on_a_terminal(["train", "--run-dir", str(run_dir), "--steps", "40"], tmp_path)
    assert code == 0, screen
    assert "100%" in screen
    assert "40/40" in screen
    assert " | INFO | train_step " not in screen
    log = (run_dir / "train.log").read_text().splitlines()
    assert " | INFO | train_start " in log[0]
    assert " | INFO | train_end step=40 " in log[-1]


def test_a_terminal_without_a_size_still_gets_a_bar(tmp_path: Path) -> None:
    """A pty reporting 0 columns (a CI runner's, a container's): the bar is drawn 80 columns wide."""
    run_dir = tmp_path / "run"
    code, screen = run_on_a_terminal(
        ["train", "--run-dir", str(run_dir), "--steps", "40"], tmp_path, size=(0, 0)
    )
    assert code == 0, screen
    assert "40/40" in screen
    assert "100%" in screen
    assert " | INFO | train_end step=40 " in (run_dir / "train.log").read_text()


def test_no_progress_keeps_the_plain_log_on_a_terminal(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    code, screen = run_on_a_terminal(
        ["train", "--run-dir", str(run_dir), "--steps", "20", "--no-progress"], tmp_path
    )
    assert code == 0, screen
    assert " | INFO | train_end step=20 " in screen
    assert "100%" not in screen
    assert not (run_dir / "train.log").exists()


def test_piped_stdout_keeps_the_plain_log(tmp_path: Path) -> None:
    """In CI (stdout a pipe) there is no bar: log lines only."""
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "speedtronic", "train", "--run-dir", str(run_dir), "--steps", "20"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert "%|" not in done.stdout
    assert all(" | INFO | " in line or " | WARNING | " in line for line in done.stdout.splitlines())
    assert not (run_dir / "train.log").exists()
