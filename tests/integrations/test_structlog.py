"""StructlogHook into an application's own structlog setup, and speedtronic's processors in an app's chain.

The app setups are stock ones, built here with ``structlog.wrap_logger`` (never ``structlog.configure``):
a JSON chain (contextvars, ``add_log_level``, ``TimeStamper``, ``JSONRenderer``), stdlib logging with
``structlog.stdlib.ProcessorFormatter`` on a logger of the tests' own, and structlog's other stdlib
route, ``render_to_log_kwargs`` into a stdlib logger whose formatter adds the record's extras.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
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


@contextlib.contextmanager
def stdlib_app_logger(
    name: str, formatter: logging.Formatter, processors: list[Any]
) -> Iterator[tuple[Any, io.StringIO, logging.Logger]]:
    """An app's structlog over a stdlib logger of its own (``name``, at INFO, not propagating) whose
    handler formats with ``formatter`` into the yielded ``StringIO``; restored afterwards."""
    output = io.StringIO()
    handler = logging.StreamHandler(output)
    handler.setFormatter(formatter)
    stdlib_logger = logging.getLogger(name)
    stdlib_logger.addHandler(handler)
    stdlib_logger.setLevel(logging.INFO)
    stdlib_logger.propagate = False
    logger = structlog.wrap_logger(
        stdlib_logger, wrapper_class=structlog.stdlib.BoundLogger, processors=processors
    )
    try:
        yield logger, output, stdlib_logger
    finally:
        stdlib_logger.removeHandler(handler)
        stdlib_logger.propagate = True
        stdlib_logger.setLevel(logging.NOTSET)


@pytest.fixture
def stdlib_app() -> Iterator[tuple[Any, io.StringIO, logging.Logger]]:
    """An app's stdlib logging with ProcessorFormatter (JSON), on a logger of its own at INFO."""
    formatter = structlog.stdlib.ProcessorFormatter(
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.JSONRenderer(),
        ],
    )
    with stdlib_app_logger(
        "speedtronic_tests.structlog_app",
        formatter,
        [
            structlog.stdlib.filter_by_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.add_log_level,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
    ) as app:
        yield app


@pytest.fixture
def kwargs_app() -> Iterator[tuple[Any, io.StringIO, logging.Logger]]:
    """structlog's stdlib route: ``render_to_log_kwargs`` hands each event to a stdlib logger as
    ``msg`` and ``extra``; the handler's ProcessorFormatter adds the extras back (``ExtraAdder``) and
    renders the exception with ``dict_tracebacks``."""
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.ExtraAdder(),
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.dict_tracebacks,
            structlog.processors.JSONRenderer(),
        ],
    )
    with stdlib_app_logger(
        "speedtronic_tests.kwargs_app",
        formatter,
        [
            structlog.stdlib.filter_by_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.stdlib.render_to_log_kwargs,
        ],
    ) as app:
        yield app


def filtering_app(level: int, *extra: Any) -> tuple[Any, io.StringIO]:
    """An app whose logger is ``structlog.make_filtering_bound_logger(level)``: JSON lines into a buffer."""
    output = io.StringIO()
    logger = structlog.wrap_logger(
        structlog.PrintLogger(output),
        wrapper_class=structlog.make_filtering_bound_logger(level),
        processors=[structlog.processors.add_log_level, *extra, structlog.processors.JSONRenderer()],
    )
    return logger, output


def raised_error() -> ZeroDivisionError:
    """A ZeroDivisionError that was raised, so it has a traceback."""
    try:
        1 / 0  # noqa: B018  # the point is the exception
    except ZeroDivisionError as error:
        return error
    raise AssertionError("1 / 0 did not raise")


ALERTS: list[tuple[str, dict[str, Any], str | None]] = [
    ("train_step", {"step": 1, "loss": 1.0}, None),
    ("ooo_backprop", {"enabled": False, "reason": "off"}, "debug"),
    ("my_alert", {"value": 3}, "error"),
    ("shape_warning", {"field": "hidden", "value": 1000, "suggested": 1024}, None),
    ("quiet_note", {"value": 1}, "warning"),
    ("train_end", {"step": 1}, "critical"),
]
"""Events and the level each is emitted with (None: the catalog's)."""


