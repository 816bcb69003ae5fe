"""Hooks that raise on every call, raise in close() or are slow: counted, visible, isolated."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from speedtronic import HookError, HookFailureWarning
from speedtronic.errors import MAX_WARNING_BYTES
from speedtronic.hooks.dispatch import DispatchHooks, HookFailures
from speedtronic.processors.redact import redact_text
from speedtronic.profiling import MetricLogger
from tests.reliability.conftest import child_env, python, read_records

EVENTS = 64


class Journal:
    """Records every event it is given and whether it was closed."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.closed = False

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self.steps.append(payload["step"])

    def close(self) -> None:
        self.closed = True


class AlwaysRaises(Journal):
    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        super().on_event(event, payload)
        raise RuntimeError(f"broken at {payload['step']}")


class RaisesInClose(Journal):
    def close(self) -> None:
        super().close()
        raise OSError("can't flush")


class Slow(Journal):
    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        if payload["step"] % 8 == 0:
            time.sleep(0.03)  # a stalled upload
        super().on_event(event, payload)


class TestFaultyHooks:
    def test_every_other_hook_gets_every_event_and_is_closed(self, jsonl_path: Path) -> None:
        """Raising always, raising in close, slow: the run completes, each good hook sees all and closes."""
        before, raising, closing, slow, after = Journal(), AlwaysRaises(), RaisesInClose(), Slow(), Journal()
        hooks = [before, raising, closing, slow, after]
        with pytest.warns(HookFailureWarning) as warned:
            logger = MetricLogger(stream=io.StringIO(), json_file=jsonl_path, hooks=hooks)
            for step in range(EVENTS):
                logger.emit("train_step", {"step": step})
            logger.close()
        for hook in hooks:
            assert hook.steps == list(range(EVENTS))
            assert hook.closed
        assert dict(logger.hook_errors) == {"AlwaysRaises": EVENTS, "RaisesInClose": 1}
        # visible: warnings on the 1st, 2nd, 4th ... failure, not one per event
        assert len(warned) == 7 + 1  # 1, 2, 4, 8, 16, 32, 64 for AlwaysRaises, 1 for the close
        reports = [r for r in read_records(jsonl_path) if r["event"] == "hook_error"]
        first = next(r for r in reports if r["hook"] == "AlwaysRaises")
        assert "RuntimeError: broken at 0" in first["traceback"]
        assert {(r["hook"], r["phase"], r["failures"]) for r in reports if r["phase"] == "total"} == {
            ("AlwaysRaises", "total", EVENTS),
            ("RaisesInClose", "total", 1),
        }
        assert any(r["hook"] == "RaisesInClose" and r["phase"] == "close" for r in reports)
        assert sum(r["event"] == "train_step" for r in read_records(jsonl_path)) == EVENTS

    def test_strict_hooks_raise_hook_error(self) -> None:
        """strict_hooks=True makes the first failure fatal, with the original as its cause."""
        logger = MetricLogger(stream=io.StringIO(), hooks=[AlwaysRaises()], strict_hooks=True)
        with pytest.raises(HookError) as raised:
            logger.emit("train_step", {"step": 0})  # no warning: under -W error it would hide this
        logger.close()
        assert isinstance(raised.value.__cause__, RuntimeError)


FAILING_RUN = """
import io
from speedtronic.profiling import MetricLogger
def bad(event, payload):
    raise ValueError("boom")
with MetricLogger(stream=io.StringIO(), hooks=[bad]) as logger:
    logger.emit("train_step", {"step": 1})
print("finished")
"""


class TestEscalation:
    def test_python_dash_w_error_makes_hook_failures_fatal(self) -> None:
        """python -W "error:speedtronic hook": a failing hook ends the run.

        (CPython reads -W before site-packages are importable, so a plain interpreter can't name
        ``speedtronic.HookFailureWarning`` there; the message prefix works, as does pytest's -W.)
        """
        relaxed = python(FAILING_RUN)
        assert relaxed.returncode == 0, relaxed.stderr
        assert "finished" in relaxed.stdout
        strict = python(FAILING_RUN, "-W", "error:speedtronic hook")
        assert strict.returncode == 1
        assert "HookFailureWarning" in strict.stderr
        assert "finished" not in strict.stdout

    def test_simplefilter_makes_hook_failures_fatal(self) -> None:
        """warnings.simplefilter("error", HookFailureWarning) in code: a failing hook raises."""
        code = "import warnings, speedtronic\n"
        code += "warnings.simplefilter('error', speedtronic.HookFailureWarning)\n" + FAILING_RUN
        strict = python(code)
        assert strict.returncode == 1
        assert "HookFailureWarning" in strict.stderr
        assert "finished" not in strict.stdout

    def test_pytest_dash_w_error_fails_the_test(self, tmp_path: Path) -> None:
        """pytest -W error::speedtronic.HookFailureWarning turns a failing hook into a failed test."""
        test_file = tmp_path / "test_uses_a_bad_hook.py"
        test_file.write_text(
            "import io\nfrom speedtronic.profiling import MetricLogger\n"
            "def test_run():\n"
            "    with MetricLogger(stream=io.StringIO(), hooks=[lambda e, p: 1 / 0]) as logger:\n"
            "        logger.emit('train_step', {'step': 1})\n"
        )
        args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(test_file)]
        strict = _pytest([*args, "-W", "error::speedtronic.HookFailureWarning"], tmp_path)
        assert strict.returncode == 1, strict.stdout
        assert "HookFailureWarning" in strict.stdout
        lenient = _pytest(args, tmp_path)
        assert lenient.returncode == 0, lenient.stdout


