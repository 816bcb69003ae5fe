"""Edge cases a review of the second core found: each a behaviour users rely on, in the worst order."""

from __future__ import annotations

import errno
import gc
import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from speedtronic import LoggingFailureWarning
from speedtronic import sinks as sinks_module
from speedtronic.hooks import background
from speedtronic.processors import CapLine, JSONLRenderer, TextRenderer
from speedtronic.profiling import MetricLogger
from speedtronic.sinks import LineFile
from tests.helpers import Journal, read_jsonl

REPO = str(Path(__file__).resolve().parents[2])


def test_sigterm_inside_emit_still_closes_the_hooks(tmp_path: Path) -> None:
    """close_on_signals(): a SIGTERM that arrives while an inline hook runs still closes every hook."""
    marker = tmp_path / "closed"
    code = f"""
import os, signal, sys, threading, time
sys.path.insert(0, {REPO!r})
from speedtronic.lifecycle import close_on_signals
from speedtronic.profiling import MetricLogger
class Slow:
    def on_event(self, event, payload):  # the signal comes from another thread while this runs
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        time.sleep(600)
    def close(self):
        open({str(marker)!r}, "w").write("closed")
close_on_signals()
logger = MetricLogger(stream=open(os.devnull, "w"), hooks=[Slow()])
logger.emit("train_step", {{"step": 1}})
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == -15, done.stderr
    assert marker.read_text() == "closed"


def test_flush_waits_for_nested_background_hooks_in_order() -> None:
    """background_hooks=True feeding a background(hook): flush() returns once the inner one has all."""
    seen: list[int] = []

    def slow(event: str, payload: dict[str, Any]) -> None:
        time.sleep(0.01)
        seen.append(payload["step"])

    logger = MetricLogger(stream=io.StringIO(), hooks=[background(slow)], background_hooks=True)
    for step in range(10):
        logger.emit("train_step", {"step": step})
    assert logger.flush(60) is True
    assert seen == list(range(10))
    logger.close()


def test_flush_from_an_inline_hook_while_a_background_hook_emits_never_deadlocks() -> None:
    """An inline hook calling flush() inside emit returns at once instead of waiting on its own lock."""
    results: list[bool] = []
    logger = MetricLogger(stream=io.StringIO())

    def bg(event: str, payload: dict[str, Any]) -> None:
        if event == "go":
            logger.emit("from_worker", {})

    def inline(event: str, payload: dict[str, Any]) -> None:
        if event == "go":
            results.append(logger.flush(5))

    logger.hooks.extend([background(bg), inline])
    emitter = threading.Thread(target=logger.emit, args=("go", {}))
    emitter.start()
    emitter.join(60)
    assert not emitter.is_alive(), "emit deadlocked"
    assert logger.flush(60)
    logger.close()
    assert len(results) == 1


def test_a_collected_background_logger_delivers_then_closes_its_hooks() -> None:
    """background_hooks=True, never closed, collected: hooks get every event before close, and the
    worker thread ends."""
    journal: list[str] = []
    logger = MetricLogger(stream=io.StringIO(), hooks=[Journal("h", journal)], background_hooks=True)
    for _ in range(10):
        logger.emit("x", {})
    name = f"speedtronic-hooks-{id(logger):x}"
    del logger
    gc.collect()
    assert journal == ["h x"] * 10 + ["h close"]
    deadline = time.monotonic() + 60  # only bounds a failure
    while any(t.name == name for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the worker thread never ended"
        time.sleep(0.01)


def test_a_background_hook_closing_its_logger_lets_the_event_finish_first() -> None:
    """Hook a closes the logger on "stop": hook b still gets "stop" before it is closed, nothing after."""
    journal: list[str] = []
    logger = MetricLogger(stream=io.StringIO(), background_hooks=True)

    def a(event: str, payload: dict[str, Any]) -> None:
        journal.append(f"a {event}")
        if event == "stop":
            logger.close()

    logger.hooks.extend([a, Journal("b", journal)])
    logger.emit("go", {})
    logger.emit("stop", {})
    deadline = time.monotonic() + 60  # only bounds a failure
    while "b close" not in journal:
        assert time.monotonic() < deadline, journal
        time.sleep(0.01)
    assert journal == ["a go", "b go", "a stop", "b stop", "b close"]


class Name(str):
    """A key type of the user's own (an enum's value, a tagged string)."""


def test_reserved_keys_of_a_str_subclass_are_renamed_too(jsonl_path: Path) -> None:
    """str-subclass keys named like the record's own keys are kept as payload_<key>, as str keys are."""
    with MetricLogger(stream=io.StringIO(), json_file=jsonl_path) as logger:
        logger.emit("train_step", {Name("event"): "x", Name("timestamp"): 5, Name("_speedtronic"): 7})
    (record,) = read_jsonl(jsonl_path)
    assert record["event"] == "train_step"
    assert (record["payload_event"], record["payload_timestamp"], record["payload__speedtronic"]) == (
        "x",
        5,
        7,
    )
    assert isinstance(record["timestamp"], str)