def emit_alerts(hook: StructlogHook, **options: Any) -> None:
    with MetricLogger(stream=io.StringIO(), hooks=[hook], **options) as metrics:
        for event, payload, level in ALERTS:
            metrics.emit(event, payload, level=level)


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
            "shape_warning",
            "warning",
            "speedtronic_tests.structlog_app",
        )
        assert record["field"] == "hidden"

    def test_a_payload_that_already_has_the_new_name_keeps_both(self) -> None:
        """level and payload_level in one payload: payload_level, payload_level#2 (JSONL's #n rule)."""
        with structlog.testing.capture_logs() as captured:
            StructlogHook().on_event(
                "odd", {"payload_level": "a", "level": "b", 1: "int key", "1": "str key"}
            )
        assert captured == [
            {
                "event": "odd",
                "log_level": "info",
                "payload_level": "a",
                "payload_level#2": "b",
                "1": "int key",
                "1#2": "str key",
            }
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
            "self",
            "event",
            "method_name",
            "level",
            "timestamp",
            "exc_info",
            "stack_info",
            "logger",
            "_record",
            "_from_structlog",
            "positional_args",
            "_speedtronic",
        }
        assert structlog_names <= StructlogHook.RESERVED_KEYS


class TestLevel:
    """The record's level is the method the hook calls (relies on the logger passing ``level=``)."""

    def test_a_structlog_app_filtering_at_warning_gets_what_it_asked_for(self) -> None:
        """make_filtering_bound_logger(WARNING): info and debug events dropped, emit's level kept."""
        logger, output = filtering_app(logging.WARNING)
        emit_alerts(StructlogHook(logger))
        assert [(r["event"], r["level"]) for r in records(output)] == [
            ("my_alert", "error"),
            ("shape_warning", "warning"),
            ("quiet_note", "warning"),
            ("train_end", "critical"),
        ]

    def test_a_debug_event_arrives_at_debug(self) -> None:
        """ooo_backprop, emitted at debug, is a debug call: kept at DEBUG, its level named so."""
        logger, output = filtering_app(logging.DEBUG)
        emit_alerts(StructlogHook(logger))
        assert [(r["event"], r["level"]) for r in records(output)] == [
            ("train_step", "info"),
            ("ooo_backprop", "debug"),
            ("my_alert", "error"),
            ("shape_warning", "warning"),
            ("quiet_note", "warning"),
            ("train_end", "critical"),
        ]

    def test_a_stdlib_app_filtering_at_warning_gets_what_it_asked_for(
        self, stdlib_app: tuple[Any, io.StringIO, logging.Logger]
    ) -> None:
        """Through stdlib logging (filter_by_level, a logger at WARNING): the same events survive."""
        logger, output, stdlib_logger = stdlib_app
        stdlib_logger.setLevel(logging.WARNING)
        emit_alerts(StructlogHook(logger))
        assert [(r["event"], r["level"]) for r in records(output)] == [
            ("my_alert", "error"),
            ("shape_warning", "warning"),
            ("quiet_note", "warning"),
            ("train_end", "critical"),
        ]

    def test_levels_survive_background_hooks(self) -> None:
        """With background_hooks=True the worker thread calls the hook at the record's level too."""
        logger, output = filtering_app(logging.WARNING)
        emit_alerts(StructlogHook(logger), background_hooks=True)
        assert [(r["event"], r["level"]) for r in records(output)] == [
            ("my_alert", "error"),
            ("shape_warning", "warning"),
            ("quiet_note", "warning"),
            ("train_end", "critical"),
        ]

    def test_called_without_a_level_the_hook_uses_the_catalogs(self) -> None:
        """on_event(event, payload) alone: warning for shape_warning, info for an unknown event."""
        with structlog.testing.capture_logs() as captured:
            hook = StructlogHook()
            hook.on_event("shape_warning", {"field": "hidden"})
            hook.on_event("delta_upload_failed", {"error": "timeout"})
            hook.on_event("my_alert", {"value": 3})
            hook.on_event("my_alert", {"value": 4}, level="critical")
        assert [(e["event"], e["log_level"]) for e in captured] == [
            ("shape_warning", "warning"),
            ("delta_upload_failed", "error"),
            ("my_alert", "info"),
            ("my_alert", "critical"),
        ]


