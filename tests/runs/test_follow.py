"""Following a run as it is written: every record once, whole, across ranks, rotation, truncation,
deletion and replacement, with inotify and with polling."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from speedtronic.profiling import MetricLogger
from speedtronic.runs.follow import Follower, inotify_supported, position_holds
from speedtronic.runs.reader import RunError, read_records
from tests.runs.conftest import log_run

MODES = [True, pytest.param(False, marks=pytest.mark.skipif(not inotify_supported("."), reason="no inotify"))]


def steps(records: list) -> list[int]:
    return [record.payload["step"] for record in records if record.event == "train_step"]


def until(follower: Follower, done: Callable[[list], bool], timeout: float = 60) -> list:
    """Read until ``done(records so far)``; the timeout only guards against a hang."""
    got: list = []
    deadline = time.monotonic() + timeout
    while not done(got):
        assert time.monotonic() < deadline, f"gave up waiting; got {steps(got)}"
        follower.wait(0.05)
        got += follower.read()
    return got


def logger(path: Path) -> MetricLogger:
    return MetricLogger(stream=io.StringIO(), json_file=path)


@pytest.mark.parametrize("poll", MODES)
class TestFollower:
    def test_equals_read_back(self, tmp_path: Path, poll: bool) -> None:
        """A followed record equals the record read back: event, payload, rank, segment, line."""
        run = tmp_path / "run" / "metrics.jsonl"
        log_run(run)
        with Follower(run.parent, poll=poll) as follower:
            followed = follower.read()
        assert followed == list(read_records(run, rank="all"))

    def test_torn_line_waits_for_its_newline(self, tmp_path: Path, poll: bool) -> None:
        """A line is consumed only once it ends in a newline: never torn, never twice."""
        run = tmp_path / "metrics.jsonl"
        run.write_text('{"event": "train_step", "step": 1}\n{"event": "train_step", "st')
        with Follower(run, poll=poll) as follower:
            assert steps(follower.read()) == [1]
            assert follower.read() == []
            with run.open("a") as file:
                file.write('ep": 2}\n')
            assert steps(until(follower, lambda got: len(got) >= 1)) == [2]

    def test_ranks_that_appear_later_and_restarts(self, tmp_path: Path, poll: bool) -> None:
        """A rank whose file appears later is followed; a restart's train_start begins a new segment."""
        run = tmp_path / "run"
        run.mkdir()
        with Follower(run, poll=poll) as follower:
            log_run(run / "metrics.jsonl", [("train_start", {"start_step": 0}), ("train_step", {"step": 1})])
            until(follower, lambda got: len(got) >= 2)
            (run / "metrics.rank1.jsonl").write_text('{"event": "train_step", "step": 1, "rank": 1}\n')
            log_run(run / "metrics.jsonl", [("train_start", {"start_step": 1}), ("train_step", {"step": 2})])
            got = until(follower, lambda got: len(got) >= 3)
        assert sorted((r.event, r.rank, r.segment) for r in got) == [
            ("train_start", 0, 1),
            ("train_step", 0, 1),
            ("train_step", 1, 0),
        ]

    def test_create_rotation_truncation_deletion_replacement(self, tmp_path: Path, poll: bool) -> None:
        """logrotate create (moved away, new file), copytruncate (copied, cut, written past the old
        offset), deletion and replacement by rename: every step once, in order."""
        run = tmp_path / "run"
        run.mkdir()
        path = run / "metrics.jsonl"
        log = logger(path)
        got: list = []
        with Follower(run, poll=poll) as follower:
            step = 0

            def emit(count: int) -> None:
                nonlocal step
                for _ in range(count):
                    step += 1
                    log.emit("train_step", {"step": step})

            emit(3)
            got += until(follower, lambda more: len(more) >= 3)
            emit(2)
            os.rename(path, run / "metrics.jsonl.1")  # create: moved away; the logger reopens the path
            emit(3)
            got += until(follower, lambda more: len(more) >= 5)
            emit(2)
            shutil.copyfile(path, run / "metrics.jsonl.2")  # copytruncate
            os.truncate(path, 0)
            emit(6)  # past the old offset: only the changed bytes say it was cut
            got += until(follower, lambda more: len(more) >= 8)
            emit(1)
            got += until(follower, lambda more: len(more) >= 1)
            path.unlink()  # deleted; a new file comes with the next line
            emit(2)
            got += until(follower, lambda more: len(more) >= 2)
            other = run / "replacement"
            other.write_text('{"event": "train_step", "step": 100}\n')
            os.replace(other, path)  # replaced by another file renamed onto the path
            got += until(follower, lambda more: len(more) >= 1)
        log.close()
        assert steps(got) == [*range(1, 20), 100]

    def test_resumes_at_saved_positions(self, tmp_path: Path, poll: bool) -> None:
        """A follower given another's positions reads only what came after (same file, same inode)."""
        run = tmp_path / "run" / "metrics.jsonl"
        log_run(run, [("train_step", {"step": 1})])
        with Follower(run.parent, poll=poll) as first:
            assert steps(first.read()) == [1]
            positions = first.positions()
        log_run(run, [("train_step", {"step": 2})])
        with Follower(run.parent, poll=poll, positions=positions) as second:
            assert steps(second.read()) == [2]

    def test_folder_of_runs(self, tmp_path: Path, poll: bool) -> None:
        """A folder of runs: each run directory's files, and runs that appear later."""
        log_run(tmp_path / "a" / "metrics.jsonl", [("train_step", {"step": 1})])
        with Follower(tmp_path, poll=poll) as follower:
            assert steps(follower.read()) == [1]
            log_run(tmp_path / "b" / "metrics.jsonl", [("train_step", {"step": 2})])
            got = until(follower, lambda more: len(more) >= 1)
        assert [(r.source.parent.name, r.payload["step"]) for r in got] == [("b", 2)]


