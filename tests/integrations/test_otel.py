"""OtelHook against the real OpenTelemetry SDK: its in-memory exporter, and its OTLP/HTTP exporter
posting to a small OTLP receiver on 127.0.0.1 (an ``http.server`` thread decoding the protobuf
``ExportLogsServiceRequest``, as a collector does)."""

from __future__ import annotations

import gzip
import io
import math
import os
import socket
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider

import speedtronic
import speedtronic.distributed
from speedtronic.errors import HookFailureWarning
from speedtronic.integrations import OtelHook
from speedtronic.integrations.otel import attributes
from speedtronic.processors.enrich import timestamp_ns
from speedtronic.profiling import MetricLogger
from speedtronic.runtime import build_logger
from tests.helpers import read_jsonl


def in_memory() -> tuple[LoggerProvider, InMemoryLogRecordExporter]:
    """A user's SDK provider that keeps every record it is handed, exported at once."""
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    return provider, exporter


def emit_run(logger: MetricLogger) -> None:
    config = {"lr": 0.1, "model": {"hidden": 8}}
    logger.emit("train_start", {"start_step": 0, "target_step": 2, "config": config})
    logger.emit("train_step", {"step": 1, "loss": torch.tensor(0.5), "lr": 0.1})
    logger.emit("loss_spike", {"step": 1, "loss": 9.5}, level="error")
    logger.emit("train_end", {"step": 2, "final_loss": 0.4})


class TestInMemory:
    @pytest.fixture
    def logged(self, tmp_path: Path) -> tuple[list[Any], list[dict[str, Any]], LoggerProvider]:
        """A short run through a MetricLogger into a user's provider: the records and the JSONL."""
        provider, exporter = in_memory()
        jsonl = tmp_path / "metrics.jsonl"
        hook = OtelHook(logger_provider=provider)
        with MetricLogger(stream=io.StringIO(), json_file=jsonl, hooks=[hook]) as log:
            emit_run(log)
            log.emit("checkpoint_skipped", {"step": 2, "reason": "disk full", "missing": None})
            assert dict(log.hook_errors) == {}
        records = [finished.log_record for finished in exporter.get_finished_logs()]
        return records, read_jsonl(jsonl), provider

    def test_each_event_is_one_record_named_by_its_event(self, logged: Any) -> None:
        """event_name and body are the event's name, in emit order."""
        records, _, _ = logged
        names = ["train_start", "train_step", "loss_spike", "train_end", "checkpoint_skipped"]
        assert [record.event_name for record in records] == names
        assert [record.body for record in records] == names

    def test_severity_is_the_records_level(self, logged: Any) -> None:
        """emit(level='error') is ERROR/17; a catalog warning event WARNING/13; the rest INFO/9."""
        records, _, _ = logged
        severities = [(record.severity_text, record.severity_number.value) for record in records]
        assert severities == [("INFO", 9), ("INFO", 9), ("ERROR", 17), ("INFO", 9), ("WARNING", 13)]

    def test_attributes_are_the_payload(self, logged: Any) -> None:
        """Tensors as numbers, config flattened with '.', None left out, timestamp not repeated."""
        records, _, _ = logged
        start, step, *_, warning = [dict(record.attributes) for record in records]
        assert {key: start[key] for key in start if key != "elapsed_s"} == {
            "start_step": 0, "target_step": 2, "config.lr": 0.1, "config.model.hidden": 8,
        }  # fmt: skip
        assert (step["step"], step["loss"], step["lr"]) == (1, 0.5, 0.1)
        assert isinstance(step["elapsed_s"], float)
        assert "timestamp" not in step
        assert (warning["reason"], "missing" in warning) == ("disk full", False)

    def test_the_timestamp_is_the_jsonl_records(self, logged: Any) -> None:
        """Each record's timestamp is its JSONL record's instant, to the nanosecond."""
        records, jsonl, _ = logged
        assert [record.timestamp for record in records] == [timestamp_ns(r["timestamp"]) for r in jsonl]

    def test_the_scope_is_speedtronic_and_the_provider_stays_the_users(self, tmp_path: Path) -> None:
        """Logger name 'speedtronic' at its version; closing the hook doesn't shut the provider down."""
        provider, exporter = in_memory()
        hook = OtelHook(logger_provider=provider)
        hook.on_event("train_step", {"step": 1})
        hook.close()
        provider.get_logger("mine").emit(body="still open")
        first, mine = exporter.get_finished_logs()
        assert (first.instrumentation_scope.name, first.instrumentation_scope.version) == (
            "speedtronic", speedtronic.__version__,
        )  # fmt: skip
        assert mine.log_record.body == "still open"
        with pytest.raises(RuntimeError, match="after close"):
            hook.on_event("train_step", {"step": 2})

    def test_a_record_emitted_inside_a_span_carries_its_trace(self) -> None:
        """Hooks run on the emitting thread, so the current span is the record's context."""
        provider, exporter = in_memory()
        hook = OtelHook(logger_provider=provider)
        tracer = TracerProvider().get_tracer("training")
        with tracer.start_as_current_span("epoch") as span:
            hook.on_event("train_step", {"step": 1})
        [finished] = exporter.get_finished_logs()
        context = span.get_span_context()
        record = finished.log_record
        assert (record.trace_id, record.span_id) == (context.trace_id, context.span_id)


