"""Exceptions are redacted as a whole (``redact_exception``) wherever they leave: message, ``args``,
notes, the chain of causes and contexts, and the printed stack; in the stage, in every sink and hook
of a real ``MetricLogger``, in OTel attributes, a stdlib app log, hook_error records and warnings."""

from __future__ import annotations

import io
import logging
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any

import pytest

from speedtronic.processors import Redact
from speedtronic.processors.redact import ExceptionText, redact_exception
from speedtronic.profiling import MetricLogger
from speedtronic.testing import RecordingHook
from tests.helpers import read_jsonl

SECRET = "hunter2-CANARY"
"""Looks like nothing: hidden only because it follows ``password=`` or a secret name."""


def chained_cause() -> ValueError:
    """A clean ValueError raised from a KeyError whose message holds the secret."""
    try:
        try:
            raise KeyError(f"password={SECRET}")
        except KeyError as cause:
            raise ValueError("could not open the store") from cause
    except ValueError as error:
        return error


def chained_context() -> ValueError:
    """A clean ValueError raised while handling one whose args pair names the secret."""
    try:
        try:
            raise RuntimeError("api_key", SECRET)
        except RuntimeError:
            raise ValueError("retry failed")  # noqa: B904  # the implicit context is the point
    except ValueError as error:
        return error


def noted() -> ValueError:
    """A clean ValueError whose note (add_note) holds the secret."""
    try:
        raise ValueError("bad config")
    except ValueError as error:
        error.add_note(f"while reading token={SECRET}")
        return error


SHAPES = {"cause": chained_cause, "context": chained_context}
if sys.version_info >= (3, 11):  # add_note, and tracebacks that print notes
    SHAPES["note"] = noted


class TestRedactException:
    @pytest.mark.parametrize("make", SHAPES.values(), ids=SHAPES.keys())
    def test_the_whole_is_judged(self, make: Any) -> None:
        """A clean message with the secret in a cause, a context or a note: hidden, and the printed
        traceback (which prints all of them) shows the rest with the secret replaced."""
        error = make()
        assert SECRET in "".join(traceback.format_exception(type(error), error, error.__traceback__))
        shown = redact_exception(error)
        assert isinstance(shown, ExceptionText)
        assert shown.hidden
        assert SECRET not in repr(shown)
        assert shown.line == f"ValueError: {error}"
        assert "Traceback (most recent call last)" in shown.printed
        assert "[REDACTED]" in shown.printed

    def test_a_clean_exception_is_not_hidden(self) -> None:
        """Nothing secret anywhere: hidden is False, the texts are Python's own."""
        try:
            1 / 0  # noqa: B018  # the point is the exception
        except ZeroDivisionError as error:
            shown = redact_exception(error)
            printed = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        assert (shown.line, shown.message, shown.printed, shown.hidden) == (
            "ZeroDivisionError: division by zero",
            "division by zero",
            printed,
            False,
        )

    def test_an_args_pair_is_hidden_in_the_printed_stack(self) -> None:
        """RuntimeError("api_key", X) prints X in its last line: the pair rule hides it there too."""
        try:
            raise RuntimeError("api_key", SECRET)
        except RuntimeError as error:
            shown = redact_exception(error)
        assert shown.line == "RuntimeError: ('api_key', '[REDACTED]')"
        assert SECRET not in shown.printed

    def test_a_chain_that_loops_ends(self) -> None:
        """A cause that is its own context's cause (a loop): each exception is looked at once."""
        first, second = ValueError("a"), ValueError(f"password={SECRET}")
        first.__cause__, second.__cause__ = second, first
        assert redact_exception(first).hidden


class TestGroups:
    @pytest.mark.skipif(sys.version_info < (3, 11), reason="exception groups are Python 3.11's")
    def test_a_group_members_secret_is_found(self) -> None:
        """An exception group whose member holds the secret: hidden, the printed group redacted."""
        group = ExceptionGroup("two failures", [ValueError("fine"), KeyError(f"password={SECRET}")])  # noqa: F821  # 3.11's builtin
        shown = redact_exception(group)
        assert shown.hidden
        assert SECRET not in shown.printed

    def test_an_exceptions_attribute_that_is_no_group(self) -> None:
        """A plain exception with an ``exceptions`` attribute of another kind is judged as usual."""
        error = ValueError(f"password={SECRET}")
        error.exceptions = 3  # type: ignore[attr-defined]  # what a library may set on its own errors
        assert redact_exception(error).line == "ValueError: password=[REDACTED]"