def test_writer_process_across_rotations(tmp_path: Path) -> None:
    """A real writer process emitting while the file is rotated 20 times (create and copytruncate):
    the follower gets exactly the lines the files hold, in order: 0 lost, 0 duplicated, 0 torn.
    (copytruncate itself loses a line written between the copy and the cut, more often on a loaded
    machine: such a line is in no file, so it is not the follower's to deliver.) A file is rotated
    only once the follower has taken a line of it: from offset 0 a truncation can't be told from
    growth, so lines copied away from a file the follower has read none of are in the copy only
    (docs/watching.md says so; GNU ``tail -F`` alike)."""
    run = tmp_path / "run"
    run.mkdir()
    path = run / "metrics.jsonl"
    script = (
        "import io, sys, time\nfrom speedtronic.profiling import MetricLogger\n"
        f"log = MetricLogger(stream=io.StringIO(), json_file={str(path)!r})\n"
        "for step in range(1, 3001):\n    log.emit('train_step', {'step': step})\n    time.sleep(0.001)\n"
        "log.close()\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", script])
    got: list = []
    with Follower(run, poll=True, interval=0.01) as follower:
        rotation = 0
        while writer.poll() is None:
            got += follower.read()
            if rotation < 20 and taken_from(follower, path):
                rotation += 1
                rotated = run / f"metrics.jsonl.{rotation}"
                if rotation % 2:
                    os.rename(path, rotated)
                else:
                    shutil.copyfile(path, rotated)
                    os.truncate(path, 0)
            time.sleep(0.01)
        assert writer.wait(timeout=120) == 0
        held = steps_held(run)  # every step but those a copytruncate's window lost, if any
        assert len(held) >= 2900
        got += until(follower, lambda more: len(got) + len(more) >= len(held), timeout=60)
    assert rotation == 20
    assert steps(got) == held


def taken_from(follower: Follower, path: Path) -> bool:
    """Whether the follower has taken a line of the file now at ``path`` (its position there is in
    that file, past its start)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return False
    position = follower.positions().get(path.name)
    return position is not None and position[:2] == (info.st_dev, info.st_ino) and position[2] > 0


def steps_held(run: Path) -> list[int]:
    """The steps the run's files hold (the current one and every rotated copy), in order."""
    held = set()
    for file in run.glob("metrics.jsonl*"):
        for line in file.read_bytes().splitlines():
            record = orjson.loads(line)
            if record["event"] == "train_step":
                held.add(record["step"])
    return sorted(held)


def test_missing_path_is_an_error(tmp_path: Path) -> None:
    """A path that does not exist is a RunError naming it."""
    with pytest.raises(RunError, match="nope"):
        Follower(tmp_path / "nope")


LOGROTATE = shutil.which("logrotate") or shutil.which("/usr/sbin/logrotate")