class TestStdlibRoute:
    def test_every_log_record_name_reaches_the_app_renamed(
        self, kwargs_app: tuple[Any, io.StringIO, logging.Logger]
    ) -> None:
        """Each attribute of a real LogRecord (and message, asctime) as a payload key: no KeyError from
        makeRecord, the event logged, the value under payload_<key>."""
        logger, output, _ = kwargs_app
        record = logging.LogRecord("name", logging.INFO, "path", 1, "msg", (), None)
        names = sorted({*vars(record), "message", "asctime"})
        assert {"name", "args", "msg", "levelname", "created", "module", "stack_info"} <= set(names)
        with MetricLogger(stream=io.StringIO(), hooks=[StructlogHook(logger)], strict_hooks=True) as metrics:
            metrics.emit("model_info", {"step": 7, **{name: f"value of {name}" for name in names}})
            metrics.emit("train_step", {"step": 8, "name": "resnet", "args": [1, 2], "loss": 0.5})

        first, second = records(output)
        assert (first["event"], first["step"], first["logger"]) == (
            "model_info",
            7,
            "speedtronic_tests.kwargs_app",
        )
        for name in names:
            assert first[f"payload_{name}"] == f"value of {name}", name
        assert (second["payload_name"], second["payload_args"], second["loss"]) == ("resnet", [1, 2], 0.5)

    def test_every_log_record_name_is_reserved(self) -> None:
        """StructlogHook.RESERVED_KEYS holds every name stdlib logging refuses in extra."""
        record = logging.LogRecord("name", logging.INFO, "path", 1, "msg", (), None)
        assert {*vars(record), "message", "asctime"} <= StructlogHook.RESERVED_KEYS

    def test_an_exception_keeps_its_traceback_through_stdlib(
        self, kwargs_app: tuple[Any, io.StringIO, logging.Logger]
    ) -> None:
        """exc_info reaches the stdlib record: the app's dict_tracebacks renders type, message, frames."""
        logger, output, _ = kwargs_app
        StructlogHook(logger).on_event("my_alert", {"error": raised_error()}, level="error")
        [record] = records(output)
        assert record["error"] == "ZeroDivisionError: division by zero"
        [exception] = record["exception"]
        assert (exception["exc_type"], exception["exc_value"]) == ("ZeroDivisionError", "division by zero")
        assert exception["frames"][-1]["name"] == "raised_error"


class TestExceptions:
    def test_dict_tracebacks_renders_the_first_exception(self) -> None:
        """The app's dict_tracebacks gets exc_info: type, message and the frames it was raised in."""
        logger, output = filtering_app(logging.INFO, structlog.processors.dict_tracebacks)
        with MetricLogger(stream=io.StringIO(), hooks=[StructlogHook(logger)]) as metrics:
            metrics.emit("delta_upload_failed", {"local_step": 2, "error": raised_error()})

        [record] = records(output)
        assert (record["level"], record["error"]) == ("error", "ZeroDivisionError: division by zero")
        [exception] = record["exception"]
        assert (exception["exc_type"], exception["exc_value"]) == ("ZeroDivisionError", "division by zero")
        assert [frame["name"] for frame in exception["frames"]] == ["raised_error"]

    def test_format_exc_info_writes_the_traceback(self, json_app: tuple[Any, io.StringIO]) -> None:
        """The app's format_exc_info gets the traceback text; an unraised one is its last line alone."""
        logger, output = json_app
        hook = StructlogHook(logger)
        hook.on_event("my_alert", {"error": raised_error(), "other": KeyError("k")}, level="error")
        hook.on_event("my_alert", {"error": ValueError("never raised")}, level="error")

        first, second = records(output)
        assert first["exception"].startswith("Traceback (most recent call last):")
        assert first["exception"].endswith("ZeroDivisionError: division by zero")
        assert (first["error"], first["other"]) == ("ZeroDivisionError: division by zero", "KeyError: 'k'")
        assert (second["error"], second["exception"]) == (
            "ValueError: never raised",
            "ValueError: never raised",
        )

    def test_a_payload_exc_info_key_is_not_taken_for_the_exception(self) -> None:
        """A payload key exc_info is payload_exc_info; exc_info is the exception's own."""
        error = raised_error()
        with structlog.testing.capture_logs() as captured:
            StructlogHook(strict_json=False).on_event("my_alert", {"exc_info": False, "error": error})
        assert captured == [
            {
                "event": "my_alert",
                "log_level": "info",
                "payload_exc_info": False,
                "error": "ZeroDivisionError: division by zero",
                "exc_info": error,
            }
        ]


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
            "nan": ["/loss"],
            "inf": ["/grad_norm"],
            "neg_inf": ["/history/1"],
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
            {
                "event": "shape_warning",
                "log_level": "warning",
                "field": "hidden",
                "value": 1000,
                "suggested": 1024,
            },
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


