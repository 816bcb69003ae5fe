"""StructlogHook into an application's own structlog setup, and speedtronic's processors in an app's chain.

The app setups are stock ones, built here with ``structlog.wrap_logger`` (never ``structlog.configure``):
a JSON chain (contextvars, ``add_log_level``, ``TimeStamper``, ``JSONRenderer``) and stdlib logging
with ``structlog.stdlib.ProcessorFormatter`` on a logger of the tests' own.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
import torch

from speedtronic.integrations import StructlogHook
from speedtronic.processors import CadenceFilter, ConvertValues, JSONLRenderer
from speedtronic.profiling import MetricLogger

CLASHING = {
    "self": "s",
    "event": "inner",
    "level": "mine",
    "timestamp": 1_700_000_000,
    "exc_info": True,
    "stack_info": True,
    "logger": "my-logger",
    "method_name": "m",
    "exception": "not raised",
    "positional_args": (1, 2),
    "_record": "r",
    "_speedtronic": "mine too",
}
"""A payload using every name the app's logger or processors would clash with or consume."""


def strict_json(line: str) -> dict[str, Any]:
    """One line as strict JSON: NaN, Infinity or -Infinity in it fail the test."""
    def refuse(constant: str) -> None:
        raise AssertionError(f"not strict JSON: {constant} in {line}")

    record: dict[str, Any] = json.loads(line, parse_constant=refuse)
    return record


def records(output: io.StringIO) -> list[dict[str, Any]]:
    return [strict_json(line) for line in output.getvalue().splitlines()]


@pytest.fixture
def json_app() -> Iterator[tuple[Any, io.StringIO]]:
    """An app's stock JSON structlog logger (contextvars, level, ISO timestamp) into a buffer."""
    output = io.StringIO()
    logger = structlog.wrap_logger(
        structlog.PrintLogger(output),
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
    )
    try:
        yield logger, output
    finally:
        structlog.contextvars.clear_contextvars()


@pytest.fixture
def stdlib_app() -> Iterator[tuple[Any, io.StringIO, logging.Logger]]:
    """An app's stdlib logging with ProcessorFormatter (JSON), on a logger of its own at INFO."""
    output = io.StringIO()
    handler = logging.StreamHandler(output)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.JSONRenderer(),
            ],
        )
    )
    stdlib_logger = logging.getLogger("speedtronic_tests.structlog_app")
    stdlib_logger.addHandler(handler)
    stdlib_logger.setLevel(logging.INFO)
    stdlib_logger.propagate = False
    logger = structlog.wrap_logger(
        stdlib_logger,
        wrapper_class=structlog.stdlib.BoundLogger,
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.add_log_level,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
    )
    try:
        yield logger, output, stdlib_logger
    finally:
        stdlib_logger.removeHandler(handler)
        stdlib_logger.propagate = True
        stdlib_logger.setLevel(logging.NOTSET)


def assert_clashing_keys_kept(record: dict[str, Any]) -> None:
    """Every CLASHING key arrived as payload_<key>, with its value as given."""
    for key, value in CLASHING.items():
        expected = list(value) if isinstance(value, tuple) else value
        assert record[f"payload_{key}"] == expected, key


class TestReservedKeys:
    def test_every_clashing_key_reaches_a_stock_json_app(self, json_app: tuple[Any, io.StringIO]) -> None:
        """self, event, level, timestamp, exc_info... arrive as payload_<key>; the app's own keys stay."""
        logger, output = json_app
        StructlogHook(logger).on_event("checkpoint", {"step": 5, **CLASHING})

        [record] = records(output)
        assert_clashing_keys_kept(record)
        assert (record["event"], record["level"], record["step"]) == ("checkpoint", "info", 5)
        assert record["timestamp"].endswith("Z")  # the app's TimeStamper, not the payload's number
        assert "exception" not in record  # nothing was consumed
        assert "stack" not in record

    def test_every_clashing_key_reaches_a_stdlib_processor_formatter_app(
        self, stdlib_app: tuple[Any, io.StringIO, logging.Logger]
    ) -> None:
        """Through stdlib logging and ProcessorFormatter: same names, the app's level and logger name."""
        logger, output, _ = stdlib_app
        StructlogHook(logger).on_event("shape_warning", {"field": "hidden", **CLASHING})

        [record] = records(output)
        assert_clashing_keys_kept(record)
        assert (record["event"], record["level"], record["logger"]) == (
            "shape_warning", "warning", "speedtronic_tests.structlog_app"
        )
        assert record["field"] == "hidden"

    def test_a_payload_that_already_has_the_new_name_keeps_both(self) -> None:
        """level and payload_level in one payload: payload_level, payload_level#2 (JSONL's #n rule)."""
        with structlog.testing.capture_logs() as captured:
            StructlogHook().on_event(
                "odd", {"payload_level": "a", "level": "b", 1: "int key", "1": "str key"}
            )
        assert captured == [
            {"event": "odd", "log_level": "info", "payload_level": "a", "payload_level#2": "b",
             "1": "int key", "1#2": "str key"}
        ]

    def test_the_app_can_reserve_its_own_keys(self, json_app: tuple[Any, io.StringIO]) -> None:
        """reserved= adds the keys the app's own processors use to the renamed ones."""
        logger, output = json_app
        StructlogHook(logger, reserved={"job_id"}).on_event("train_end", {"step": 9, "job_id": 3})
        [record] = records(output)
        assert (record["payload_job_id"], "job_id" in record) == (3, False)

    def test_the_documented_set_names_what_structlog_uses(self) -> None:
        """The parameters of the logging methods and the keys of structlog's processors are reserved."""
        structlog_names = {
            "self", "event", "method_name", "level", "timestamp", "exc_info", "stack_info", "logger",
            "_record", "_from_structlog", "positional_args", "_speedtronic",
        }
        assert structlog_names <= StructlogHook.RESERVED_KEYS