class TestAttributes:
    def test_values_otel_cant_hold_are_text(self) -> None:
        """Mixed lists, ints past int64 and objects become their str(); scalar lists stay lists."""
        error = ZeroDivisionError("division by zero")
        converted = attributes({
            "ints": [1, 2], "mixed": [1, "a"], "big": 2**70, "error": error, "nested": {"a": {"b": None}},
            "tensor": torch.tensor([1.5, 2.5]), 3: "three", "empty": [],
        })  # fmt: skip
        assert converted == {
            "ints": (1, 2), "mixed": "[1, 'a']", "big": str(2**70), "tensor": (1.5, 2.5), "3": "three",
            "empty": (), "error": "ZeroDivisionError: division by zero",
            "exception.type": "ZeroDivisionError", "exception.message": "division by zero",
            "exception.stacktrace": "ZeroDivisionError: division by zero\n",
        }  # fmt: skip


def divide() -> float:
    return 1 / 0


class TestExceptions:
    def test_an_exception_carries_the_semantic_convention_attributes(self) -> None:
        """An exception in the payload: exception.type, .message and its traceback, as OTel's handler."""
        provider, exporter = in_memory()
        with MetricLogger(stream=io.StringIO(), hooks=[OtelHook(logger_provider=provider)]) as log:
            try:
                divide()
            except ZeroDivisionError as error:
                log.emit("step_failed", {"step": 3, "error": error}, level="error")
        (finished,) = exporter.get_finished_logs()
        attrs = finished.log_record.attributes
        assert attrs["exception.type"] == "ZeroDivisionError"
        assert attrs["exception.message"] == "division by zero"
        assert attrs["exception.stacktrace"].startswith("Traceback (most recent call last):\n")
        assert "in divide\n    return 1 / 0" in attrs["exception.stacktrace"]
        assert attrs["error"] == "ZeroDivisionError: division by zero"

    def test_a_failed_training_run_sends_its_exception(self, tmp_path: Path) -> None:
        """speedtronic train's train_end(status=failed) carries the exception that ended training."""
        from speedtronic.runtime import build_runtime

        provider, exporter = in_memory()
        config = {
            "run_dir": str(tmp_path / "run"),
            "train": {"steps": 4, "checkpoint_every": 0, "batch_size": 8, "device": "cpu"},
            "logging": {"every_steps": 1, "hooks": [], "strict_hooks": True},
        }
        trainer, info = build_runtime(config)

        def failing_step(event: str, payload: dict[str, Any]) -> None:
            if event == "train_step" and payload["step"] == 2:
                raise RuntimeError("the loss went away")

        trainer.logger.hooks.extend([OtelHook(logger_provider=provider), failing_step])
        try:
            with pytest.raises(speedtronic.HookError):
                trainer.fit()
        finally:
            trainer.logger.close()
            assert info.run is not None
            info.run.release()
        (end,) = [f.log_record for f in exporter.get_finished_logs() if f.log_record.body == "train_end"]
        assert end.attributes["status"] == "failed"
        assert end.attributes["exception.type"] == "HookError"
        assert "the loss went away" in end.attributes["exception.stacktrace"]