class TestUnderTheCLI:
    def test_one_console_line_per_event_and_the_text_log_in_train_log(self, tmp_path: Path) -> None:
        """`speedtronic train` with {type: structlog}: stdout holds structlog's lines only, each event
        once; the text log is in {run_dir}/train.log, which the summary names."""
        run_dir = tmp_path / "run"
        (tmp_path / "config.yaml").write_text(
            "train: {steps: 6, checkpoint_every: 0, batch_size: 8, device: cpu}\n"
            "logging: {every_steps: 2, hooks: [{type: structlog}]}\n"
        )
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "speedtronic",
                "train",
                "--config",
                "config.yaml",
                "--run-dir",
                str(run_dir),
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "OMP_NUM_THREADS": "1", "NO_COLOR": "1"},
        )
        assert done.returncode == 0, done.stderr
        console = done.stdout.splitlines()
        assert " | INFO | " not in done.stdout  # no text log line on the console
        steps = [line for line in console if re.search(r"\btrain_step\b", line)]
        assert len(steps) == 3  # steps 2, 4, 6: one line each
        assert all("[info     ]" in line for line in steps)  # structlog's ConsoleRenderer
        assert sum(bool(re.search(r"\btrain_end\b", line)) for line in console) == 1
        text_log = (run_dir / "train.log").read_text().splitlines()
        assert sum(" | INFO | train_step " in line for line in text_log) == 3
        assert str(run_dir / "train.log") in done.stderr

    def test_a_config_that_names_the_text_log_file_keeps_it(self, tmp_path: Path) -> None:
        """logging.file given: the text log goes there, and nothing goes to train.log."""
        from speedtronic.commands.train import with_structlog_console

        config = {"logging": {"file": "my.log", "hooks": [{"type": "structlog"}]}}
        assert with_structlog_console(config) is config
        plain = {"logging": {"file": None, "hooks": [{"type": "tensorboard"}]}}
        assert with_structlog_console(plain) is plain
        moved = with_structlog_console({"logging": {"file": None, "hooks": [{"type": "structlog"}]}})
        assert moved["logging"]["file"] == "{run_dir}/train.log"


CONSOLE_APP = """
import logging, sys
import structlog
from speedtronic.hooks import background
from speedtronic.integrations import StructlogHook
from speedtronic.profiling import MetricLogger

structlog.configure(
    processors=[structlog.processors.add_log_level, structlog.processors.JSONRenderer()],
    wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    logger_factory=structlog.PrintLoggerFactory(sys.stdout),
)
hooks = {"hook": [StructlogHook()], "background": [background(StructlogHook())]}.get(sys.argv[1], [])
logger = MetricLogger(hooks=hooks)
logger.emit("train_start", {"start_step": 0, "target_step": 2})
logger.emit("train_step", {"step": 1, "loss": 1.0})
logger.emit("shape_warning", {"step": 1, "shape": [1, 2]})
logger.emit("train_end", {"step": 2, "status": "completed"})
if sys.argv[1] == "appended":
    logger.hooks.append(StructlogHook())
    logger.emit("shape_warning", {"step": 2, "shape": [3]})
logger.close()
"""


def console_lines(tmp_path: Path, mode: str) -> list[str]:
    """stdout of an app (structlog at WARNING, JSON) whose MetricLogger writes its text log by default."""
    script = tmp_path / "app.py"
    script.write_text(CONSOLE_APP)
    done = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