class TestNonFinite:

    def test_the_app_gets_strict_json_and_a_note(self, json_app: tuple[Any, io.StringIO]) -> None:
        """NaN and infinities become null; _speedtronic names each (JSON Pointer) so they can be restored."""
        logger, output = json_app
        StructlogHook(logger).on_event(
            "train_step",
            {"step": 3, "loss": float("nan"), "grad_norm": float("inf"), "history": [1.0, float("-inf")]},
        )

        [record] = records(output)
        assert (record["loss"], record["grad_norm"], record["history"]) == (None, None, [1.0, None])
        assert record["_speedtronic"]["non_finite"] == {
            "nan": ["/loss"], "inf": ["/grad_norm"], "neg_inf": ["/history/1"]
        }

    def test_strict_json_off_hands_the_floats_as_they_are(self) -> None:
        """strict_json=False, for an app rendering for people: NaN stays a float, no note."""
        with structlog.testing.capture_logs() as captured:
            StructlogHook(strict_json=False).on_event(
                "train_step", {"step": 3, "loss": torch.tensor(float("nan"))}
            )
        [entry] = captured
        assert entry["loss"] != entry["loss"]
        assert "_speedtronic" not in entry


class TestThroughAMetricLogger:
    def test_events_reach_the_apps_json_stream_with_its_context(
        self, json_app: tuple[Any, io.StringIO]
    ) -> None:
        """Registered as a hook: delivered events (cadence applied) at their level, with the app's context."""
        logger, output = json_app
        structlog.contextvars.bind_contextvars(request_id="job-42")
        with MetricLogger(stream=io.StringIO(), every_steps=2, hooks=[StructlogHook(logger)]) as metrics:
            metrics.emit("train_step", {"step": 1, "loss": 1.0})
            metrics.emit("train_step", {"step": 2, "loss": torch.tensor(float("nan")), "level": 7})
            metrics.emit("delta_upload_failed", {"local_step": 2, "base_outer_step": 0, "error": "timeout"})

        lines = records(output)
        assert [(r["event"], r["level"], r["request_id"]) for r in lines] == [
            ("train_step", "info", "job-42"),
            ("delta_upload_failed", "error", "job-42"),
        ]
        assert (lines[0]["step"], lines[0]["loss"], lines[0]["payload_level"]) == (2, None, 7)
        assert lines[0]["_speedtronic"]["non_finite"] == {"nan": ["/loss"], "inf": [], "neg_inf": []}

    def test_the_apps_level_filter_applies(self, stdlib_app: tuple[Any, io.StringIO, logging.Logger]) -> None:
        """A stdlib logger at WARNING keeps shape_warning and drops the info-level train_step."""
        logger, output, stdlib_logger = stdlib_app
        stdlib_logger.setLevel(logging.WARNING)
        with MetricLogger(stream=io.StringIO(), hooks=[StructlogHook(logger)]) as metrics:
            metrics.emit("train_step", {"step": 1, "loss": 1.0})
            metrics.emit("shape_warning", {"field": "hidden", "value": 1000, "alignment": 8})
        assert [r["event"] for r in records(output)] == ["shape_warning"]


class TestDefaultLogger:
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


class TestProcessorsInTheApplicationsChain:
    def test_speedtronic_processors_in_a_plain_structlog_chain(self) -> None:
        """The other direction: CadenceFilter, ConvertValues and JSONLRenderer in an app's chain."""
        output = io.StringIO()
        log = structlog.wrap_logger(
            structlog.PrintLogger(output),
            processors=[CadenceFilter(10), ConvertValues(), JSONLRenderer()],
        )
        log.info("train_step", step=5, loss=torch.tensor(1.0))
        log.info("train_step", step=10, loss=torch.tensor(0.5))
        [record] = records(output)
        assert (record["event"], record["step"], record["loss"]) == ("train_step", 10, 0.5)
