"""A stalled hook never holds training: ``emit``, ``flush(timeout)`` and ``close()`` all return.

Each case runs in a child process with a timeout, so a hang fails the test instead of the suite.
"Background" is either mode of running hooks on a worker: ``MetricLogger(background_hooks=True)``
(every hook) or ``speedtronic.hooks.background(hook)`` (one hook, the logger calling it inline).
Inline hooks are the user's own code on the training thread and may take as long as they take.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.conftest import python, read_records

TIMEOUT_S = 120

LOGGER = {
    "logger": """
        logger = MetricLogger(stream=io.StringIO(), json_file=JSONL, hooks=[HOOK], background_hooks=True,
                              hook_queue_size=8, hook_put_timeout_s=0.01, close_timeout_s=0.5)
    """,
    "wrapper": """
        logger = MetricLogger(stream=io.StringIO(), json_file=JSONL, close_timeout_s=0.5,
                              hooks=[background(HOOK, queue_size=8, put_timeout_s=0.01, close_timeout_s=0.5)])
    """,
    "inline": """
        logger = MetricLogger(stream=io.StringIO(), json_file=JSONL, hooks=[HOOK], close_timeout_s=0.5)
    """,
}


def run_child(body: str, mode: str, jsonl: Path) -> dict[str, Any]:
    """Run ``body`` after building ``logger`` in ``mode`` around the hook named ``HOOK`` (defined by
    ``body``'s first part, before ``# --``); the child prints one JSON line of results last."""
    hook, _, rest = body.partition("# --")
    code = "\n".join(
        [
            "import io, json, sys, threading, time, warnings",
            "from speedtronic.hooks import background",
            "from speedtronic.profiling import MetricLogger",
            "warnings.simplefilter('ignore')  # reported failures are counted below",
            f"JSONL = {str(jsonl)!r}",
            _dedent(hook),
            _dedent(LOGGER[mode]),
            _dedent(rest),
        ]
    )
    result = python(code, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _dedent(text: str) -> str:
    import textwrap

    return textwrap.dedent(text).strip("\n")


STALLED = """
    def HOOK(event, payload):
        time.sleep(1e9)
    # --
    for step in range(20_000):
        logger.emit("train_step", {"step": step, "loss": 0.5})

    results = {}
    def flush():
        results["flush"] = logger.flush(timeout=1)
    def close():
        logger.close()
        results["closed"] = logger.closed
    for target in (flush, close):  # from another thread, as a watchdog or signal handler would
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        thread.join(60)
        results[target.__name__ + "_returned"] = not thread.is_alive()
    print(json.dumps(results))
"""


class TestStalledHook:
    @pytest.mark.parametrize("mode", ["logger", "wrapper"])
    def test_20000_events_flush_and_close_all_return(self, mode: str, tmp_path: Path) -> None:
        """A hook asleep forever behind a queue of 8: 20,000 emits finish (the stall costs
        hook_put_timeout_s once, then events are dropped for the hook at once), flush(timeout=1) and
        close() from another thread return, and the JSONL keeps every event."""
        jsonl = tmp_path / "m.jsonl"
        results = run_child(STALLED, mode, jsonl)
        assert results.pop("flush") is False or mode == "wrapper"  # see the test below
        assert results == {"flush_returned": True, "closed": True, "close_returned": True}
        steps = [r["step"] for r in read_records(jsonl) if r["event"] == "train_step"]
        assert steps == list(range(20_000))
        if mode == "logger":  # the logger's own worker: its drops and the drain are the logger's records
            errors = [r for r in read_records(jsonl) if r["event"] == "hook_error"]
            assert any(r["phase"] == "drain" for r in errors)
            totals = {r["hook"]: r["failures"] for r in errors if r["phase"] == "total"}
            assert 20_000 - 8 - 1 <= totals["BackgroundHooks"] < 20_000
            assert totals["HOOK"] == 1  # still running at close: reported, and not closed

    def test_logger_flush_waits_for_a_background_wrapper(self, tmp_path: Path) -> None:
        """flush(timeout) is False while a background(hook) still holds an undelivered event."""
        results = run_child(STALLED, "wrapper", tmp_path / "m.jsonl")
        assert results["flush"] is False


REENTRANT = """
    def HOOK(event, payload):
        if event == "train_step":
            time.sleep(0.0005)  # slower than the emitting loop: the queue fills
            logger.emit("from_hook", {"step": payload["step"]})
            flushed.append(logger.flush(timeout=1))
    flushed = []
    # --
    for step in range(2_000):
        logger.emit("train_step", {"step": step})
    logger.flush(timeout=30)
    logger.close()
    print(json.dumps({"flushed": len(flushed)}))
"""


class TestReentrantHook:
    @pytest.mark.parametrize("mode", ["logger", "wrapper", "inline"])
    def test_emit_and_flush_from_a_hook_never_deadlock(self, mode: str, tmp_path: Path) -> None:
        """A hook that emits into its own logger and flushes it, with the queue full: the run finishes;
        flush() from a hook returns (at once: it can't wait for the event it is delivering); what the
        hook emitted is in the JSONL."""
        jsonl = tmp_path / "m.jsonl"
        results = run_child(REENTRANT, mode, jsonl)
        records = read_records(jsonl)
        assert [r["step"] for r in records if r["event"] == "train_step"] == list(range(2_000))
        from_hook = [r["step"] for r in records if r["event"] == "from_hook"]
        assert len(from_hook) == results["flushed"] > 0
        assert from_hook == sorted(from_hook)
        if mode == "inline":  # called inside emit: every event, at once
            assert from_hook == list(range(2_000))