class TestTheConsole:
    def test_the_default_stream_leaves_stdout_to_the_apps_logger(self, tmp_path: Path) -> None:
        """Default stream plus a StructlogHook: each event the app keeps prints once, by the app;
        the INFO events its WARNING filter drops don't print at all."""
        lines = console_lines(tmp_path, "hook")
        assert [json.loads(line)["event"] for line in lines] == ["shape_warning"]

    def test_a_background_hook_takes_the_console_too(self, tmp_path: Path) -> None:
        """A StructlogHook on a worker thread (``background(...)``, a config's ``background: true``):
        each event the app keeps prints once, by the app, as with the hook called inline."""
        lines = console_lines(tmp_path, "background")
        assert [json.loads(line)["event"] for line in lines] == ["shape_warning"]

    def test_without_the_hook_the_text_log_is_on_stdout(self, tmp_path: Path) -> None:
        """No StructlogHook: the text log prints every event on stdout, as before."""
        lines = console_lines(tmp_path, "none")
        assert [line.split(" | ")[2].split()[0] for line in lines] == [
            "train_start",
            "train_step",
            "shape_warning",
            "train_end",
        ]

    def test_a_hook_appended_later_takes_the_console_from_the_next_event(self, tmp_path: Path) -> None:
        """A StructlogHook appended after four events: the text log printed those, the app the next."""
        lines = console_lines(tmp_path, "appended")
        assert len(lines) == 5
        assert " | WARNING | shape_warning " in lines[2]
        last = json.loads(lines[4])
        assert (last["event"], last["level"], last["step"]) == ("shape_warning", "warning", 2)

    def test_an_explicit_stream_is_written_beside_the_hook(self) -> None:
        """stream= given: the text log is written there even with a StructlogHook."""
        stream, app = io.StringIO(), io.StringIO()
        hook = StructlogHook(structlog.wrap_logger(structlog.PrintLogger(app)))
        with MetricLogger(stream=stream, hooks=[hook]) as logger:
            logger.emit("train_step", {"step": 1, "loss": 1.0})
        assert " | INFO | train_step step=1" in stream.getvalue()
        assert "train_step" in app.getvalue()