@pytest.mark.skipif(LOGROTATE is None, reason="logrotate is not installed (apt-get install logrotate)")
@pytest.mark.parametrize("poll", MODES)
def test_real_logrotate_create_and_copytruncate(tmp_path: Path, poll: bool) -> None:
    """The real logrotate -f, create and copytruncate in turn (up to 10 times, at least once each) while
    a writer process emits: the follower gets exactly the lines the files hold, in order."""
    assert LOGROTATE is not None
    run = tmp_path / "run"
    run.mkdir()
    path = run / "metrics.jsonl"
    configs = []
    for mode in ("create", "copytruncate"):
        config = tmp_path / f"{mode}.conf"
        config.write_text(f"{path} {{\n  rotate 100\n  {mode}\n  missingok\n}}\n")
        configs.append(config)
    script = (
        "import io, sys, time\nfrom speedtronic.profiling import MetricLogger\n"
        f"log = MetricLogger(stream=io.StringIO(), json_file={str(path)!r})\n"
        "for step in range(1, 2001):\n    log.emit('train_step', {'step': step})\n    time.sleep(0.001)\n"
        "log.close()\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", script])
    got: list = []
    rotations = 0
    with Follower(run, poll=poll, interval=0.02) as follower:
        while writer.poll() is None:
            got += follower.read()
            if rotations < 10 and taken_from(follower, path):  # as in the test above
                state = tmp_path / "state"
                subprocess.run([LOGROTATE, "-f", "-s", str(state), str(configs[rotations % 2])], check=True)
                rotations += 1
            follower.wait(0.02)
        assert writer.wait(timeout=120) == 0
        kept = [run / f"metrics.jsonl.{n}" for n in range(rotations, 0, -1)] + [path]
        written = [step for file in kept for step in steps(list(read_records(file, rank="all")))]
        got += until(follower, lambda more: len(got) + len(more) >= len(written), timeout=60)
    assert rotations >= 2
    assert steps(got) == written
    assert written[-1] == 2000
    assert len(set(written)) == len(written)


def test_restart_after_a_rotation_reads_the_rotated_file_out(tmp_path: Path) -> None:
    """A follower resumed from saved positions after the file was rotated away (logrotate ``create``)
    while no follower ran reads the rest of the rotated file first, then the new one: nothing lost,
    nothing twice, the segments counting on."""
    run = tmp_path / "run"
    run.mkdir()
    path = run / "metrics.jsonl"
    with logger(path) as log:
        log.emit("train_start", {"start_step": 0, "target_step": 9})
        for step in (1, 2, 3):
            log.emit("train_step", {"step": step})
    with Follower(run, poll=True) as first:
        assert steps(first.read()) == [1, 2, 3]
        positions = first.positions()
    with path.open("ab") as file:  # written after the watcher stopped, then rotated away
        file.write(b'{"event": "train_step", "step": 4}\n{"event": "train_step", "step": 5}\n')
    path.rename(run / "metrics.jsonl.1")
    path.write_bytes(
        b'{"event": "train_start", "start_step": 5, "target_step": 9}\n{"event": "train_step", "step": 6}\n'
    )
    with Follower(run, poll=True, positions=positions) as second:
        got = second.read()
        assert steps(got) == [4, 5, 6]
        assert [record.segment for record in got] == [0, 0, 1, 1]
        assert {record.source for record in got} == {path}
        assert second.read() == []


def test_restart_after_a_copytruncate_reads_the_copy_then_the_file(tmp_path: Path) -> None:
    """A follower resumed from saved positions after the file was copied and truncated (logrotate
    ``copytruncate``) while no follower ran, and written past the old offset since: the lines past the
    offset come from the copy, then the file from its start; none lost, none torn."""
    run = tmp_path / "run"
    run.mkdir()
    path = run / "metrics.jsonl"
    path.write_bytes(b"".join(b'{"event": "train_step", "step": %d}\n' % step for step in (1, 2, 3)))
    with Follower(run, poll=True) as first:
        assert steps(first.read()) == [1, 2, 3]
        positions = first.positions()
    with path.open("ab") as file:
        file.write(b'{"event": "train_step", "step": 4}\n')
    shutil.copy(path, run / "metrics.jsonl.1")
    with path.open("r+b") as file:
        file.truncate(0)
    path.write_bytes(b"".join(b'{"event": "train_step", "step": %d, "pad": 0}\n' % s for s in range(5, 10)))
    with Follower(run, poll=True, positions=positions) as second:
        got = second.read()
        assert not second.skipped
        assert steps(got) == [4, 5, 6, 7, 8, 9]
        assert second.read() == []


def test_position_holds_for_the_same_file_only(tmp_path: Path) -> None:
    """A saved position holds while its file is there, grown or rotated (moved, or copied and
    truncated) beside it; not once the file was deleted and a new one (other bytes, maybe the same
    inode number) made in its place."""
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"event": "train_step", "step": 1, "t": "12:00:01"}\n')
    with Follower(tmp_path, poll=True) as follower:
        follower.read()
        [(key, position)] = follower.positions().items()
    with path.open("ab") as file:
        file.write(b'{"event": "train_step", "step": 2}\n')
    assert position_holds(tmp_path, key, position)
    path.rename(tmp_path / "metrics.jsonl.1")
    assert position_holds(tmp_path, key, position)
    shutil.copy(tmp_path / "metrics.jsonl.1", path)
    (tmp_path / "metrics.jsonl.1").unlink()
    assert position_holds(tmp_path, key, position)  # a copy holds the bytes read
    path.unlink()
    path.write_bytes(b'{"event": "train_step", "step": 1, "t": "12:30:07"}\n')
    assert not position_holds(tmp_path, key, position)
    path.unlink()
    assert not position_holds(tmp_path, key, position)
