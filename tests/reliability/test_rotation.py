"""External log rotation: moved away (logrotate create) or truncated (copytruncate), nothing lost."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from speedtronic.profiling import MetricLogger
from speedtronic.sinks import LineFile
from tests.reliability.conftest import child_env, read_records


def emit(logger: MetricLogger, steps: range) -> None:
    for step in steps:
        logger.emit("train_step", {"step": step})


def text_steps(path: Path) -> list[int]:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    assert b"\0" not in data
    return [int(line.split(b"step=")[1].split(b" ")[0]) for line in data.splitlines()]


def json_steps(path: Path) -> list[int]:
    assert b"\0" not in path.read_bytes()
    return [r["step"] for r in read_records(path)]


class TestByHand:
    def test_moved_away_then_recreated(self, tmp_path: Path) -> None:
        """rename(2) like logrotate's create: old records stay in the moved file, new ones in a new one."""
        text, jsonl = tmp_path / "t.log", tmp_path / "m.jsonl"
        with MetricLogger(file=text, json_file=jsonl) as logger:
            emit(logger, range(5))
            text.rename(tmp_path / "t.log.1")
            jsonl.rename(tmp_path / "m.jsonl.1")
            emit(logger, range(5, 10))
        assert json_steps(tmp_path / "m.jsonl.1") == [0, 1, 2, 3, 4]
        assert json_steps(jsonl) == [5, 6, 7, 8, 9]
        assert text_steps(tmp_path / "t.log.1") == [0, 1, 2, 3, 4]
        assert text_steps(text) == [5, 6, 7, 8, 9]

    def test_truncated_in_place(self, tmp_path: Path) -> None:
        """copytruncate: the copy has the old records; the truncated file continues at 0, no NUL hole."""
        text, jsonl = tmp_path / "t.log", tmp_path / "m.jsonl"
        with MetricLogger(file=text, json_file=jsonl) as logger:
            emit(logger, range(5))
            for path in (text, jsonl):
                shutil.copy(path, f"{path}.1")
                with open(path, "r+b") as f:
                    f.truncate(0)
            emit(logger, range(5, 10))
        assert json_steps(jsonl) == [5, 6, 7, 8, 9]  # starts at offset 0: the O_APPEND end
        assert text_steps(text) == [5, 6, 7, 8, 9]
        assert json_steps(tmp_path / "m.jsonl.1") == [0, 1, 2, 3, 4]

    def test_deleted_file_is_recreated(self, tmp_path: Path) -> None:
        """A log removed under the writer is created again; later records are not written to nowhere."""
        jsonl = tmp_path / "m.jsonl"
        with MetricLogger(stream=io.StringIO(), json_file=jsonl) as logger:
            emit(logger, range(3))
            jsonl.unlink()
            emit(logger, range(3, 6))
        assert json_steps(jsonl) == [3, 4, 5]


class TestReopen:
    def test_the_next_line_after_a_move_goes_to_the_new_file(self, tmp_path: Path) -> None:
        """The path is stat'ed before each write: no line lands in the moved file after the move."""
        path = tmp_path / "m.jsonl"
        errors: list[Any] = []
        log = LineFile(path, lambda e, w, lost: errors.append(e))
        log.write(b'{"step":0}')
        path.rename(tmp_path / "m.jsonl.1")
        log.write(b'{"step":1}')
        log.close()
        assert json_steps(tmp_path / "m.jsonl.1") == [0]
        assert json_steps(path) == [1]
        assert errors == []

    def test_reopen_on_demand(self, tmp_path: Path) -> None:
        """reopen() (logrotate's postrotate, SIGHUP) opens the path afresh; the old file is let go."""
        path = tmp_path / "m.jsonl"
        with MetricLogger(stream=io.StringIO(), json_file=path) as logger:
            emit(logger, range(2))
            path.rename(tmp_path / "m.jsonl.1")
            logger.reopen()
            assert path.exists()
            emit(logger, range(2, 4))
        assert json_steps(tmp_path / "m.jsonl.1") == [0, 1]
        assert json_steps(path) == [2, 3]

    def test_a_write_after_close_names_the_file(self, tmp_path: Path) -> None:
        log = LineFile(tmp_path / "m.jsonl", lambda e, w, lost: None)
        log.close()
        with pytest.raises(ValueError, match=r"m\.jsonl is closed"):
            log.write(b"{}")


LOGROTATE = shutil.which("logrotate") or shutil.which("/usr/sbin/logrotate")


