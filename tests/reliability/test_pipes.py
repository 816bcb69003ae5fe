"""Pipes never hang training: a JSONL pipe whose reader left is a failed sink, reported and counted.

Each case runs the writer as a real process next to a real reader (``head``, or a FIFO reader that
exits) with a subprocess timeout: a hang fails the test instead of hanging the suite. Python's default
``SIGPIPE`` disposition (ignored, so a write raises ``EPIPE``) is left as it is.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.reliability.conftest import ROOT, child_env

TIMEOUT_S = 60

needs_head = pytest.mark.skipif(shutil.which("head") is None, reason="needs head(1)")
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")

WRITER = """
    import signal, sys, warnings
    from speedtronic.profiling import MetricLogger

    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN  # Python's default, left alone
    options = {options}
    logger = MetricLogger(**options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what many training scripts do: losses must still be seen
        for step in range(1_000_000):  # until 100 records are lost: the reader is gone by then
            logger.emit("train_step", {{"step": step, "loss": 0.5}})
            if sum(logger.lost_records.values()) >= 100:
                break
        logger.close()
    print("LOST", dict(logger.lost_records), file=sys.stderr)
"""


def writer(**options: object) -> list[str]:
    """The command line of a process emitting into ``MetricLogger(**options)`` until 100 are lost."""
    return [sys.executable, "-c", textwrap.dedent(WRITER.format(options=repr(options)))]


def lost(stderr: str) -> dict[str, int]:
    (line,) = [line for line in stderr.splitlines() if line.startswith("LOST ")]
    value = ast.literal_eval(line.removeprefix("LOST "))  # a dict's repr, printed by the child
    assert isinstance(value, dict)
    return value


def piped_into_head(command: list[str], nbytes: int = 300) -> tuple[subprocess.CompletedProcess[str], bytes]:
    """``command | head -c nbytes``: the writer's completed process (stdout is the pipe) and what head
    read. Only the writer holds the pipe's write end."""
    read_end, write_end = os.pipe()
    try:
        head = subprocess.Popen(["head", "-c", str(nbytes)], stdin=read_end, stdout=subprocess.PIPE)
        child = subprocess.Popen(
            command, stdout=write_end, stderr=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    try:
        _, stderr = child.communicate(timeout=TIMEOUT_S)
        read, _ = head.communicate(timeout=TIMEOUT_S)
    finally:
        for process in (child, head):
            if process.poll() is None:
                process.kill()
                process.wait()
    return subprocess.CompletedProcess(command, child.returncode, "", stderr), read


@needs_head
class TestStdoutIntoHead:
    def test_jsonl_on_stdout_into_head_finishes(self, tmp_path: Path) -> None:
        """json_file="/dev/stdout" | head -c 300: the writer finishes, exit 0, no traceback; the
        losses are counted for that sink and told in the text log."""
        log = tmp_path / "run.log"
        result, read = piped_into_head(writer(json_file="/dev/stdout", file=str(log)))
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
        assert lost(result.stderr) == {"/dev/stdout": 100}
        assert len(read) == 300
        assert read.startswith(b'{"event":"train_step"')
        text = log.read_text()
        assert "logging_error" in text
        assert "BrokenPipeError" in text

    def test_text_and_jsonl_both_on_the_pipe(self) -> None:
        """The text log (sys.stdout) and the JSONL (/dev/stdout) on one pipe whose reader left: the
        writer finishes, both sinks fail and are counted, stderr says so, and no traceback."""
        result, _ = piped_into_head(writer(json_file="/dev/stdout"))
        assert "Traceback" not in result.stderr
        counts = lost(result.stderr)
        assert set(counts) == {"/dev/stdout", "<stdout>"}
        assert sum(counts.values()) >= 100
        assert "speedtronic: could not write a record to <stdout>" in result.stderr
        assert "Broken pipe" in result.stderr

    def test_text_on_the_broken_pipe_exits_0(self) -> None:
        """The same run exits 0 with nothing on stderr but speedtronic's own lines."""
        result, _ = piped_into_head(writer(json_file="/dev/stdout"))
        assert "Exception ignored" not in result.stderr
        assert result.returncode == 0, result.stderr


@needs_fifo
class TestFifo:
    def test_a_fifo_whose_reader_exits(self, tmp_path: Path) -> None:
        """A FIFO shipper reads 100 bytes and dies: the writer gets EPIPE, counts the losses, tells
        the text log, and finishes with exit 0."""
        fifo, log = tmp_path / "metrics.fifo", tmp_path / "run.log"
        os.mkfifo(fifo)
        reader = subprocess.Popen(
            [sys.executable, "-c", f"open({str(fifo)!r}, 'rb').read(100)"], env=child_env()
        )
        try:
            result = subprocess.run(
                writer(json_file=str(fifo), file=str(log)),
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                env=child_env(),
                cwd=ROOT,
            )
            assert reader.wait(timeout=TIMEOUT_S) == 0
        finally:
            if reader.poll() is None:
                reader.kill()
                reader.wait()
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
        assert lost(result.stderr) == {str(fifo): 100}
        text = log.read_text()
        assert "logging_error" in text
        assert "BrokenPipeError" in text

    def test_a_fifo_without_a_reader_does_not_hang_the_logger(self, tmp_path: Path) -> None:
        """A FIFO nobody reads when the logger starts (the shipper died before a resume): the logger
        is refused or counts losses, but construction returns."""
        fifo = tmp_path / "metrics.fifo"
        os.mkfifo(fifo)
        code = (
            "import io\nfrom speedtronic.profiling import MetricLogger\n"
            f"try:\n    MetricLogger(json_file={str(fifo)!r}, stream=io.StringIO()).close()\n"
            "except ValueError as error:\n    print(error)\n"
        )
        try:
            subprocess.run(
                [sys.executable, "-c", code],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,  # a hang, not a slow start on a loaded machine
                env=child_env(),
                cwd=ROOT,
            )
        except subprocess.TimeoutExpired:
            pytest.fail("MetricLogger(json_file=<a FIFO without a reader>) never returned")
