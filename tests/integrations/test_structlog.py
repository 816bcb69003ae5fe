"""StructlogHook into an application's own structlog configuration, and the other direction."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
import structlog
import torch

from speedtronic.integrations import StructlogHook
from speedtronic.processors import CadenceFilter, ConvertValues, JSONLRenderer
from speedtronic.profiling import MetricLogger


@pytest.fixture
def app_output() -> Iterator[io.StringIO]:
    """An application's JSON structlog setup (contextvars, level, its own renderer) into a buffer."""
    output = io.StringIO()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.JSONRenderer(sort_keys=True),
        ],
        logger_factory=structlog.PrintLoggerFactory(output),
    )
    try:
        yield output
    finally:
        structlog.reset_defaults()
        structlog.contextvars.clear_contextvars()


def lines(output: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in output.getvalue().splitlines()]


class TestStructlogHook:
    def test_events_reach_the_applications_json_stream(self, app_output: io.StringIO) -> None:
        """Each delivered event is one JSON line of the app's, with its context and level."""
        hook = StructlogHook()
        structlog.contextvars.bind_contextvars(request_id="job-42")
        with MetricLogger(stream=io.StringIO(), every_steps=2, hooks=[hook]) as logger:
            logger.emit("train_step", {"step": 1, "loss": 1.0})
            logger.emit("train_step", {"step": 2, "loss": torch.tensor(0.5)})
            logger.emit("delta_upload_failed", {"local_step": 2, "error": "timeout"})

        records = lines(app_output)
        assert [(r["event"], r["level"], r["request_id"]) for r in records] == [
            ("train_step", "info", "job-42"),
            ("delta_upload_failed", "error", "job-42"),
        ]
        assert (records[0]["step"], records[0]["loss"]) == (2, 0.5)
        assert isinstance(records[0]["elapsed_s"], float)

    def test_configuration_made_after_the_hook_applies(self) -> None:
        """The default logger is resolved per call: capture_logs set up later still sees events."""
        hook = StructlogHook()
        with structlog.testing.capture_logs() as captured:
            hook.on_event("shape_warning", {"field": "hidden", "value": 1000, "suggested": 1024})
            hook.on_event("checkpoint", {"step": 5, "path": "ckpt/5.pt"})
        assert captured == [
            {"event": "shape_warning", "log_level": "warning", "field": "hidden", "value": 1000,
             "suggested": 1024},
            {"event": "checkpoint", "log_level": "info", "step": 5, "path": "ckpt/5.pt"},
        ]

    def test_keys_become_unique_strings(self) -> None:
        """Non-string keys are stringified like the JSONL record's; a payload 'event' can't clash."""
        with structlog.testing.capture_logs() as captured:
            StructlogHook().on_event("odd", {1: "int key", "1": "str key", "event": "inner"})
        assert captured == [
            {"event": "odd", "log_level": "info", "1": "int key", "1#2": "str key", "payload_event": "inner"}
        ]

    def test_a_logger_passed_in_is_used(self) -> None:
        """StructlogHook(logger) logs through that logger, with its bound context."""
        output = io.StringIO()
        logger = structlog.wrap_logger(
            structlog.PrintLogger(output), processors=[structlog.processors.JSONRenderer()]
        ).bind(component="trainer")
        StructlogHook(logger).on_event("train_end", {"step": 9})
        assert json.loads(output.getvalue()) == {"component": "trainer", "step": 9, "event": "train_end"}


class TestProcessorsInTheApplicationsChain:
    def test_speedtronic_processors_in_a_plain_structlog_chain(self) -> None:
        """The README's other direction: CadenceFilter, ConvertValues and JSONLRenderer in an app chain."""
        output = io.StringIO()
        log = structlog.wrap_logger(
            structlog.PrintLogger(output),
            processors=[CadenceFilter(10), ConvertValues(), JSONLRenderer()],
        )
        log.info("train_step", step=5, loss=torch.tensor(1.0))
        log.info("train_step", step=10, loss=torch.tensor(0.5))
        [record] = lines(output)
        assert (record["event"], record["step"], record["loss"]) == ("train_step", 10, 0.5)
        assert list(record)[-1] == "timestamp"