class TestInAStockChain:
    def test_redact_in_a_plain_structlog_chain(self) -> None:
        """Redact before structlog's LogCapture: the captured event holds the line, not the chain."""
        import structlog
        from structlog.testing import LogCapture

        capture = LogCapture()
        logger = structlog.wrap_logger(structlog.ReturnLogger(), processors=[Redact(), capture])
        logger.error("failed", error=chained_cause())
        (entry,) = capture.entries
        assert entry["error"] == "ValueError: could not open the store"


class TestTheStage:
    @pytest.mark.parametrize("make", SHAPES.values(), ids=SHAPES.keys())
    def test_a_secret_in_the_chain_turns_the_exception_into_its_line(self, make: Any) -> None:
        """Redact: the exception (whose printing shows the chain) becomes its one line, which holds no
        secret, so no sink or hook can print the chain."""
        out = Redact()(None, "info", {"event": "x", "error": make()})
        assert type(out["error"]) is not ValueError
        assert out["error"].startswith("ValueError: ")
        assert SECRET not in out["error"]

    def test_a_clean_exception_stays_itself(self) -> None:
        """Nothing to hide anywhere in it: the hooks still get the exception (its type, its traceback)."""
        error = ValueError("fine")
        assert Redact()(None, "info", {"event": "x", "error": error})["error"] is error


class TestEverySink:
    @pytest.mark.parametrize("make", SHAPES.values(), ids=SHAPES.keys())
    def test_no_sink_or_hook_holds_the_secret(self, tmp_path: Path, make: Any) -> None:
        """Through a MetricLogger: the text log, the JSONL, a recording hook, a stdlib app log through
        StructlogHook (which prints exc_info's whole chain), and an OTel record."""
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

        from speedtronic.integrations import OtelHook, StructlogHook

        exporter = InMemoryLogRecordExporter()
        provider = LoggerProvider()
        provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
        app_output = io.StringIO()
        app = logging.getLogger("speedtronic_tests.redact_exceptions")
        handler = logging.StreamHandler(app_output)
        handler.setFormatter(logging.Formatter("%(message)s"))
        app.addHandler(handler)
        app.setLevel(logging.INFO)
        app.propagate = False
        recording, stream, jsonl = RecordingHook(), io.StringIO(), tmp_path / "m.jsonl"
        try:
            with MetricLogger(
                stream=stream,
                json_file=jsonl,
                hooks=[recording, StructlogHook(app), OtelHook(logger_provider=provider)],
            ) as logger:
                error = make()
                logger.emit("step_failed", {"step": 3, "error": error}, level="error")
                try:  # emitted while handled: OTel's exception attributes come from sys.exc_info()
                    raise error
                except ValueError as handled:
                    logger.emit("train_end", {"step": 3, "status": "failed", "error": handled})
        finally:
            app.removeHandler(handler)
            app.propagate = True
        otel = [dict(finished.log_record.attributes or {}) for finished in exporter.get_finished_logs()]
        everything = stream.getvalue() + jsonl.read_text() + repr(recording.calls) + app_output.getvalue()
        assert SECRET not in everything + repr(otel)
        assert [record["error"] for record in read_jsonl(jsonl)] == [f"ValueError: {error}"] * 2
        assert [call[1]["error"] for call in recording.calls] == [f"ValueError: {error}"] * 2
        assert "step_failed" in app_output.getvalue()
        assert otel[1]["exception.type"] == "ValueError"
        assert "[REDACTED]" in otel[1]["exception.stacktrace"]


