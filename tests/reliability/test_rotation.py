"""External log rotation: moved away (logrotate create) or truncated (copytruncate), nothing lost."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from speedtronic.profiling import MetricLogger
from speedtronic.sinks import LineFile
from tests.reliability.conftest import read_records


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


class Tailer:
    """A real tailing reader: GNU ``tail -F`` (follows the name across rotation), its lines collected."""

    def __init__(self, path: Path) -> None:
        self.lines: list[bytes] = []
        self._process = subprocess.Popen(
            ["tail", "-F", "-n", "+1", "-s", "0.01", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self.lines.append(line)

    def wait_for(self, count: int, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.lines) < count and time.monotonic() < deadline:
            time.sleep(0.01)

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
                    time.sleep(0.1)  # the reader notices the rotation; the writer is told nothing
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
