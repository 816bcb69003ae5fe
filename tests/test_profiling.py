"""MetricLogger end to end: what a user of emit() relies on, step by step."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from speedtronic import HookError, HookFailureWarning, LoggerClosedError
from speedtronic.errors import LoggingFailureWarning
from speedtronic.profiling import MetricLogger
from speedtronic.testing import RecordingHook
from tests.helpers import read_jsonl

LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| (?P<level>[A-Z]+) \| (?P<rest>.*)")


def text_lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def body(line: str) -> str:
    match = LINE.fullmatch(line)
    assert match is not None, line
    return match["rest"]


class TestEmit:
    def test_text_jsonl_and_hook_for_one_event(self, jsonl_path: Path) -> None:
        """One event gives one text line, one JSONL record and one hook call, with the same data (the
        record's one timestamp included)."""
        stream, hook = io.StringIO(), RecordingHook()
        with MetricLogger(stream=stream, json_file=jsonl_path, hooks=[hook]) as logger:
            logger.emit("train_step", {"step": 1, "loss": 1.2, "lr": 0.0003})
        (line,) = text_lines(stream)
        assert re.fullmatch(r"train_step step=1 loss=1\.2 lr=0\.0003 elapsed_s=[0-9.e-]+", body(line))
        (record,) = read_jsonl(jsonl_path)
        assert list(record) == ["event", "step", "loss", "lr", "elapsed_s", "_speedtronic", "timestamp"]
        assert record["loss"] == 1.2
        ((event, payload),) = hook.calls
        assert event == "train_step"
        assert payload == {k: v for k, v in record.items() if k not in ("event", "_speedtronic")}

    def test_payload_is_not_mutated(self) -> None:
        """emit copies the payload; the caller's dict is unchanged."""
        payload = {"step": 1, "loss": 1.0}
        with MetricLogger(stream=io.StringIO()) as logger:
            logger.emit("train_step", payload)
        assert payload == {"step": 1, "loss": 1.0}

    def test_cadence_skips_steps_everywhere(self, jsonl_path: Path) -> None:
        """Off-cadence steps reach neither text, JSONL nor hooks; other events always do."""
        stream, hook = io.StringIO(), RecordingHook()
        with MetricLogger(stream=stream, json_file=jsonl_path, every_steps=3, hooks=[hook]) as logger:
            for step in range(1, 8):
                logger.emit("train_step", {"step": step})
            logger.emit("checkpoint", {"step": 7})
            logger.emit("train_step", {"loss": 1.0})
        expected = [("train_step", 3), ("train_step", 6), ("checkpoint", 7), ("train_step", None)]
        assert [(r["event"], r.get("step")) for r in read_jsonl(jsonl_path)] == expected
        assert [(e, p.get("step")) for e, p in hook.calls] == expected
        assert len(text_lines(stream)) == 4

    def test_skipped_step_reads_no_clock(self) -> None:
        """A skipped step returns before the chain: elapsed_s of the next logged step is unaffected."""
        hook = RecordingHook()
        with MetricLogger(stream=io.StringIO(), every_steps=2, hooks=[hook]) as logger:
            logger.emit("train_step", {"step": 1, "elapsed_s": "from-payload"})
            logger.emit("train_step", {"step": 2})
        assert len(hook.calls) == 1

    def test_elapsed_added_when_absent(self) -> None:
        """elapsed_s is added, and a payload's own value is kept."""
        hook = RecordingHook()
        with MetricLogger(stream=io.StringIO(), hooks=[hook]) as logger:
            logger.emit("a", {})
            logger.emit("b", {"elapsed_s": 42})
        assert isinstance(hook.calls[0][1]["elapsed_s"], float)
        assert hook.calls[0][1]["elapsed_s"] >= 0
        assert hook.calls[1][1]["elapsed_s"] == 42

    def test_no_memory_key_without_accelerator(self) -> None:
        """On a CPU machine memory_bytes is absent."""
        hook = RecordingHook()
        with MetricLogger(stream=io.StringIO(), hooks=[hook]) as logger:
            logger.emit("train_step", {"step": 1})
        assert "memory_bytes" not in hook.calls[0][1]

    def test_tensor_values_delivered_as_numbers(self, jsonl_path: Path) -> None:
        """0-d tensors arrive as Python floats in text, JSONL and hooks."""
        import torch

        stream, hook = io.StringIO(), RecordingHook()
        with MetricLogger(stream=stream, json_file=jsonl_path, hooks=[hook]) as logger:
            logger.emit("train_step", {"step": 1, "loss": torch.tensor(0.5, requires_grad=True) * 1})
        assert "loss=0.5 " in text_lines(stream)[0]
        assert read_jsonl(jsonl_path)[0]["loss"] == 0.5
        assert type(hook.calls[0][1]["loss"]) is float

    def test_trouble_events_use_their_level(self) -> None:
        """shape_warning and stale/skipped uploads are WARNING, a failed upload ERROR."""
        stream = io.StringIO()
        with MetricLogger(stream=stream) as logger:
            for event in ("train_step", "shape_warning", "delta_upload_skipped", "delta_upload_stale"):
                logger.emit(event, {})
            logger.emit("delta_upload_failed", {"error": "timeout"})
        levels = [LINE.fullmatch(line)["level"] for line in text_lines(stream)]  # type: ignore[index]
        assert levels == ["INFO", "WARNING", "WARNING", "WARNING", "ERROR"]

    def test_level_is_the_text_threshold_only(self, jsonl_path: Path) -> None:
        """With level=WARNING the text log shows only warnings; JSONL and hooks still get everything."""
        stream, hook = io.StringIO(), RecordingHook()
        with MetricLogger("WARNING", stream=stream, json_file=jsonl_path, hooks=[hook]) as logger:
            logger.emit("train_step", {"step": 1})
            logger.emit("shape_warning", {"field": "hidden"})
        assert [body(line).split()[0] for line in text_lines(stream)] == ["shape_warning"]
        assert len(read_jsonl(jsonl_path)) == 2
        assert len(hook.calls) == 2

    def test_text_file_is_appended(self, tmp_path: Path) -> None:
        """file= appends text lines (parents created); a second logger adds to the same file."""
        path = tmp_path / "logs" / "train.log"
        for step in (1, 2):
            with MetricLogger(file=path) as logger:
                logger.emit("train_step", {"step": step})
        assert [body(line).split()[1] for line in path.read_text().splitlines()] == ["step=1", "step=2"]

    def test_jsonl_is_appended(self, jsonl_path: Path) -> None:
        """A second logger on the same json_file appends."""
        for step in (1, 2):
            with MetricLogger(stream=io.StringIO(), json_file=jsonl_path) as logger:
                logger.emit("train_step", {"step": step})
        assert [r["step"] for r in read_jsonl(jsonl_path)] == [1, 2]

    def test_torn_tail_starts_a_fresh_line(self, jsonl_path: Path) -> None:
        """A file ending in a torn record (killed writer) gets the next record on a line of its own."""
        jsonl_path.parent.mkdir(parents=True)
        jsonl_path.write_bytes(b'{"event":"train_step","step":1}\n{"event":"train_st')
        with MetricLogger(stream=io.StringIO(), json_file=jsonl_path) as logger:
            logger.emit("train_step", {"step": 2})
        lines = jsonl_path.read_bytes().split(b"\n")
        assert lines[1] == b'{"event":"train_st'
        assert json.loads(lines[2])["step"] == 2

    def test_stdout_by_default(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Without file or stream the text log goes to stdout, not stderr."""
        with MetricLogger() as logger:
            logger.emit("train_start", {"target_step": 10})
        captured = capsys.readouterr()
        assert "train_start target_step=10" in captured.out
        assert captured.err == ""

    def test_the_default_console_follows_a_rich_progress_redirect(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Without stream=, a line logged while rich's Progress is shown goes through rich's console
        (printed above the bar), as print() would; the stdout of the logger's creation gets none."""
        from rich.console import Console
        from rich.progress import Progress

        shown = io.StringIO()
        with MetricLogger() as logger:
            with Progress(console=Console(file=shown, force_terminal=True), auto_refresh=False) as bar:
                bar.add_task("train", total=2)
                logger.emit("train_step", {"step": 1, "loss": 0.5})
            logger.emit("train_end", {"step": 2})
        assert "train_step step=1 loss=0.5" in shown.getvalue()
        out = capsys.readouterr().out
        assert "train_step" not in out
        assert "train_end step=2" in out  # the bar gone, stdout is stdout again

    def test_the_default_console_follows_a_tqdm_redirect(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Without stream=, tqdm's documented redirect (redirect_stdout to a DummyTqdmFile, so lines
        print above the bars) takes the text log's lines."""
        import contextlib

        from tqdm import tqdm
        from tqdm.contrib import DummyTqdmFile

        shown = io.StringIO()
        redirect = contextlib.redirect_stdout(DummyTqdmFile(shown))  # type: ignore[type-var]  # a text file
        with MetricLogger() as logger, tqdm(total=2, file=io.StringIO()), redirect:
            logger.emit("train_step", {"step": 1, "loss": 0.5})
        assert "train_step step=1 loss=0.5" in shown.getvalue()
        assert "train_step" not in capsys.readouterr().out

    def test_an_explicit_stream_keeps_its_lines(self) -> None:
        """stream= keeps receiving the text log while stdout is redirected elsewhere."""
        import contextlib

        stream = io.StringIO()
        with MetricLogger(stream=stream) as logger, contextlib.redirect_stdout(io.StringIO()) as other:
            logger.emit("train_step", {"step": 1})
        assert [body(line).split(" elapsed_s=")[0] for line in text_lines(stream)] == ["train_step step=1"]
        assert other.getvalue() == ""

    def test_payload_must_be_a_mapping(self) -> None:
        """A payload that is no mapping is a TypeError naming the event."""
        with MetricLogger(stream=io.StringIO()) as logger, pytest.raises(TypeError, match=r"'x'.*mapping"):
            logger.emit("x", [1, 2])  # type: ignore[arg-type]

    def test_a_failing_stream_is_counted_not_raised(self) -> None:
        """A text stream that can't be written (closed here) costs the line, never the run."""
        stream = io.StringIO()
        stream.close()
        with pytest.warns(LoggingFailureWarning, match="1 record"), MetricLogger(stream=stream) as logger:
            logger.emit("train_step", {"step": 1})
            assert logger.write_errors == 1
        assert logger.write_errors == 1  # close() flushing the closed stream loses nothing more

    def test_no_root_logger_and_no_propagation(self, caplog: pytest.LogCaptureFixture) -> None:
        """The text log never goes through stdlib logging: caplog (on the root logger) sees nothing."""
        import logging

        root_handlers = list(logging.getLogger().handlers)
        known_loggers = set(logging.Logger.manager.loggerDict)
        with MetricLogger(stream=io.StringIO()) as logger:
            logger.emit("train_step", {"step": 1})
        assert caplog.records == []
        assert logging.getLogger().handlers == root_handlers
        assert set(logging.Logger.manager.loggerDict) == known_loggers  # no logger registered either


@pytest.fixture(params=[True, False], ids=["background", "synchronous"])
def background(request: pytest.FixtureRequest) -> bool:
    """Hook behaviour holds with hooks on the logger's thread and inside emit alike."""
    return bool(request.param)


class TestUserProcessors:
    def test_a_user_stage_adds_and_drops_fields_for_every_sink_and_hook(self, tmp_path: Path) -> None:
        """processors=[...] run after enrichment, before rendering: text, JSONL and hooks all see it."""
        seen: list[dict[str, Any]] = []

        def add_job(logger: Any, method_name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
            event_dict["job"] = "nightly-7"
            event_dict.pop("lr", None)
            assert "elapsed_s" in event_dict  # enriched already
            return event_dict

        text, jsonl = tmp_path / "t.log", tmp_path / "m.jsonl"
        with MetricLogger(
            file=text, json_file=jsonl, processors=[add_job], hooks=[lambda e, p: seen.append(p)]
        ) as lg:
            lg.emit("train_step", {"step": 1, "lr": 0.1})
        (record,) = read_jsonl(jsonl)
        assert (record["job"], "lr" in record) == ("nightly-7", False)
        assert " job=nightly-7" in text.read_text()
        assert "lr=" not in text.read_text()
        assert (seen[0]["job"], "lr" in seen[0]) == ("nightly-7", False)

    def test_structlogs_own_processors_work_there(self, tmp_path: Path) -> None:
        """A stock structlog processor (contextvars) in processors=[...] adds the app's context."""
        import structlog

        jsonl = tmp_path / "m.jsonl"
        structlog.contextvars.bind_contextvars(request_id="r-9")
        try:
            with MetricLogger(
                stream=io.StringIO(), json_file=jsonl, processors=[structlog.contextvars.merge_contextvars]
            ) as logger:
                logger.emit("checkpoint", {"step": 1})
        finally:
            structlog.contextvars.clear_contextvars()
        assert read_jsonl(jsonl)[0]["request_id"] == "r-9"

    def test_a_user_stage_that_drops_the_event_drops_it_everywhere(self, tmp_path: Path) -> None:
        """structlog.DropEvent from a user stage: no line, no record, no hook call, no error."""
        import structlog

        def drop_checkpoints(logger: Any, method_name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
            if event_dict["event"] == "checkpoint":
                raise structlog.DropEvent
            return event_dict

        seen: list[str] = []
        jsonl = tmp_path / "m.jsonl"
        with MetricLogger(
            stream=io.StringIO(),
            json_file=jsonl,
            processors=[drop_checkpoints],
            hooks=[lambda e, p: seen.append(e)],
        ) as logger:
            logger.emit("checkpoint", {"step": 1})
            logger.emit("train_step", {"step": 1})
        assert [r["event"] for r in read_jsonl(jsonl)] == ["train_step"]
        assert seen == ["train_step"]

    def test_a_processor_that_is_not_callable_is_refused(self) -> None:
        with pytest.raises(TypeError, match=r"processors=\.\.\.\): .* is not a structlog processor"):
            MetricLogger(stream=io.StringIO(), processors=["oops"])  # type: ignore[list-item]

    def test_a_numpy_step_counts_for_the_cadence(self) -> None:
        """every_steps=2 with numpy.int64 steps: only the even ones are logged."""
        import numpy as np

        seen: list[int] = []
        with MetricLogger(
            stream=io.StringIO(), every_steps=2, hooks=[lambda e, p: seen.append(int(p["step"]))]
        ) as lg:
            for step in range(1, 7):
                lg.emit("train_step", {"step": np.int64(step)})
        assert seen == [2, 4, 6]


class TestNoGlobalState:
    def test_application_structlog_config_doesnt_reach_the_chain(self, jsonl_path: Path) -> None:
        """An app's structlog.configure (level filter, processors) changes nothing for the logger."""
        import structlog

        structlog.configure(
            processors=[lambda *_: "hijacked"],
            wrapper_class=structlog.make_filtering_bound_logger(50),
            context_class=dict,
        )
        try:
            with MetricLogger(stream=io.StringIO(), json_file=jsonl_path) as logger:
                logger.emit("train_step", {"step": 1})
        finally:
            structlog.reset_defaults()
        assert [r["event"] for r in read_jsonl(jsonl_path)] == ["train_step"]


class TestHookFailures:
    def test_failing_hook_is_counted_reported_and_isolated(self, jsonl_path: Path, background: bool) -> None:
        """A raising hook is counted; the other hooks get every event; training goes on."""
        stream, good = io.StringIO(), RecordingHook()

        def flaky(event: str, payload: dict[str, Any]) -> None:
            raise ValueError("boom")

        logger = MetricLogger(
            stream=stream, json_file=jsonl_path, hooks=[flaky, good], background_hooks=background
        )
        with pytest.warns(HookFailureWarning, match="flaky"):
            for step in range(1, 6):
                logger.emit("train_step", {"step": step})
            logger.close()
        assert dict(logger.hook_errors) == {
            "TestHookFailures.test_failing_hook_is_counted_reported_and_isolated.<locals>.flaky": 5
        }
        assert len(good.calls) == 5
        reports = [r for r in read_jsonl(jsonl_path) if r["event"] == "hook_error"]
        # failures 1, 2 and 4 are reported (rate-limited), then the total at close
        assert [(r["phase"], r["failures"]) for r in reports] == [
            ("on_event", 1),
            ("on_event", 2),
            ("on_event", 4),
            ("total", 5),
        ]
        assert "Traceback" in reports[0]["traceback"]
        assert "ValueError: boom" in reports[0]["traceback"]
        assert "traceback" not in reports[1]
        warning_lines = [line for line in text_lines(stream) if " | WARNING | hook_error" in line]
        assert len(warning_lines) == 4
        assert 'error="ValueError: boom"' in warning_lines[0]

    def test_hooks_never_see_hook_error_records(self, background: bool) -> None:
        """The logger's own failure reports are not dispatched to hooks (no feedback loop)."""
        good = RecordingHook()

        def bad(event: str, payload: dict[str, Any]) -> None:
            raise RuntimeError("x")

        logger = MetricLogger(stream=io.StringIO(), hooks=[bad, good], background_hooks=background)
        with pytest.warns(HookFailureWarning):
            logger.emit("a", {})
            logger.emit("b", {})
            logger.close()
        assert [e for e, _ in good.calls] == ["a", "b"]

    def test_two_instances_of_one_class_are_counted_apart(self) -> None:
        """Hook names are unique per logger: the second instance is 'Name#2'."""

        class Bad:
            def on_event(self, event: str, payload: dict[str, Any]) -> None:
                raise RuntimeError("x")

        with pytest.warns(HookFailureWarning), MetricLogger(stream=io.StringIO(), hooks=[Bad(), Bad()]) as lg:
            lg.emit("a", {})
            lg.flush()
            names = sorted(lg.hook_errors)
        assert names == [names[0], names[0] + "#2"]
        assert names[0].endswith("Bad")

    def test_keyboard_interrupt_propagates(self) -> None:
        """BaseException from a synchronous hook propagates out of emit."""

        def stop(event: str, payload: dict[str, Any]) -> None:
            raise KeyboardInterrupt

        logger = MetricLogger(stream=io.StringIO(), hooks=[stop], background_hooks=False)
        with pytest.raises(KeyboardInterrupt):
            logger.emit("a", {})
        logger.close()

    def test_base_exception_on_hook_thread_reaches_the_emitting_thread(self) -> None:
        """A background hook's SystemExit is re-raised by the next emit (or flush/close)."""
        after: list[str] = []

        def stop(event: str, payload: dict[str, Any]) -> None:
            if event == "a":
                raise SystemExit(3)
            after.append(event)

        logger = MetricLogger(stream=io.StringIO(), hooks=[stop], background_hooks=True)
        logger.emit("a", {})
        with pytest.raises(SystemExit):
            logger.flush()
        logger.emit("b", {})
        logger.close()
        assert after == ["b"]

    def test_strict_hooks_raise(self) -> None:
        """strict_hooks=True turns a hook failure into HookError with the original as cause."""

        def bad(event: str, payload: dict[str, Any]) -> None:
            raise ValueError("boom")

        logger = MetricLogger(stream=io.StringIO(), hooks=[bad], strict_hooks=True)
        with pytest.raises(HookError, match="boom") as info:
            logger.emit("a", {})  # no HookFailureWarning: under -W error it would hide the HookError
        assert isinstance(info.value.__cause__, ValueError)
        logger.close()

    def test_warning_can_be_escalated(self) -> None:
        """-W error::speedtronic.HookFailureWarning (as this suite runs) makes a failure fatal."""

        def bad(event: str, payload: dict[str, Any]) -> None:
            raise ValueError("boom")

        logger = MetricLogger(stream=io.StringIO(), hooks=[bad], background_hooks=False)
        with pytest.raises(HookFailureWarning):
            logger.emit("a", {})
        logger.close()
        assert logger.hook_errors == {"TestHookFailures.test_warning_can_be_escalated.<locals>.bad": 1}


class TestLifecycle:
    def test_close_closes_hooks_once_and_is_idempotent(self) -> None:
        """close() closes each hook (also one appended twice) exactly once, however often it's called."""
        hook = RecordingHook()
        logger = MetricLogger(stream=io.StringIO(), hooks=[hook, hook])
        logger.close()
        logger.close()
        assert hook.closes == 1
        assert logger.closed

    def test_escalated_warning_on_hook_thread_raises_from_close(self) -> None:
        """With background hooks, an escalated HookFailureWarning surfaces at flush/close, after
        everything is closed."""
        closed = RecordingHook()

        def bad(event: str, payload: dict[str, Any]) -> None:
            raise ValueError("boom")

        logger = MetricLogger(stream=io.StringIO(), hooks=[bad, closed], background_hooks=True)
        logger.emit("a", {})
        with pytest.raises(HookFailureWarning):
            logger.close()
        assert closed.closes == 1
        assert logger.closed

    def test_failing_close_doesnt_stop_the_others(self, jsonl_path: Path) -> None:
        """A hook whose close() raises is reported; later hooks are still closed; files closed."""
        after = RecordingHook()

        class BadClose:
            def on_event(self, event: str, payload: dict[str, Any]) -> None:
                pass

            def close(self) -> None:
                raise OSError("disk gone")

        logger = MetricLogger(stream=io.StringIO(), json_file=jsonl_path, hooks=[BadClose(), after])
        with pytest.warns(HookFailureWarning, match="close"):
            logger.close()
        assert after.closes == 1
        assert logger.hook_errors == {
            "TestLifecycle.test_failing_close_doesnt_stop_the_others.<locals>.BadClose": 1
        }
        phases = [r["phase"] for r in read_jsonl(jsonl_path)]
        assert phases == ["close", "total"]

    def test_emit_after_close_raises_and_reopens_nothing(self, jsonl_path: Path) -> None:
        """emit after close is LoggerClosedError; the JSONL file is not recreated."""
        logger = MetricLogger(stream=io.StringIO(), json_file=jsonl_path)
        logger.close()
        jsonl_path.unlink()
        with pytest.raises(LoggerClosedError, match="closed"):
            logger.emit("train_step", {"step": 1})
        with pytest.raises(LoggerClosedError):
            logger.emit("train_step", {"step": 3})  # also when the cadence would skip it
        assert not jsonl_path.exists()

    def test_close_releases_file_descriptors(self, tmp_path: Path) -> None:
        """Repeated programmatic runs leak no open files."""
        import os

        def open_fds() -> int:
            return len(os.listdir("/proc/self/fd"))

        before = open_fds()
        for i in range(20):
            with MetricLogger(file=tmp_path / f"{i}.log", json_file=tmp_path / f"{i}.jsonl") as logger:
                logger.emit("train_step", {"step": 1})
        assert open_fds() == before

    def test_hooks_appended_after_construction(self) -> None:
        """logger.hooks.append works after construction and hooks can be replaced wholesale."""
        first, second = RecordingHook(), RecordingHook()
        with MetricLogger(stream=io.StringIO()) as logger:
            logger.emit("a", {})
            logger.hooks.append(first)
            logger.emit("b", {})
            logger.hooks = [second]
            logger.emit("c", {})
        assert [e for e, _ in first.calls] == ["b"]
        assert [e for e, _ in second.calls] == ["c"]


class TestBadArguments:
    @pytest.mark.parametrize("every", [0, -3, 2.0])
    def test_every_steps(self, every: Any) -> None:
        with pytest.raises(ValueError, match="every_steps"):
            MetricLogger(every_steps=every)

    def test_unknown_level(self) -> None:
        with pytest.raises(ValueError, match=r"level=\.\.\.\) must be one of DEBUG, INFO"):
            MetricLogger("LOUD")

    def test_unopenable_file(self, tmp_path: Path) -> None:
        """A file that can't be opened names the argument and the path."""
        (tmp_path / "dir").mkdir()
        with pytest.raises(ValueError, match=r"MetricLogger\(file=.*dir'\): can't open it"):
            MetricLogger(file=tmp_path / "dir")

    def test_unopenable_json_file(self, tmp_path: Path) -> None:
        blocker = tmp_path / "not-a-dir"
        blocker.write_text("")
        with pytest.raises(ValueError, match=r"MetricLogger\(json_file=.*\): can't open it"):
            MetricLogger(stream=io.StringIO(), json_file=blocker / "m.jsonl")

    def test_file_and_stream(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="either file= or stream="):
            MetricLogger(file=tmp_path / "a.log", stream=io.StringIO())

    def test_bad_hook_refused_at_construction_and_append(self) -> None:
        """A hook that can't take (event, payload) is refused when registered, naming it."""

        def one_arg(payload: dict[str, Any]) -> None:
            pass

        with pytest.raises(TypeError, match=r"one_arg.*can't be called as \(event, payload\)"):
            MetricLogger(stream=io.StringIO(), hooks=[one_arg])
        with MetricLogger(stream=io.StringIO()) as logger:
            with pytest.raises(TypeError, match="neither a TrainingHook"):
                logger.hooks.append(42)
            assert list(logger.hooks) == []

    def test_a_hook_name_points_to_build_hook(self) -> None:
        """hooks=["wandb"] says how to build a hook from its name, at construction and at append."""
        build_hook = r"'wandb' is a name.*speedtronic\.hooks\.build_hook\('wandb', \.\.\.\)"
        with pytest.raises(TypeError, match=build_hook):
            MetricLogger(stream=io.StringIO(), hooks=["wandb"])
        with MetricLogger(stream=io.StringIO()) as logger, pytest.raises(TypeError, match="build_hook"):
            logger.hooks.append("tensorboard")

    @pytest.mark.parametrize("lead_rank", ["0", -1, True, 0.0])
    def test_a_lead_rank_that_is_no_rank_is_refused(self, lead_rank: Any, tmp_path: Path) -> None:
        """lead_rank="0" (read from the environment) would silently turn off the text log and the
        hooks: it is refused in one line naming the argument, before any file is opened."""
        with pytest.raises(ValueError, match=r"^MetricLogger\(lead_rank=.*\): expected an int >= 0 or None"):
            MetricLogger(file=tmp_path / "t.log", lead_rank=lead_rank)
        assert list(tmp_path.iterdir()) == []

    def test_a_rank_that_is_no_rank_info_is_refused(self) -> None:
        """rank= takes a RankInfo of ints with 0 <= rank < world_size."""
        from speedtronic.distributed import RankInfo

        with pytest.raises(TypeError, match=r"MetricLogger\(rank=\.\.\.\): expected a speedtronic"):
            MetricLogger(stream=io.StringIO(), rank=0)  # type: ignore[arg-type]  # the mistake tested
        for bad in (RankInfo("1", 2), RankInfo(2, 2), RankInfo(-1, 2)):  # type: ignore[arg-type]  # ditto
            with pytest.raises(ValueError, match=r"0 <= rank < world_size"):
                MetricLogger(stream=io.StringIO(), rank=bad)


class TestArgumentsCheckedBeforeFilesOpen:
    def test_a_device_torch_refuses_fails_at_construction(self, tmp_path: Path) -> None:
        """device="gpu" is a ValueError naming the argument, not an event lost at every emit."""
        import torch  # noqa: F401  # with torch imported the device is resolved at construction

        with pytest.raises(ValueError, match=r"MetricLogger\(device='gpu'\)"):
            MetricLogger(file=tmp_path / "t.log", device="gpu")
        assert not (tmp_path / "t.log").exists()

    @pytest.mark.parametrize(
        "bad",
        [
            {"hook_queue_size": 0},
            {"close_timeout_s": -1},
            {"close_timeout_s": float("inf")},
            {"hook_put_timeout_s": float("nan")},
            {"hook_queue_size": 1.5},
        ],
    )
    def test_bad_queue_options_open_no_file(self, tmp_path: Path, bad: dict[str, Any]) -> None:
        import os

        before = len(os.listdir("/proc/self/fd"))
        with pytest.raises(ValueError, match=next(iter(bad))):
            MetricLogger(file=tmp_path / "t.log", json_file=tmp_path / "m.jsonl", **bad)
        assert len(os.listdir("/proc/self/fd")) == before
        assert not (tmp_path / "m.jsonl").exists()