def _pytest(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=child_env(), timeout=60
    )


class TestHugeMessages:
    def test_a_hook_error_of_a_million_characters_is_warned_within_the_cap(self, tmp_path: Path) -> None:
        """Each reported failure of a hook raising a 1 MB message is a warning of at most
        MAX_WARNING_BYTES that still names the hook and the error; the record is capped too."""

        def huge(event: str, payload: dict[str, Any]) -> None:
            raise ValueError("x" * 1_000_000)

        logger = MetricLogger(stream=io.StringIO(), json_file=tmp_path / "m.jsonl", hooks=[huge])
        with pytest.warns(HookFailureWarning) as caught:
            for step in range(1, 9):
                logger.emit("train_step", {"step": step})
            logger.close()
        warned = [str(w.message) for w in caught if issubclass(w.category, HookFailureWarning)]
        assert len(warned) == 4  # the 1st, 2nd, 4th and 8th failure
        for message in warned:
            assert len(message.encode()) <= MAX_WARNING_BYTES
            assert "huge' failed" in message
            assert ": ValueError: xxx" in message
            assert "<truncated: " in message  # the marker: the text was cut
        lines = (tmp_path / "m.jsonl").read_bytes().splitlines()
        assert max(len(line) for line in lines) < MAX_WARNING_BYTES

    def test_a_failure_that_is_not_reported_is_not_redacted(self) -> None:
        """Only a reported failure's text is built and redacted (1st with its traceback, 2nd, 4th, 8th):
        the other failures of a hook raising a 10 MB message cost no redaction."""
        redacted: list[int] = []

        def redact(text: str) -> str:
            redacted.append(len(text))
            return text

        def huge(event: str, payload: dict[str, Any]) -> None:
            raise ValueError("x" * 10_000_000)

        failures = HookFailures(redact=redact)
        stage = DispatchHooks([huge], on_error=failures, consume=False)
        with pytest.warns(HookFailureWarning):
            for _ in range(8):
                stage(None, "info", {"event": "e"})
        assert list(failures.counts.values()) == [8]
        # each of the 4 reports judges the whole exception (redact_exception): its text and its printed
        # traceback (its repr is not looked at once the text was cut), each in two windows
        assert len(redacted) == 16
        # each windowed before it was redacted: a 10 MB message costs what a 40 kB one does
        assert max(redacted) < 2 * MAX_WARNING_BYTES

    def test_a_secret_across_the_cut_is_redacted_whole(self, tmp_path: Path) -> None:
        """A long failure text is cut before it is redacted, but a key that crosses where warnings and
        records cut it is still seen whole: the report says [REDACTED], and no character of the key
        reaches a warning or the JSONL."""
        key = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
        where = MAX_WARNING_BYTES - 40  # after "ValueError: ", the key crosses the cut

        def leaks(event: str, payload: dict[str, Any]) -> None:
            raise ValueError("x" * where + " " + key + " " + "y" * 1_000_000)

        reports: list[dict[str, Any]] = []
        failures = HookFailures(reports.append, redact=redact_text)
        with pytest.warns(HookFailureWarning):
            DispatchHooks([leaks], on_error=failures, consume=False)(None, "info", {"event": "e"})
        assert "[REDACTED]" in reports[0]["error"]
        logger = MetricLogger(stream=io.StringIO(), json_file=tmp_path / "m.jsonl", hooks=[leaks])
        with pytest.warns(HookFailureWarning) as caught:
            logger.emit("train_step", {"step": 1})
            logger.close()
        texts = [reports[0]["error"], *(str(w.message) for w in caught), (tmp_path / "m.jsonl").read_text()]
        assert not any("sk-proj" in text or "A1b2C3" in text for text in texts)
