"""Redact: pydantic models and attrs instances are opened like dataclasses, to the fields their repr shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pydantic
import pytest

from speedtronic.processors import Redact
from speedtronic.profiling import MetricLogger
from speedtronic.testing import RecordingHook
from tests.helpers import read_jsonl
from tests.reliability.conftest import python

PLAIN = "hunter2-CANARY"
"""Looks like nothing: hidden only because its field's name is a secret key."""


class Tracker(pydantic.BaseModel):
    project: str = "p"
    api_key: str = PLAIN


class TrainConfig(pydantic.BaseModel):
    lr: float = 0.1
    tracker: Tracker = Tracker()
    dsn: str = pydantic.Field(default=f"postgres://u:{PLAIN}x@h/db", repr=False)


class Extra(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    lr: float = 0.1


class OwnText(pydantic.BaseModel):
    host: str = "h"
    password: str = PLAIN

    def __str__(self) -> str:
        return f"OwnText<{self.host}>"

    __repr__ = __str__


@attrs.define
class Store:
    host: str = "h"
    password: str = PLAIN
    url: str = attrs.field(default=f"postgres://u:{PLAIN}x@h/db", repr=False)
    token_hint: str = attrs.field(default="abcd", repr=lambda value: value[:2] + "..")


@attrs.define
class Run:
    name: str = "r1"
    store: Store = attrs.Factory(Store)


@attrs.define
class OwnRepr:
    password: str = PLAIN

    def __repr__(self) -> str:
        return "OwnRepr<...>"


@attrs.define
class Clean:
    host: str = "h"


def redact(value: Any) -> Any:
    return Redact()(None, "info", {"event": "x", "v": value})["v"]


class TestPydantic:
    def test_a_secret_field_is_hidden_at_any_depth(self) -> None:
        """A model holding a secret becomes a dict of its repr's fields; a nested model too."""
        assert redact({"cfg": TrainConfig()}) == {
            "cfg": {"lr": 0.1, "tracker": {"project": "p", "api_key": "[REDACTED]"}}
        }

    def test_extra_fields_are_judged_like_declared_ones(self) -> None:
        """``extra="allow"`` fields (shown by its repr) are keys like any other."""
        assert redact(Extra(wandb_api_key=PLAIN)) == {"lr": 0.1, "wandb_api_key": "[REDACTED]"}

    def test_a_clean_model_is_passed_on(self) -> None:
        """A model without secrets is the same object; its ``repr=False`` field stays out of sight."""
        model = Extra(lr=0.2)
        assert redact(model) is model

    def test_a_model_with_its_own_text_is_judged_by_it(self) -> None:
        """A model printing itself its own way is not opened into fields its text doesn't show."""
        model = OwnText()
        assert redact(model) is model

    def test_the_callers_model_is_untouched(self) -> None:
        """Redaction works on copies: the caller's model keeps its key."""
        config = TrainConfig()
        redact(config)
        assert config.tracker.api_key == PLAIN


class TestAttrs:
    def test_a_secret_field_is_hidden_at_any_depth(self) -> None:
        """An attrs instance holding a secret becomes a dict of its repr's fields, ``repr=`` functions
        applied and ``repr=False`` fields left out; a nested one too."""
        assert redact([Run()]) == [
            {"name": "r1", "store": {"host": "h", "password": "[REDACTED]", "token_hint": "ab.."}}
        ]

    def test_a_clean_instance_is_passed_on(self) -> None:
        """An attrs instance without secrets is the same object."""
        clean = Clean()
        assert redact(clean) is clean

    def test_an_instance_with_its_own_repr_is_judged_by_it(self) -> None:
        """A hand-written ``__repr__`` is what is shown: the instance is not opened."""
        own = OwnRepr()
        assert redact(own) is own

    def test_classic_attr_s_classes_too(self) -> None:
        """``@attr.s`` code that never imports the ``attrs`` namespace gets the same rule."""
        result = python(
            """
            import sys
            import attr
            from speedtronic.processors import Redact

            @attr.s
            class Store:
                host = attr.ib(default="h")
                password = attr.ib(default="hunter2-CANARY")

            assert "attrs" not in sys.modules
            print(Redact()(None, "info", {"event": "x", "v": Store()})["v"])
            """
        )
        assert result.stdout == "{'host': 'h', 'password': '[REDACTED]'}\n", result.stderr


@pytest.mark.parametrize("config", [TrainConfig(), Run()], ids=["pydantic", "attrs"])
def test_no_sink_and_no_hook_gets_the_key(tmp_path: Path, config: Any) -> None:
    """Through a real MetricLogger: the text log, the JSONL and the hook show the config without its key."""
    hook = RecordingHook()
    text, jsonl = tmp_path / "run.log", tmp_path / "m.jsonl"
    with MetricLogger(file=text, json_file=jsonl, hooks=[hook]) as logger:
        logger.emit("train_start", {"config": config, "nested": {"configs": [config]}})
    written = text.read_text() + jsonl.read_text() + repr(hook.calls)
    assert PLAIN not in written
    assert "[REDACTED]" in text.read_text()
    (record,) = read_jsonl(jsonl)
    ((_, payload),) = hook.calls
    assert record["config"] == payload["config"] == payload["nested"]["configs"][0]