class Receiver:
    """An OTLP/HTTP logs endpoint on 127.0.0.1: decodes each POSTed ``ExportLogsServiceRequest``."""

    def __init__(self) -> None:
        self.requests: list[ExportLogsServiceRequest] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                encoding = self.headers.get("Content-Encoding")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                with receiver.lock:  # kept before the reply: the exporter returns once it has it
                    receiver.requests.append(ExportLogsServiceRequest.FromString(body))
                reply = ExportLogsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/v1/logs"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def records(self) -> list[tuple[dict[str, Any], str, Any]]:
        """Every received log record as (resource attributes, scope name, record)."""
        with self.lock:
            requests = list(self.requests)
        return [
            (values(resource_logs.resource.attributes), scope_logs.scope.name, record)
            for request in requests
            for resource_logs in request.resource_logs
            for scope_logs in resource_logs.scope_logs
            for record in scope_logs.log_records
        ]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def values(pairs: Any) -> dict[str, Any]:
    """OTLP KeyValues as a dict of Python values."""
    return {pair.key: plain(pair.value) for pair in pairs}


def plain(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [plain(item) for item in value.array_value.values]
    return getattr(value, kind)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.close()


class TestOtlpHttp:
    def test_records_reach_an_otlp_receiver(self, receiver: Receiver, tmp_path: Path) -> None:
        """The hook's own provider exports over OTLP/HTTP: resource, scope, event name, severity,
        attributes and timestamp arrive as the protobuf a collector decodes."""
        jsonl = tmp_path / "metrics.jsonl"
        hook = OtelHook(
            receiver.endpoint, resource={"service.name": "trainer"}, headers={"x-team": "ml"}, timeout_s=60
        )
        with MetricLogger(stream=io.StringIO(), json_file=jsonl, hooks=[hook]) as logger:
            emit_run(logger)
        # closing the logger shut the hook's provider down: everything was exported before it returned
        received = receiver.records()
        assert {(resource["service.name"], scope) for resource, scope, _ in received} == {
            ("trainer", "speedtronic"),
        }  # fmt: skip
        records = [record for _, _, record in received]
        names = [record.event_name for record in records]
        assert names == ["train_start", "train_step", "loss_spike", "train_end"]
        assert [(record.severity_text, record.severity_number) for record in records][1:3] == [
            ("INFO", 9), ("ERROR", 17),
        ]  # fmt: skip
        step = values(records[1].attributes)
        assert (step["step"], step["loss"], step["lr"]) == (1, 0.5, 0.1)
        assert records[1].body.string_value == "train_step"
        assert values(records[0].attributes)["config.model.hidden"] == 8
        assert [record.time_unix_nano for record in records] == [
            timestamp_ns(r["timestamp"]) for r in read_jsonl(jsonl)
        ]
        assert hook.dropped == 0

    def test_type_otel_exports_to_the_configured_endpoint(self, receiver: Receiver, tmp_path: Path) -> None:
        """A config's {type: otel, endpoint: ...} is an OtelHook exporting there."""
        spec = {"type": "otel", "endpoint": receiver.endpoint, "timeout_s": 60}
        logger = build_logger({"run_dir": str(tmp_path), "logging": {"every_steps": 1, "hooks": [spec]}})
        try:
            (hook,) = logger.hooks
            assert isinstance(hook, OtelHook)
            logger.emit("train_step", {"step": 1, "loss": 0.5})
        finally:
            logger.close()
        assert [record.event_name for _, _, record in receiver.records()] == ["train_step"]

    def test_a_hook_never_closed_exports_at_exit(self, receiver: Receiver, tmp_path: Path) -> None:
        """A hook used without a logger and never closed: its provider is shut down at exit, so the
        queued records still reach the collector."""
        script = (
            "from speedtronic.integrations import OtelHook\n"
            f"hook = OtelHook({receiver.endpoint!r}, timeout_s=60)\n"
            "hook.on_event('train_step', {'step': 1, 'loss': 0.5})\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=300,
            env=os.environ.copy(),
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr
        assert [record.event_name for _, _, record in receiver.records()] == ["train_step"]


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class TestCollectorDown:
    def test_export_failures_are_hook_errors_and_training_goes_on(self, tmp_path: Path) -> None:
        """Collector unreachable: each failed export is raised by the hook's next call, counted by the
        logger as a hook error; every event still reaches the JSONL."""
        endpoint = f"http://127.0.0.1:{closed_port()}/v1/logs"
        hook = OtelHook(endpoint, timeout_s=0.5)
        jsonl = tmp_path / "metrics.jsonl"
        with (
            pytest.warns(HookFailureWarning, match="1 log records not exported to http://127.0.0.1"),
            MetricLogger(stream=io.StringIO(), json_file=jsonl, hooks=[hook]) as logger,
        ):
            logger.emit("train_step", {"step": 1, "loss": 0.5})
            hook.logger_provider.force_flush()  # the export is tried (and fails) now, not in a second
            logger.emit("train_step", {"step": 2, "loss": 0.4})
            assert dict(logger.hook_errors) == {"OtelHook": 1}
        # closing exported step 2, which failed too: counted as the hook's close failure
        assert (dict(logger.hook_errors), hook.dropped) == ({"OtelHook": 2}, 2)
        steps = [record["step"] for record in read_jsonl(jsonl) if record["event"] == "train_step"]
        assert steps == [1, 2]


class TestBadInput:
    def test_a_provider_and_the_hooks_own_options_are_refused(self) -> None:
        """logger_provider= with endpoint= would ignore the endpoint: a ValueError instead."""
        provider, _ = in_memory()
        with pytest.raises(ValueError, match="either logger_provider= or endpoint="):
            OtelHook("http://127.0.0.1:4318/v1/logs", logger_provider=provider)

    def test_a_bad_timeout_names_the_argument(self) -> None:
        """timeout_s must be a positive number of seconds."""
        with pytest.raises((ValueError, TypeError), match="OtelHook: timeout_s"):
            OtelHook(timeout_s=0)


class TestAlerts:
    def test_an_alert_is_a_record_with_its_severity_message_and_fields(self, tmp_path: Path) -> None:
        """WARNING/13 or ERROR/17 from the alert's severity, its message the body, its fields attributes."""
        provider, exporter = in_memory()
        rank = speedtronic.distributed.RankInfo(rank=1, world_size=2)
        with MetricLogger(
            stream=io.StringIO(), hooks=[OtelHook(logger_provider=provider)], rank=rank, lead_rank=None
        ) as log:
            log.emit("train_step", {"step": 7, "loss": 9.5})
            spike = {"rule": "spike", "severity": "warning", "key": "loss", "step": 7, "value": 9.5}
            log.emit("alert", {**spike, "threshold": 4.25, "window": 128, "message": "loss 9.5 above 4.25"})
            nan = {"rule": "non_finite", "severity": "error", "key": "loss", "step": 8, "value": float("nan")}
            log.emit("alert", {**nan, "threshold": None, "message": "loss is NaN; password=hunter2"})
            assert dict(log.hook_errors) == {}
        _, warning, error = [finished.log_record for finished in exporter.get_finished_logs()]
        assert (warning.event_name, warning.severity_text, warning.severity_number.value) == (
            "alert",
            "WARNING",
            13,
        )
        assert (error.event_name, error.severity_text, error.severity_number.value) == ("alert", "ERROR", 17)
        assert (warning.body, error.body) == ("loss 9.5 above 4.25", "loss is NaN; password=[REDACTED]")
        fields = dict(warning.attributes)
        shown = ("rule", "severity", "key", "step", "value", "threshold", "window")
        assert {key: fields[key] for key in shown} == {
            "rule": "spike", "severity": "warning", "key": "loss", "step": 7, "value": 9.5,
            "threshold": 4.25, "window": 128,
        }  # fmt: skip
        assert (fields["rank"], fields["world_size"]) == (1, 2)
        assert math.isnan(dict(error.attributes)["value"])
        assert "threshold" not in dict(error.attributes)  # None is left out, as for every record
