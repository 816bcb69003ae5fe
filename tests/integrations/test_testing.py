"""speedtronic.testing and its pytest plugin."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
import structlog
import torch

from speedtronic.errors import HookError
from speedtronic.processors import AddElapsed, CadenceFilter, TextRenderer
from speedtronic.profiling import MetricLogger
from speedtronic.testing import RecordingHook, capture_events, run_hook, run_processor


@pytest.fixture
def logger() -> MetricLogger:
    return MetricLogger(stream=io.StringIO(), every_steps=2)


class TestCaptureEvents:
    def test_captures_what_hooks_receive(self, logger: MetricLogger) -> None:
        """Cadence applied, tensors converted, elapsed_s and the timestamp added, a payload 'event' kept
        aside."""
        with capture_events(logger) as events:
            logger.emit("train_step", {"step": 1, "loss": torch.tensor(1.0)})
            logger.emit("train_step", {"step": 2, "loss": torch.tensor(0.5)})
            logger.emit("note", {"event": "inner"})
        logger.close()

        assert [{k: v for k, v in e.items() if k not in ("elapsed_s", "timestamp")} for e in events] == [
            {"event": "train_step", "step": 2, "loss": 0.5},
            {"event": "note", "payload_event": "inner"},
        ]
        assert all(isinstance(e["elapsed_s"], float) for e in events)
        assert all(isinstance(e["timestamp"], str) for e in events)

    def test_stops_capturing_and_unregisters_on_exit(self, logger: MetricLogger) -> None:
        """After the block the hook is gone and the list no longer grows; other hooks stay."""
        other = RecordingHook()
        logger.hooks.append(other)
        with capture_events(logger) as events:
            logger.emit("a", {})
        logger.emit("b", {})
        logger.close()
        assert [e["event"] for e in events] == ["a"]
        assert list(logger.hooks) == [other]
        assert other.events == ["a", "b"]

    def test_captures_nest_and_are_per_logger(self) -> None:
        """Two captures on one logger and one on another: each sees only its own logger's events."""
        first, second = MetricLogger(stream=io.StringIO()), MetricLogger(stream=io.StringIO())
        with capture_events(first) as outer, capture_events(second) as elsewhere:
            first.emit("a", {})
            with capture_events(first) as inner:
                first.emit("b", {})
            second.emit("c", {})
        first.close()
        second.close()
        assert [[e["event"] for e in got] for got in (outer, inner, elsewhere)] == [["a", "b"], ["b"], ["c"]]

    def test_events_from_several_threads_are_all_captured(self, logger: MetricLogger) -> None:
        """Emitting from 4 threads at once loses nothing."""

        def ticks(n: int) -> None:
            for i in range(200):
                logger.emit("tick", {"n": n, "i": i})

        with capture_events(logger) as events:
            threads = [threading.Thread(target=ticks, args=(n,)) for n in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        logger.close()
        assert sorted((e["n"], e["i"]) for e in events) == [(n, i) for n in range(4) for i in range(200)]


class TestRecordingHook:
    def test_journals_calls_in_order_and_counts_closes(self) -> None:
        """calls, events, payloads() and closes reflect what the logger did."""
        hook = RecordingHook()
        with MetricLogger(stream=io.StringIO(), hooks=[hook]) as logger:
            logger.emit("train_start", {"target_step": 2})
            logger.emit("train_step", {"step": 1, "loss": 0.5})
            logger.emit("train_step", {"step": 2, "loss": 0.25})
        assert hook.events == ["train_start", "train_step", "train_step"]
        assert [p["loss"] for p in hook.payloads("train_step")] == [0.5, 0.25]
        assert hook.calls[0][1]["target_step"] == 2
        assert hook.closes == 1


class TestRunHook:
    def test_delivers_like_a_run_and_closes(self) -> None:
        """run_hook applies the cadence, converts tensors, closes the hook, returns the delivered."""
        hook = RecordingHook()
        delivered = run_hook(
            hook,
            [("train_step", {"step": s, "loss": torch.tensor(float(s))}) for s in (1, 2, 3, 4)],
            every_steps=2,
        )
        assert [(e["step"], e["loss"]) for e in delivered] == [(2, 2.0), (4, 4.0)]
        assert [p["loss"] for p in hook.payloads("train_step")] == [2.0, 4.0]
        assert hook.closes == 1

    def test_a_failing_hook_raises(self) -> None:
        """A hook's exception surfaces as HookError (strict), not as a counted warning."""

        def broken(event: str, payload: dict[str, Any]) -> None:
            raise KeyError("loss")

        with pytest.raises(HookError, match="broken") as raised:
            run_hook(broken, [("train_step", {"step": 1})])
        assert isinstance(raised.value.__cause__, KeyError)


class TestRunProcessor:
    def test_returns_the_processed_event_dict_without_touching_the_input(self) -> None:
        """The processor gets a copy; the result is what it returned."""
        event_dict = {"event": "train_step"}
        result = run_processor(AddElapsed(clock=iter([10.0, 12.5]).__next__), event_dict)
        assert result == {"event": "train_step", "elapsed_s": 2.5}
        assert event_dict == {"event": "train_step"}

    def test_a_dropped_event_is_none(self) -> None:
        """DropEvent becomes None; a passing event comes back."""
        assert run_processor(CadenceFilter(10), {"event": "train_step", "step": 3}) is None
        assert run_processor(CadenceFilter(10), {"event": "train_step", "step": 30}) is not None

    def test_method_name_reaches_the_processor(self) -> None:
        """A renderer sees the level it is called at."""
        line = run_processor(TextRenderer(clock=lambda: 0.0), {"event": "x"}, method_name="warning")
        assert " | WARNING | x" in line

    def test_exceptions_other_than_drop_event_propagate(self) -> None:
        """Only DropEvent is translated; a processor's bug still fails the test."""

        def bad(logger: Any, method_name: str, event_dict: Any) -> Any:
            raise structlog.DropEvent if event_dict.get("drop") else ValueError("bug")

        with pytest.raises(ValueError, match="bug"):
            run_processor(bad, {})


class TestPytestPlugin:
    def test_fixtures_are_available_to_any_test_suite(self, tmp_path: Path) -> None:
        """The pytest11 entry point gives metric_logger, captured_events, recording_hook."""
        (tmp_path / "test_user.py").write_text(
            textwrap.dedent(
                """
                import pytest
                from speedtronic.errors import HookError

                def test_fixtures(metric_logger, captured_events, recording_hook, tmp_path):
                    metric_logger.emit("train_step", {"step": 1, "loss": 0.5})
                    assert [e["event"] for e in captured_events] == ["train_step"]
                    assert recording_hook.events == ["train_step"]
                    assert (tmp_path / "metrics.jsonl").read_text().count("train_step") == 1
                    assert "loss=0.5" in (tmp_path / "metrics.log").read_text()

                def test_hooks_are_strict(metric_logger):
                    metric_logger.hooks.append(lambda event, payload: 1 / 0)
                    with pytest.raises(HookError):
                        metric_logger.emit("x", {})
                """
            )
        )
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "2 passed" in result.stdout