@pytest.mark.skipif(LOGROTATE is None, reason="logrotate is not installed (apt-get install logrotate)")
class TestRealLogrotate:
    @pytest.mark.parametrize("mode", ["create", "copytruncate"])
    def test_logrotate(self, mode: str, tmp_path: Path) -> None:
        """The real logrotate -f, in create and copytruncate mode: every record in the right file."""
        text, jsonl = tmp_path / "t.log", tmp_path / "m.jsonl"
        config = tmp_path / "rotate.conf"
        config.write_text(f"{tmp_path}/*.log {tmp_path}/*.jsonl {{\n  rotate 3\n  {mode}\n  missingok\n}}\n")
        with MetricLogger(file=text, json_file=jsonl) as logger:
            emit(logger, range(5))
            assert LOGROTATE is not None
            subprocess.run([LOGROTATE, "-f", "-s", str(tmp_path / "state"), str(config)], check=True)
            emit(logger, range(5, 10))
        assert json_steps(tmp_path / "m.jsonl.1") == [0, 1, 2, 3, 4]
        assert json_steps(jsonl) == [5, 6, 7, 8, 9]
        assert text_steps(tmp_path / "t.log.1") == [0, 1, 2, 3, 4]
        assert text_steps(text) == [5, 6, 7, 8, 9]

    @pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/<pid>/fd (Linux)")
    def test_postrotate_sighup_lets_go_of_the_moved_files_at_once(self, tmp_path: Path) -> None:
        """create mode with postrotate kill -HUP and reopen_on_signals(): a process that writes
        nothing holds the moved files no longer, and its next records go to the new files."""
        text, jsonl = tmp_path / "t.log", tmp_path / "m.jsonl"
        config = tmp_path / "rotate.conf"
        config.write_text(
            f"{text} {jsonl} {{\n  rotate 3\n  create\n  sharedscripts\n"
            f"  postrotate\n    kill -HUP $(cat {tmp_path}/pid)\n  endscript\n}}\n"
        )
        child = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(IDLE_CHILD), str(tmp_path)],
            stdout=subprocess.PIPE, text=True, env=child_env(),
        )  # fmt: skip
        try:
            assert child.stdout is not None
            assert child.stdout.readline() == "idle\n"
            assert LOGROTATE is not None
            subprocess.run([LOGROTATE, "-f", "-s", str(tmp_path / "state"), str(config)], check=True)
            wait_until(lambda: open_files(child.pid) >= {str(text), str(jsonl)}, "the files to be reopened")
            assert not {f"{text}.1", f"{jsonl}.1"} & open_files(child.pid)
            (tmp_path / "go").touch()
            assert child.wait(60) == 0
        finally:
            child.kill()
            child.wait()
        assert json_steps(tmp_path / "m.jsonl.1") == [0, 1, 2]
        assert json_steps(jsonl) == [3, 4]
        assert text_steps(tmp_path / "t.log.1") == [0, 1, 2]
        assert text_steps(text) == [3, 4]


IDLE_CHILD = """
    import os, sys, time
    from speedtronic.lifecycle import reopen_on_signals
    from speedtronic.profiling import MetricLogger

    folder = sys.argv[1]
    with MetricLogger(file=f"{folder}/t.log", json_file=f"{folder}/m.jsonl") as logger:
        reopen_on_signals()
        with open(f"{folder}/pid", "w") as pid:
            pid.write(str(os.getpid()))
        for step in range(3):
            logger.emit("train_step", {"step": step})
        print("idle", flush=True)
        while not os.path.exists(f"{folder}/go"):
            time.sleep(0.001)
        for step in range(3, 5):
            logger.emit("train_step", {"step": step})
"""


