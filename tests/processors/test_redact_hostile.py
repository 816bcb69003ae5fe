"""Redact: a value whose attribute lookups raise never costs the record; it is written as its text."""

from __future__ import annotations

import contextvars
import io
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from werkzeug.local import LocalProxy

from speedtronic.processors import Redact
from speedtronic.profiling import MetricLogger
from speedtronic.testing import RecordingHook
from tests.helpers import read_jsonl

CANARY = "sk-CANARY123"


class Lazy:
    """A lazy object whose first attribute lookup tries to load it, and fails."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"lazy object could not load (wanted {name})")

    def __str__(self) -> str:
        return f"<Lazy holding {CANARY}>"


def unbound_proxy() -> Any:
    """A werkzeug ``LocalProxy`` read outside its context: every lookup, ``__class__`` included, raises."""
    return LocalProxy(contextvars.ContextVar("request"))


def failing_tensor_mock() -> Any:
    """A mock standing in for a tensor whose ``dtype`` lookup has a side effect that raises."""
    fake = mock.NonCallableMock()
    type(fake).dtype = mock.PropertyMock(side_effect=RuntimeError("device lost"))
    return fake


HOSTILE = {"proxy": unbound_proxy, "lazy": Lazy, "mock": failing_tensor_mock}


class TestTheStage:
    @pytest.mark.parametrize("make", HOSTILE.values(), ids=HOSTILE.keys())
    def test_a_hostile_value_becomes_its_redacted_text(self, make: Any) -> None:
        """At the top level and nested, the value is replaced by its text (credentials redacted), and
        every other field is still redacted as usual."""
        value = make()
        out = Redact()(None, "info", {"event": "x", "v": value, "nested": [{"v": value}], "api_key": "k"})
        assert type(out["v"]) is not type(value)
        assert isinstance(out["v"], str)
        assert CANARY not in out["v"]
        assert out["nested"] == [{"v": out["v"]}]
        assert out["api_key"] == "[REDACTED]"

    def test_a_printable_one_keeps_its_text(self) -> None:
        """A lazy object that prints itself keeps that text, redacted."""
        assert Redact()(None, "info", {"event": "x", "v": Lazy()})["v"] == "<Lazy holding [REDACTED]>"

    def test_an_unprintable_one_names_its_type(self) -> None:
        """A proxy that can't even print itself is written as a placeholder naming its type."""
        assert Redact()(None, "info", {"event": "x", "v": unbound_proxy()})["v"] == "<unprintable LocalProxy>"


@pytest.mark.parametrize("make", HOSTILE.values(), ids=HOSTILE.keys())
def test_the_record_reaches_every_sink_and_hook(tmp_path: Path, make: Any) -> None:
    """Through a real MetricLogger: the JSONL line, the text line and the hook call all happen."""
    hook = RecordingHook()
    stream, jsonl = io.StringIO(), tmp_path / "m.jsonl"
    with MetricLogger(stream=stream, json_file=jsonl, hooks=[hook]) as logger:
        logger.emit("train_step", {"step": 1, "loss": 0.5, "user": make()})
    (record,) = read_jsonl(jsonl)
    assert (record["event"], record["step"], record["loss"]) == ("train_step", 1, 0.5)
    (line,) = stream.getvalue().splitlines()
    assert " | train_step step=1 loss=0.5 user=" in line
    assert hook.events == ["train_step"]
    assert hook.calls[0][1]["user"] == record["user"]
    assert CANARY not in stream.getvalue() + jsonl.read_text() + repr(hook.calls)
