"""Stacks on demand: a registered signal writes every thread's stack to the run directory."""

from __future__ import annotations

import io
import os
import signal
import time
from pathlib import Path

import pytest

from speedtronic.profiling import MetricLogger

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGUSR2"), reason="needs SIGUSR2")


class TestMetricLoggerStackSignal:
    def test_signal_writes_stacks_beside_the_jsonl_until_close(self, tmp_path: Path) -> None:
        """MetricLogger(stack_signal=SIGUSR2): the signal writes this process's stacks to
        stacks/rank0-<time>.txt beside the JSONL; stack_notes names them; close() unregisters."""
        before = signal.getsignal(signal.SIGUSR2)
        with MetricLogger(
            stream=io.StringIO(), json_file=tmp_path / "m.jsonl", stack_signal=signal.SIGUSR2
        ) as log:
            notes = log.stack_notes
            assert notes["pid"] == os.getpid()
            assert notes["stack_signal"] == signal.SIGUSR2
            stacks = tmp_path / notes["stacks"]
            assert stacks.parent == tmp_path / "stacks"
            os.kill(os.getpid(), signal.SIGUSR2)
            deadline = time.monotonic() + 60
            while "test_signal_writes_stacks" not in stacks.read_text():
                assert time.monotonic() < deadline
                time.sleep(0.01)
        assert signal.getsignal(signal.SIGUSR2) == before

    def test_needs_a_json_file_and_a_signal_number(self, tmp_path: Path) -> None:
        """stack_signal without json_file, or not a signal number: a ValueError naming it."""
        with pytest.raises(ValueError, match="stack_signal"):
            MetricLogger(stream=io.StringIO(), stack_signal=signal.SIGUSR2)
        with pytest.raises(ValueError, match="stack_signal"):
            MetricLogger(stream=io.StringIO(), json_file=tmp_path / "m.jsonl", stack_signal="USR2")  # type: ignore[arg-type]  # the mistake tested