def open_files(pid: int) -> set[str]:
    """The paths of the files process ``pid`` holds open (a moved file under its new name)."""
    files = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            files.add(os.readlink(fd))
    return files


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    """Wait until ``condition()`` holds; the deadline only bounds a failure."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


class Tailer:
    """A real tailing reader: GNU ``tail -F`` (follows the name across rotation), its lines collected,
    and what it says on stderr when it notices a rotation."""

    NOTICED = (b"file truncated", b"following new file")
    """tail's words for a rotation it noticed: copytruncate, and create (the name is a new file)."""

    def __init__(self, path: Path) -> None:
        self.lines: list[bytes] = []
        self.notes: list[bytes] = []
        self._process = subprocess.Popen(
            ["tail", "-F", "-n", "+1", "-s", "0.01", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for target in (self._read, self._read_notes):
            threading.Thread(target=target, daemon=True).start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self.lines.append(line)

    def _read_notes(self) -> None:
        assert self._process.stderr is not None
        for line in self._process.stderr:
            self.notes.append(line)

    def wait_for(self, count: int, timeout: float = 120.0) -> None:
        """Wait until ``count`` lines were read; the deadline only bounds a failure."""
        wait_until(lambda: len(self.lines) >= count, f"tail to read {count} lines", timeout)

    def wait_rotated(self, count: int, timeout: float = 120.0) -> None:
        """Wait until tail has said ``count`` times that it noticed a rotation: a copytruncate it had not
        noticed before the file grew past its offset again would be read from that offset on."""

        def noticed() -> int:
            return sum(any(word in note for word in self.NOTICED) for note in list(self.notes))

        wait_until(lambda: noticed() >= count, f"tail to notice rotation {count}", timeout)

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(10)


@pytest.mark.skipif(LOGROTATE is None, reason="logrotate is not installed (apt-get install logrotate)")
@pytest.mark.skipif(shutil.which("tail") is None, reason="needs GNU tail")
class TestTailingReader:
    @pytest.mark.parametrize("mode", ["create", "copytruncate"])
    def test_nothing_lost_duplicated_or_torn_at_the_reader(self, mode: str, tmp_path: Path) -> None:
        """Five real logrotate runs while a tail -F reader follows the JSONL: every record emitted
        after a rotation goes to the new file at once, so the reader gets each record exactly once."""
        jsonl = tmp_path / "m.jsonl"
        config = tmp_path / "rotate.conf"
        config.write_text(f"{jsonl} {{\n  rotate 10\n  {mode}\n  missingok\n}}\n")
        jsonl.parent.mkdir(parents=True, exist_ok=True)
        jsonl.touch()
        reader = Tailer(jsonl)
        per_round, rounds = 400, 5
        try:
            with MetricLogger(stream=io.StringIO(), json_file=jsonl) as logger:
                for r in range(rounds):
                    emit(logger, range(r * per_round, (r + 1) * per_round))
                    reader.wait_for((r + 1) * per_round)  # a shipper that keeps up
                    assert LOGROTATE is not None
                    subprocess.run([LOGROTATE, "-f", "-s", str(tmp_path / "state"), str(config)], check=True)
                    reader.wait_rotated(r + 1)  # the reader notices the rotation; the writer is told nothing
                emit(logger, range(rounds * per_round, (rounds + 1) * per_round))
            total = (rounds + 1) * per_round
            reader.wait_for(total)
        finally:
            reader.stop()
        steps = [json.loads(line)["step"] for line in reader.lines]  # every line strict JSON
        assert len(steps) == len(set(steps)), "duplicated at the reader"
        assert sorted(steps) == list(range(total)), f"lost at the reader: {total - len(set(steps))}"
        on_disk = [step for path in sorted(tmp_path.glob("m.jsonl*")) for step in json_steps(path)]
        assert sorted(on_disk) == list(range(total))


ROTATIONS = 200

SIGHUP_CHILD = """
    import os, signal, sys
    from speedtronic.lifecycle import reopen_on_signals
    from speedtronic.profiling import MetricLogger

    mode, folder = sys.argv[1], sys.argv[2]
    logger = MetricLogger(file=f"{folder}/t.log", json_file=f"{folder}/m.jsonl")
    signals, inside = 0, False

    def emit_one(signum, frame):
        global signals, inside
        if not inside:  # a storm of signals: not one handler inside another, a thousand deep
            inside, signals = True, signals + 1
            logger.emit("on_signal", {"step": signals})
            inside = False

    if mode == "reopen_on_signals":
        reopen_on_signals()
    else:
        signal.signal(signal.SIGHUP, emit_one)
    print(os.getpid(), flush=True)
    step = 0
    while not os.path.exists(f"{folder}/stop"):
        step += 1
        logger.emit("train_step", {"step": step})
    logger.close()
    print(step, signals, logger.write_errors, flush=True)
"""


class TestSignalsDuringRotation:
    @pytest.mark.parametrize("mode", ["reopen_on_signals", "emit_from_the_handler"])
    def test_each_file_gets_only_its_own_lines(self, mode: str, tmp_path: Path) -> None:
        """Rotations (rename, then SIGHUPs until both files are back: logrotate's create, postrotate)
        while the process emits, the handler reopening the files or emitting a record: the JSONL
        holds only records and the text log only text lines, each once, none lost; close() succeeds."""
        child = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(SIGHUP_CHILD), mode, str(tmp_path)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(),
        )  # fmt: skip
        try:
            assert child.stdout is not None
            pid = int(child.stdout.readline())
            for rotation in range(1, ROTATIONS + 1):
                for name in ("t.log", "m.jsonl"):
                    (tmp_path / name).rename(tmp_path / f"{name}.{rotation}")
                deadline = time.monotonic() + 30  # bounds a failure only
                while not all((tmp_path / name).exists() for name in ("t.log", "m.jsonl")):
                    os.kill(pid, signal.SIGHUP)  # until the writer has reopened both: some land inside
                    assert time.monotonic() < deadline, "the files were not written again"
            (tmp_path / "stop").touch()
            out, err = child.communicate(timeout=60)
        finally:
            child.kill()
            child.wait()
        assert child.returncode == 0, err  # close() raised nothing
        assert "Warning" not in err, err
        steps, signals, write_errors = map(int, out.split())
        assert write_errors == 0
        emitted = sorted(
            [("on_signal", n) for n in range(1, signals + 1)]
            + [("train_step", n) for n in range(1, steps + 1)]
        )
        records = [r for path in tmp_path.glob("m.jsonl*") for r in read_records(path)]
        assert sorted((r["event"], r["step"]) for r in records) == emitted
        lines = [line for path in tmp_path.glob("t.log*") for line in path.read_bytes().splitlines()]
        assert not [line for line in lines if line.startswith(b"{")], "records in the text log"
        texts = [line.split(b" | ")[2].decode().split()[:2] for line in lines]
        assert sorted((event, int(step.removeprefix("step="))) for event, step in texts) == emitted