def test_a_torn_tail_is_closed_before_the_note_of_lost_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file ending in a torn line, a failed write, then writing works: torn line, note, record."""
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"torn"')
    errors: list[BaseException] = []

    def note(lost: int, error: str, where: str) -> None:  # what MetricLogger writes through its chain
        log.write(json.dumps({"event": "logging_error", "lost_records": lost}).encode())

    log = LineFile(path, lambda e, w, lost: errors.append(e), note)
    real_write = os.write

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sinks_module.os, "write", full)
    log.write(b'{"a":1}')
    monkeypatch.setattr(sinks_module.os, "write", real_write)
    log.write(b'{"a":2}')
    log.close()
    lines = path.read_bytes().split(b"\n")
    assert lines[0] == b'{"torn"'
    assert json.loads(lines[1]) == {"event": "logging_error", "lost_records": 1}
    assert json.loads(lines[2]) == {"a": 2}
    assert lines[3:] == [b""]
    assert len(errors) == 1


def test_a_rotation_that_cant_be_followed_loses_nothing(jsonl_path: Path) -> None:
    """The path can't be reopened after a move (a directory in its place): lines go on to the moved
    file, none counted lost, and one warning says so."""
    with MetricLogger(stream=io.StringIO(), json_file=jsonl_path) as logger:
        logger.emit("x", {"n": 0})
        moved = jsonl_path.with_name("m.jsonl.1")
        jsonl_path.rename(moved)
        jsonl_path.mkdir()
        with pytest.warns(LoggingFailureWarning, match="can't be reopened") as caught:
            for n in range(1, 4):
                logger.emit("x", {"n": n})
        assert len(caught) == 1
        assert dict(logger.lost_records) == {}
    assert [r["n"] for r in read_jsonl(moved)] == [0, 1, 2, 3]


def test_emit_level_is_any_case_and_checked() -> None:
    """emit(level="ERROR") reaches a WARNING text log; an unknown level is a ValueError."""
    out = io.StringIO()
    with MetricLogger(stream=out, level="WARNING") as logger:
        logger.emit("x", {}, level="ERROR")
        with pytest.raises(ValueError, match="level must be one of"):
            logger.emit("y", {}, level="loud")
    assert " | ERROR | x" in out.getvalue()


@pytest.mark.parametrize("renderer", [TextRenderer(), JSONLRenderer()], ids=["text", "jsonl"])
def test_a_long_escaping_event_name_still_fits_the_cap(renderer: Any) -> None:
    """An event name of control characters (each escaped to 6 bytes) can't push a line over the cap."""
    line = CapLine(renderer, 1024)(
        None, "info", {"event": "\x01" * 300, "blob": "z" * 5000, "timestamp": "t"}
    )
    assert len(line if isinstance(line, bytes) else line.encode()) <= 1023


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_during_a_long_emit_can_close_its_logger(tmp_path: Path) -> None:
    """Forked while another thread is inside emit past the fork's wait: the child's close() closes."""
    code = f"""
import io, os, sys, threading, time
sys.path.insert(0, {REPO!r})
from speedtronic.profiling import MetricLogger
closed = []
inside, release = threading.Event(), threading.Event()
class Slow:
    def on_event(self, event, payload):
        inside.set()
        release.wait(120)
    def close(self):
        closed.append(os.getpid())
logger = MetricLogger(stream=io.StringIO(), hooks=[Slow()])
threading.Thread(target=logger.emit, args=("x", {{}})).start()
inside.wait(120)  # the thread is inside emit, and stays there until the child has closed
pid = os.fork()
if pid == 0:
    logger.close()
    os._exit(0 if logger.closed and closed == [os.getpid()] else 3)
_, status = os.waitpid(pid, 0)
release.set()
print(os.waitstatus_to_exitcode(status))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"