class TestAPlainStdlibLogger:
    @pytest.fixture
    def stdlib_logger(self) -> Iterator[tuple[logging.Logger, list[logging.LogRecord]]]:
        """A plain stdlib logger at INFO whose handler keeps the records."""
        logger = logging.getLogger("speedtronic_tests.plain_stdlib")
        kept: list[logging.LogRecord] = []
        handler = logging.Handler()
        handler.emit = kept.append  # type: ignore[method-assign]  # a handler that keeps records
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        try:
            yield logger, kept
        finally:
            logger.removeHandler(handler)
            logger.propagate = True
            logger.setLevel(logging.NOTSET)

    def test_the_payload_arrives_as_extra(
        self, stdlib_logger: tuple[logging.Logger, list[logging.LogRecord]]
    ) -> None:
        """logging.getLogger(...) as the hook's logger: the message is the event and its values, the
        payload the record's attributes (LogRecord's own names as payload_<key>), at the event's level."""
        logger, kept = stdlib_logger
        with MetricLogger(stream=io.StringIO(), strict_hooks=True, hooks=[StructlogHook(logger)]) as log:
            log.emit("train_step", {"step": 3, "loss": 0.5, "name": "resnet", "msg": "m"})
            log.emit("shape_warning", {"step": 3})
        assert [(r.getMessage().split(" elapsed_s=")[0], r.levelname) for r in kept] == [
            ("train_step step=3 loss=0.5 payload_name=resnet payload_msg=m", "INFO"),
            ("shape_warning step=3", "WARNING"),
        ]
        record = vars(kept[0])
        assert (record["step"], record["loss"], record["payload_name"], record["payload_msg"]) == (
            3,
            0.5,
            "resnet",
            "m",
        )
        assert record["name"] == "speedtronic_tests.plain_stdlib"

    def test_nan_and_inf_show_in_the_message_as_the_text_log_writes_them(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Through pytest's caplog: the message says loss=nan grad_norm=inf, as the text log; the
        record's attributes are the strict-JSON values, with no _speedtronic note."""
        stream = io.StringIO()
        hook = StructlogHook(logging.getLogger("speedtronic_tests.nan"))
        with (
            caplog.at_level(logging.INFO, logger="speedtronic_tests.nan"),
            MetricLogger(stream=stream, hooks=[hook], strict_hooks=True) as log,
        ):
            log.emit("train_step", {"step": 2, "loss": float("nan"), "grad_norm": float("-inf")})
        (record,) = caplog.records
        assert record.getMessage().startswith("train_step step=2 loss=nan grad_norm=-inf elapsed_s=")
        assert " loss=nan grad_norm=-inf " in stream.getvalue()  # what the text log writes
        assert (vars(record)["loss"], vars(record)["grad_norm"]) == (None, None)
        assert "_speedtronic" not in vars(record)

    def test_a_structlog_console_renderer_formatter_shows_no_note(self) -> None:
        """stdlib logging with structlog's ProcessorFormatter (ExtraAdder, ConsoleRenderer): loss=nan
        in the line, and no _speedtronic={...} dict."""
        out = io.StringIO()
        handler = logging.StreamHandler(out)
        handler.setFormatter(
            structlog.stdlib.ProcessorFormatter(
                processors=[
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.dev.ConsoleRenderer(colors=False),
                ],
                foreign_pre_chain=[structlog.stdlib.ExtraAdder()],
            )
        )
        logger = logging.getLogger("speedtronic_tests.console")
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        try:
            with MetricLogger(stream=io.StringIO(), hooks=[StructlogHook(logger)], strict_hooks=True) as log:
                log.emit("train_step", {"step": 2, "loss": float("nan"), "grad_norm": float("inf")})
        finally:
            logger.removeHandler(handler)
            logger.propagate = True
        line = out.getvalue()
        assert "train_step step=2 loss=nan grad_norm=inf " in line
        assert "_speedtronic" not in line

    def test_its_level_filters_and_exceptions_keep_their_traceback(
        self, stdlib_logger: tuple[logging.Logger, list[logging.LogRecord]]
    ) -> None:
        """The stdlib logger's level drops INFO events; an exception arrives as the record's exc_info."""
        logger, kept = stdlib_logger
        logger.setLevel(logging.WARNING)
        try:
            1 / 0  # noqa: B018  # a real traceback
        except ZeroDivisionError as error:
            raised = error
        with MetricLogger(stream=io.StringIO(), strict_hooks=True, hooks=[StructlogHook(logger)]) as log:
            log.emit("train_step", {"step": 1, "loss": 1.0})
            log.emit("data_error", {"step": 1, "error": raised}, level="error")
        [record] = kept
        message = record.getMessage()
        assert message.startswith('data_error step=1 error="ZeroDivisionError: division by zero" ')
        assert record.levelname == "ERROR"
        assert record.exc_info is not None
        assert record.exc_info[1] is raised
        assert vars(record)["error"] == "ZeroDivisionError: division by zero"


def run_app(code: str) -> list[str]:
    """Run ``code`` (an application's own logging setup, then a MetricLogger with a StructlogHook on
    the stdlib logger ``train``) in a fresh interpreter; its stderr lines."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    return done.stderr.splitlines()


USER_EMIT = """
import io, logging
from speedtronic.integrations import StructlogHook
from speedtronic.profiling import MetricLogger

def train():
    with MetricLogger(stream=io.StringIO(), hooks=[StructlogHook(logging.getLogger("train"))]) as logger:
        logger.emit("train_step", {"step": 5, "loss": 0.5, "name": "shard-3"})  # line 8

train()
"""


class TestStdlibLogging:
    def test_basic_config_shows_the_values_and_the_users_line(self) -> None:
        """logging.basicConfig(): the message carries the values; filename:lineno is the user's emit."""
        setup = (
            "import logging\nlogging.basicConfig(level=logging.INFO, format="
            "'%(levelname)s:%(name)s:%(filename)s:%(lineno)d:%(funcName)s:%(message)s')\n"
        )
        (line,) = run_app(setup + USER_EMIT)
        values = r"step=5 loss=0.5 payload_name=shard-3 elapsed_s=[0-9.e-]+"
        assert re.fullmatch(r"INFO:train:<string>:10:train:train_step " + values, line), line

    def test_dict_config_json_has_the_values_and_the_call_site(self) -> None:
        """dictConfig with a JSON formatter: message with the values, extra fields, the user's line."""
        setup = """
import json, logging, logging.config

class Json(logging.Formatter):
    def format(self, record):
        extra = {k: v for k, v in vars(record).items() if k in ("step", "loss", "payload_name")}
        where = {"line": record.lineno, "func": record.funcName}
        return json.dumps({"message": record.getMessage(), **where, **extra})

logging.config.dictConfig({
    "version": 1, "formatters": {"json": {"()": Json}},
    "handlers": {"err": {"class": "logging.StreamHandler", "formatter": "json"}},
    "loggers": {"train": {"handlers": ["err"], "level": "INFO"}},
})
"""
        (line,) = run_app(setup + USER_EMIT)
        record = json.loads(line)
        assert record["message"].startswith("train_step step=5 loss=0.5 payload_name=shard-3 elapsed_s=")
        assert (record["line"], record["func"]) == (setup.count("\n") + 8, "train")
        assert (record["step"], record["loss"], record["payload_name"]) == (5, 0.5, "shard-3")

    def test_loguru_intercept_handler_shows_the_values(self) -> None:
        """loguru's documented InterceptHandler: the message it logs carries the values."""
        pytest.importorskip("loguru")
        setup = """
import inspect, logging, sys
from loguru import logger

class InterceptHandler(logging.Handler):
    def emit(self, record):
        try:
            level = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        frame, depth = inspect.currentframe(), 0
        while frame:
            filename = frame.f_code.co_filename
            is_logging = filename == logging.__file__
            is_frozen = "importlib" in filename and "_bootstrap" in filename
            if depth > 0 and not (is_logging or is_frozen):
                break
            frame = frame.f_back
            depth += 1
        logger.opt(depth=depth, exception=record.exc_info).log(level, record.getMessage())

logger.remove()
logger.add(sys.stderr, format="{level}|{message}")
logging.basicConfig(handlers=[InterceptHandler()], level=0, force=True)
"""
        (line,) = run_app(setup + USER_EMIT)
        assert line.startswith("INFO|train_step step=5 loss=0.5 payload_name=shard-3 elapsed_s="), line

    def test_loguru_finding_the_records_own_call_site_reports_the_users_line(self) -> None:
        """An InterceptHandler that walks to the record's own pathname:lineno (the docs' variant): the
        user's emit is loguru's function and line."""
        pytest.importorskip("loguru")
        setup = """
import inspect, logging, sys
from loguru import logger

class InterceptHandler(logging.Handler):
    def emit(self, record):
        frame, depth = inspect.currentframe(), 0
        while frame and (frame.f_code.co_filename, frame.f_lineno) != (record.pathname, record.lineno):
            frame = frame.f_back
            depth += 1
        logger.opt(depth=depth, exception=record.exc_info).log(record.levelname, record.getMessage())

logger.remove()
logger.add(sys.stderr, format="{function}:{line}|{message}")
logging.basicConfig(handlers=[InterceptHandler()], level=0, force=True)
"""
        (line,) = run_app(setup + USER_EMIT)
        assert line.startswith(f"train:{setup.count(chr(10)) + 8}|train_step step=5 "), line

    def test_a_filtered_level_builds_no_message(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A stdlib logger at WARNING: an info event is dropped before its message is rendered."""
        import speedtronic.integrations.structlog as module

        rendered: list[str] = []
        monkeypatch.setattr(module, "format_fields", lambda *a, **k: rendered.append("x") or "")
        quiet = logging.getLogger("speedtronic-tests.quiet")
        quiet.setLevel(logging.WARNING)
        with MetricLogger(stream=io.StringIO(), hooks=[StructlogHook(quiet)]) as logger:
            logger.emit("train_step", {"step": 1, "loss": 0.5})
        assert rendered == []


class TestStructlogCallsite:
    def test_callsite_parameter_adder_reports_the_users_emit(self) -> None:
        """CallsiteParameterAdder(additional_ignores=["speedtronic"]): the user's emit line and function."""
        output = io.StringIO()
        callsite = structlog.processors.CallsiteParameterAdder(
            [
                structlog.processors.CallsiteParameter.FILENAME,
                structlog.processors.CallsiteParameter.LINENO,
                structlog.processors.CallsiteParameter.FUNC_NAME,
            ],
            additional_ignores=["speedtronic"],
        )
        app = structlog.wrap_logger(
            structlog.PrintLogger(output), processors=[callsite, structlog.processors.JSONRenderer()]
        )
        with MetricLogger(stream=io.StringIO(), hooks=[StructlogHook(app)]) as logger:
            line = sys._getframe().f_lineno + 1
            logger.emit("train_step", {"step": 5, "loss": 0.5})
        (record,) = records(output)
        assert (record["filename"], record["lineno"], record["func_name"]) == (
            "test_structlog.py",
            line,
            "test_callsite_parameter_adder_reports_the_users_emit",
        )
