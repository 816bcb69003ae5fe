"""The record's note says what the writer did, for every value; no loss is silent, not even a report's."""

from __future__ import annotations

import io
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

from speedtronic.errors import LoggingFailureWarning
from speedtronic.profiling import MetricLogger
from speedtronic.record import NOTE_KEY, empty_note
from tests.helpers import read_jsonl
from tests.reliability.conftest import python


class Color(Enum):
    RED = 1


def one_record(tmp_path: Path, payload: dict[Any, Any], event: str = "train_step") -> dict[str, Any]:
    text = io.StringIO()
    with MetricLogger(stream=text, json_file=tmp_path / "m.jsonl") as logger:
        logger.emit(event, payload)
    (record,) = read_jsonl(tmp_path / "m.jsonl")
    return record


class TestTheNote:
    def test_a_lone_surrogate_keeps_the_one_note(self, tmp_path: Path) -> None:
        """A plain record whose string holds a lone surrogate: the note stays one real note, listing
        the key (it became "<orjson.Fragment ...>" text, and the note moved to _speedtronic#2)."""
        record = one_record(tmp_path, {"step": 1, "text": "a\ud800b"})
        assert record["text"] == "a\\ud800b"
        assert record[NOTE_KEY] == {**empty_note(), "converted": ["text"]}
        assert [key for key in record if key.startswith(NOTE_KEY)] == [NOTE_KEY]
        assert list(record)[-2:] == [NOTE_KEY, "timestamp"]

    @pytest.mark.parametrize("key", [1, None, Color.RED, 2.5])
    def test_a_top_level_key_that_is_no_string_is_listed_as_converted(self, tmp_path: Path, key: Any) -> None:
        """A top-level key 1, None or an Enum is written as a string key and listed under converted,
        as the same key one level down is (it was written but not listed)."""
        record = one_record(tmp_path, {"step": 1, key: "v", "nested": {key: "w"}})
        name = str(key)
        assert record[name] == "v"
        assert record[NOTE_KEY]["converted"] == [name, "nested"]
        assert record[NOTE_KEY]["origin"] == "user"

    def test_hooks_never_see_the_note(self) -> None:
        """Hooks get the payload (with the converted key's new name), never the note."""
        seen: list[dict[str, Any]] = []
        hook = lambda event, payload: seen.append(payload)  # noqa: E731  # a hook is a callable
        with MetricLogger(stream=io.StringIO(), hooks=[hook]) as logger:
            logger.emit("train_step", {"step": 1, 7: "seven"})
        assert set(seen[0]) == {"step", "7", "elapsed_s", "timestamp"}


class TestExceptionValues:
    def test_an_exception_keeps_its_type_in_both_lines(self, tmp_path: Path) -> None:
        """An exception as a value reads "ZeroDivisionError: division by zero" in the JSONL and the
        text line, as StructlogHook shows it (it was "division by zero")."""
        try:
            1 / 0  # noqa: B018  # the real exception
        except ZeroDivisionError as error:
            caught = error
        text = io.StringIO()
        with MetricLogger(stream=text, json_file=tmp_path / "m.jsonl") as logger:
            logger.emit("train_end", {"status": "failed", "error": caught, "empty": KeyError()})
        (record,) = read_jsonl(tmp_path / "m.jsonl")
        assert record["error"] == "ZeroDivisionError: division by zero"
        assert record["empty"] == "KeyError"
        assert 'error="ZeroDivisionError: division by zero" empty=KeyError' in text.getvalue()


class TestNoSilentLoss:
    def test_a_report_lost_the_same_way_is_one_line_on_stderr(self, tmp_path: Path) -> None:
        """A processor that raises on every record loses the event and the logging_error about it:
        the last resort is one line on stderr (before, only the counter knew)."""
        done = python(
            f"""
            import io, sys, warnings
            warnings.simplefilter("ignore")
            from speedtronic.profiling import MetricLogger

            def broken(logger, method_name, event_dict):
                raise RuntimeError("processor broke")

            text = io.StringIO()
            path = {str(tmp_path / "m.jsonl")!r}
            with MetricLogger(stream=text, json_file=path, processors=[broken]) as log:
                log.emit("train_step", {{"step": 1}})
            print(log.write_errors, repr(text.getvalue()))
            """
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split()[0] != "0"
        assert "''" in done.stdout  # nothing reached the text log: neither the event nor its report
        assert (tmp_path / "m.jsonl").read_text() == ""
        lines = [line for line in done.stderr.splitlines() if line.startswith("speedtronic: could not write")]
        assert lines
        assert "RuntimeError: processor broke" in lines[0]

    def test_a_report_that_reached_a_file_is_not_repeated_on_stderr(self, tmp_path: Path) -> None:
        """When the logging_error record was written, stderr stays quiet (the warning still says it)."""
        calls = {"n": 0}

        def fails_once(logger: Any, method_name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("once")
            return event_dict

        with pytest.warns(LoggingFailureWarning, match="once"):
            logger = MetricLogger(
                stream=io.StringIO(), json_file=tmp_path / "m.jsonl", processors=[fails_once]
            )
            logger.emit("train_step", {"step": 1})
            logger.close()
        assert [r["event"] for r in read_jsonl(tmp_path / "m.jsonl")] == ["logging_error"]