class TestOtel:
    def test_the_handled_exceptions_text_is_the_payloads(self, tmp_path: Path) -> None:
        """train_end's error text names the exception being handled, whose message holds a password:
        OTel's exception.message and .stacktrace hide it as the JSONL does (they were built from
        sys.exc_info(), unredacted)."""
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

        from speedtronic.integrations import OtelHook

        exporter = InMemoryLogRecordExporter()
        provider = LoggerProvider()
        provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
        jsonl = tmp_path / "m.jsonl"
        with MetricLogger(
            stream=io.StringIO(), json_file=jsonl, hooks=[OtelHook(logger_provider=provider)]
        ) as log:
            try:
                raise RuntimeError(f"db login failed: password={SECRET}")
            except RuntimeError as error:
                text = f"RuntimeError: {error}"
                log.emit("train_end", {"step": 1, "status": "failed", "error": text}, level="error")
        (finished,) = exporter.get_finished_logs()
        attrs = dict(finished.log_record.attributes or {})
        assert SECRET not in repr(attrs)
        assert attrs["exception.type"] == "RuntimeError"
        assert attrs["exception.message"] == "db login failed: password=[REDACTED]"
        assert "password=[REDACTED]" in attrs["exception.stacktrace"]
        assert (
            read_jsonl(jsonl)[0]["error"]
            == attrs["error"]
            == "RuntimeError: db login failed: password=[REDACTED]"
        )

    @pytest.mark.parametrize("make", SHAPES.values(), ids=SHAPES.keys())
    def test_exception_attributes_redact_the_whole(self, make: Any) -> None:
        """exception_attributes(), public: the stacktrace prints the chain and notes, redacted."""
        from speedtronic.integrations.otel import attributes, exception_attributes

        error = make()
        attrs = exception_attributes(error)
        assert SECRET not in repr(attrs)
        assert attrs["exception.message"] == str(error)
        assert SECRET not in repr(attributes({"error": error}))


class TestFailureReports:
    @pytest.mark.parametrize("make", SHAPES.values(), ids=SHAPES.keys())
    def test_a_hook_raising_a_chained_secret(self, tmp_path: Path, make: Any) -> None:
        """A hook raises an exception whose chain or note holds the secret: the hook_error record (its
        traceback too), the text log and the warning hide it."""

        def failing(event: str, payload: dict[str, Any]) -> None:
            raise make()

        stream, jsonl = io.StringIO(), tmp_path / "m.jsonl"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with MetricLogger(stream=stream, json_file=jsonl, hooks=[failing]) as logger:
                logger.emit("train_step", {"step": 1, "loss": 0.5})
        (report,) = [r for r in read_jsonl(jsonl) if r["event"] == "hook_error" and "error" in r]
        assert report["error"].startswith("ValueError: ")
        assert "[REDACTED]" in report["traceback"]
        warned = "\n".join(str(w.message) for w in caught)
        assert "failing' failed" in warned
        assert SECRET not in stream.getvalue() + jsonl.read_text() + warned

    def test_a_hook_raising_an_args_pair(self, tmp_path: Path) -> None:
        """RuntimeError("password", X): the pair rule hides X in the hook_error record and warning
        (text rules alone don't see it)."""

        def failing(event: str, payload: dict[str, Any]) -> None:
            raise RuntimeError("password", SECRET)

        jsonl = tmp_path / "m.jsonl"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with MetricLogger(stream=io.StringIO(), json_file=jsonl, hooks=[failing]) as logger:
                logger.emit("train_step", {"step": 1, "loss": 0.5})
        (report,) = [r for r in read_jsonl(jsonl) if r["event"] == "hook_error" and "error" in r]
        assert report["error"] == "RuntimeError: ('password', '[REDACTED]')"
        assert SECRET not in jsonl.read_text() + "\n".join(str(w.message) for w in caught)

    @pytest.mark.parametrize(
        "literal", ["{'password': b'%s'}", "password=b'%s'", "secret_key = r'%s'", "api_key=u'%s'"]
    )
    def test_a_python_literal_with_a_prefix(self, tmp_path: Path, literal: str) -> None:
        """A hook's error holding b'...', r'...' after a secret key: hidden in the hook_error record,
        the text log and the warning (only the prefix letter was)."""

        def failing(event: str, payload: dict[str, Any]) -> None:
            raise RuntimeError(f"refused: {literal % SECRET}")

        stream, jsonl = io.StringIO(), tmp_path / "m.jsonl"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with MetricLogger(stream=stream, json_file=jsonl, hooks=[failing]) as logger:
                logger.emit("train_step", {"step": 1, "loss": 0.5})
        warned = "\n".join(str(w.message) for w in caught)
        assert "refused" in warned
        assert SECRET not in stream.getvalue() + jsonl.read_text() + warned
