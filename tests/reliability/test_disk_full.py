"""Disk full and I/O errors: emit doesn't raise, losses are counted and noted, logging resumes whole."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import subprocess
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from speedtronic import LoggingFailureWarning, sinks
from speedtronic.profiling import MetricLogger
from tests.reliability.conftest import read_records, strict_loads

DEV_FULL = Path("/dev/full")
needs_dev_full = pytest.mark.skipif(not DEV_FULL.exists(), reason="no /dev/full on this system")


@needs_dev_full
class TestDevFull:
    @pytest.mark.parametrize("sink", ["json_file", "file"])
    def test_emit_never_raises_and_reports_with_a_count(self, sink: str) -> None:
        """/dev/full as JSONL or text file: 100 emits, none raises; warned 7 times, counting the losses."""
        hook_calls = []
        with pytest.warns(LoggingFailureWarning) as warned:
            options: dict[str, Any] = {sink: DEV_FULL, "hooks": [lambda e, p: hook_calls.append(e)]}
            if sink == "json_file":
                options["stream"] = io.StringIO()
            with MetricLogger(**options) as logger:
                for step in range(100):
                    logger.emit("train_step", {"step": step})
                assert logger.write_errors == 100
        messages = [str(w.message) for w in warned]
        assert len(messages) == 7  # the 1st, 2nd, 4th ... 64th failure: reported, then rate-limited
        assert "No space left on device" in messages[0]
        assert messages[-1].endswith("64 record(s) lost so far")
        assert len(hook_calls) == 100  # hooks are not held up by a failing file


class FakeDisk:
    """os.write with a capacity: accepts bytes until full (a short write, then ENOSPC), like a disk."""

    def __init__(self, free: int) -> None:
        self.free = free

    def write(self, fd: int, data: bytes) -> int:
        if self.free <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = os.write(fd, bytes(data[: self.free]))
        self.free -= n
        return n


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> FakeDisk:
    fake = FakeDisk(free=10**9)
    monkeypatch.setattr(sinks, "os", types.SimpleNamespace(**{**vars(os), "write": fake.write}))
    return fake


class TestRecovery:
    @pytest.mark.parametrize("sink", ["json_file", "file"])
    def test_resumes_with_a_note_and_no_broken_line(self, sink: str, disk: FakeDisk, tmp_path: Path) -> None:
        """Full mid-record, 5 records lost, space back: the torn record is completed, a note counts 5."""
        path = tmp_path / "out"
        options: dict[str, Any] = {sink: path}
        if sink == "json_file":
            options["stream"] = io.StringIO()
        with pytest.warns(LoggingFailureWarning), MetricLogger(**options) as logger:
            for step in range(3):
                logger.emit("train_step", {"step": step})
            disk.free = 20  # the next record fits only in part
            for step in range(3, 9):
                logger.emit("train_step", {"step": step})
            disk.free = 10**9  # space returns
            for step in range(9, 12):
                logger.emit("train_step", {"step": step})
            assert logger.write_errors == 6
        lines = path.read_bytes().split(b"\n")
        assert lines.pop() == b""
        if sink == "json_file":
            records = [strict_loads(line) for line in lines]
            assert [r.get("step") for r in records] == [0, 1, 2, 3, None, 9, 10, 11]
            note = records[4]
            assert note["event"] == "logging_error"
            assert note["lost_records"] == 5
            assert "No space left on device" in note["error"]
        else:
            assert [b"step=3 " in lines[3], b"| ERROR | logging_error" in lines[4]] == [True, True]
            assert b"lost_records=5" in lines[4]
            assert len(lines) == 8

    @pytest.mark.parametrize("reopen", [False, True])
    def test_a_line_written_in_part_is_not_lost(self, reopen: bool, disk: FakeDisk, tmp_path: Path) -> None:
        """A record cut by a full disk, then reopen() (logrotate's postrotate) or not, then space back:
        the record is finished in place, not counted lost, and the note counts only the lost ones."""
        path = tmp_path / "m.jsonl"
        logger = MetricLogger(stream=io.StringIO(), json_file=path)
        with pytest.warns(LoggingFailureWarning), logger:
            logger.emit("train_step", {"step": 1})
            disk.free = 20  # the next record fits only in part
            for step in (2, 3, 4):
                logger.emit("train_step", {"step": step})
            if reopen:
                logger.reopen()
            disk.free = 10**9
            logger.emit("train_step", {"step": 5})
            assert logger.lost_records == {str(path): 2}
        records = [strict_loads(line) for line in path.read_bytes().splitlines()]
        assert [r.get("step") for r in records] == [1, 2, None, 5]
        assert records[2]["lost_records"] == 2

    def test_failed_note_is_retried(self, disk: FakeDisk, tmp_path: Path) -> None:
        """Still full when the note is due: it is retried later with the count still right."""
        path = tmp_path / "m.jsonl"
        with pytest.warns(LoggingFailureWarning), MetricLogger(stream=io.StringIO(), json_file=path) as log:
            log.emit("a", {})
            disk.free = 0
            log.emit("lost", {})
            log.emit("lost", {})
            disk.free = 10**9
            log.emit("b", {})
        records = read_records(path)
        assert [r["event"] for r in records] == ["a", "logging_error", "b"]
        assert records[1]["lost_records"] == 2


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, where this machine lets the test mount one."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"can't mount a tmpfs here (needs root / CAP_SYS_ADMIN): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


class TestRealFilesystem:
    def test_small_tmpfs_fills_up_and_recovers(self, small_tmpfs: Path) -> None:
        """A real full filesystem: no raise, lost records noted, every line whole after space returns."""
        filler = small_tmpfs / "filler"
        path = small_tmpfs / "m.jsonl"
        with pytest.warns(LoggingFailureWarning), MetricLogger(stream=io.StringIO(), json_file=path) as log:
            log.emit("train_step", {"step": 0, "blob": "x" * 300})
            with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
                while f.write(b"\0" * 4096):
                    pass
            step = 1
            while log.write_errors < 10:  # writes now fail; a record may have gone in part
                log.emit("train_step", {"step": step, "blob": "x" * 300})
                step += 1
            filler.unlink()
            for more in range(step, step + 5):
                log.emit("train_step", {"step": more, "blob": "x" * 300})
        records = read_records(path)  # every line parses, no torn one in the middle
        notes = [r for r in records if r["event"] == "logging_error"]
        assert len(notes) == 1
        steps = [r["step"] for r in records if r["event"] == "train_step"]
        assert steps[-5:] == list(range(step, step + 5))
        assert steps == sorted(set(steps))
        assert notes[0]["lost_records"] == (step + 5) - len(steps)  # emitted minus written


class TestRaisingReport:
    """``on_error`` may raise: ``MetricLogger`` warns, and a test suite escalates warnings to errors."""

    @pytest.mark.parametrize("steps", [[5, 3, "ENOSPC"], [5, "ENOSPC"]], ids=["two-short", "one-short"])
    def test_a_line_left_half_written_is_finished_before_the_next(
        self, steps: list[Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """Short writes, then ENOSPC, reported by raising: the line is finished first, nothing lost."""
        script = list(steps)

        def write(fd: int, data: bytes) -> int:
            if not script:
                return os.write(fd, data)
            step = script.pop(0)
            if step == "ENOSPC":
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return os.write(fd, bytes(data[:step]))

        def escalated(error: OSError, where: str, lost: bool) -> None:
            raise RuntimeError(f"could not write {where}: {error}")

        monkeypatch.setattr(sinks, "os", types.SimpleNamespace(**{**vars(os), "write": write}))
        path = tmp_path / "m.jsonl"
        log = sinks.LineFile(path, escalated)
        with pytest.raises(RuntimeError, match="No space left"):
            log.write(b'{"a":1,"loss":0.5}')
        log.write(b'{"b":2}')
        log.close()
        assert [strict_loads(line) for line in path.read_bytes().splitlines()][:2] == [
            {"a": 1, "loss": 0.5},
            {"b": 2},
        ]
