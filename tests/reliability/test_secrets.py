"""Secrets: values under secret-looking keys reach no file and no hook, however deep they are."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import io
import types
from pathlib import Path
from typing import Any

import pytest

from speedtronic.processors import DEFAULT_SECRET_PATTERNS, Redact
from speedtronic.profiling import MetricLogger

CANARY = "sk-CANARY-7f3a9c"


@dataclasses.dataclass
class Config:
    lr: float
    wandb_api_key: str


def canary_payload() -> dict[str, Any]:
    return {
        "step": 1,
        "api_key": CANARY,
        "OPENAI_API_KEY": CANARY,
        "hf_token": CANARY,
        "db": {
            "host": "h",
            "Password": CANARY,
            "replicas": [{"secret_key": CANARY}, ("x", {"token": CANARY})],
        },
        "headers": {"Authorization": f"Bearer {CANARY}", "Cookie": f"session={CANARY}"},
        "config": Config(lr=0.1, wandb_api_key=CANARY),
        "args": argparse.Namespace(seed=1, github_token=CANARY),
        "ns": types.SimpleNamespace(aws_secret_access_key=CANARY),
        "credentials": {"user": "me", "pw": CANARY},
        "tokens_per_s": 1234.5,
        "num_tokens": 99,
    }


def everything_written(tmp_path: Path, **options: Any) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    seen: list[tuple[str, dict[str, Any]]] = []
    stream = io.StringIO()
    with MetricLogger(stream=stream, json_file=tmp_path / "m.jsonl", hooks=[lambda e, p: seen.append((e, p))],
                      **options) as logger:
        logger.emit("train_start", canary_payload())
    return stream.getvalue() + (tmp_path / "m.jsonl").read_text(), seen


class TestCanary:
    def test_canary_reaches_no_sink_and_no_hook(self, tmp_path: Path) -> None:
        """Canaries nested in dicts, lists, tuples, dataclasses and namespaces: in no file, no hook."""
        written, seen = everything_written(tmp_path)
        assert CANARY not in written
        assert CANARY not in repr(seen)
        assert written.count("[REDACTED]") >= 12
        ((_, payload),) = seen
        assert payload["db"]["host"] == "h"
        assert payload["config"] == {"lr": 0.1, "wandb_api_key": "[REDACTED]"}
        assert payload["args"] == {"seed": 1, "github_token": "[REDACTED]"}
        assert (payload["tokens_per_s"], payload["num_tokens"]) == (1234.5, 99)  # metrics, not secrets

    def test_without_redaction_the_canary_is_written(self, tmp_path: Path) -> None:
        """redact=False writes the values as given (so the test above can fail)."""
        written, seen = everything_written(tmp_path, redact=False)
        assert CANARY in written
        assert CANARY in repr(seen)

    def test_custom_patterns(self, tmp_path: Path) -> None:
        """redact=[...] replaces the defaults: only the given patterns are hidden."""
        stream = io.StringIO()
        with MetricLogger(stream=stream, redact=["*ssn*"]) as logger:
            logger.emit("x", {"user_ssn": CANARY, "api_key": "visible"})
        assert CANARY not in stream.getvalue()
        assert "visible" in stream.getvalue()

    def test_one_string_is_refused(self) -> None:
        """redact="*key*" (a string, not a list of patterns) is a TypeError at construction."""
        with pytest.raises(TypeError, match="list of patterns"):
            MetricLogger(stream=io.StringIO(), redact="*key*")

    def test_caller_payload_untouched(self) -> None:
        """The caller's nested objects are never changed; only the logger's copies are redacted."""
        payload = canary_payload()
        with MetricLogger(stream=io.StringIO()) as logger:
            logger.emit("x", payload)
        assert payload["db"]["Password"] == CANARY
        assert payload["config"].wandb_api_key == CANARY


class TestRedactProcessor:
    def test_called_directly(self) -> None:
        """Redact in any structlog chain: keys matched case-insensitively at any depth; event kept."""
        event = {"event": "token", "Auth": {"X-API-KEY": "s"}, "ok": [1, {"passwd": 2}]}
        out = Redact()(None, "info", event)
        assert out["event"] == "token"
        assert out["Auth"] == {"X-API-KEY": "[REDACTED]"}
        assert out["ok"] == [1, {"passwd": "[REDACTED]"}]

    def test_nothing_to_redact_keeps_the_same_objects(self) -> None:
        """A nested value holding no secret is passed on as the same object (no copy per event)."""
        nested = {"a": [1, 2, {"b": 3}]}
        out = Redact()(None, "info", {"event": "x", "cfg": nested})
        assert out["cfg"] is nested

    def test_secrets_cannot_hide_below_the_depth_limit(self) -> None:
        """Nesting deeper than 32 levels is cut, so a secret at level 100 is not passed on."""
        deep: Any = {"password": CANARY}
        for _ in range(100):
            deep = [deep]
        out = Redact()(None, "info", {"event": "x", "deep": deep})
        assert CANARY not in repr(out)

    @pytest.mark.parametrize("key", ["tokens", "num_tokens", "tokens_per_s", "max_new_tokens", "author"])
    def test_training_metrics_are_not_secrets(self, key: str) -> None:
        """Token counts and similar metrics pass through the default patterns."""
        assert Redact(DEFAULT_SECRET_PATTERNS)(None, "info", {"event": "x", key: 5})[key] == 5

    def test_a_reused_redactor_still_catches_what_it_has_not_seen(self) -> None:
        """After many plain events, a new secret key, a secret nested in a known key, a non-string
        key and a key first seen nested are each still redacted at the top level."""
        redact = Redact()

        def redacted(**fields: Any) -> dict[Any, Any]:
            return dict(redact(None, "info", {"event": "train_step", **fields}))

        for step in range(3):
            assert redacted(step=step, loss=0.5)["loss"] == 0.5
        assert redacted(step=3, hf_token=CANARY)["hf_token"] == "[REDACTED]"
        assert redacted(step=4, loss={"password": CANARY})["loss"] == {"password": "[REDACTED]"}
        assert redact(None, "info", {"event": "x", ("api_key",): CANARY})[("api_key",)] == "[REDACTED]"
        redacted(outer={"db_password": "nested"})
        assert redacted(db_password=CANARY)["db_password"] == "[REDACTED]"

    def test_a_str_subclass_key_is_judged_by_its_text(self) -> None:
        """An enum key equal to a safe key, but written as ``Col.PASSWORD``, is still redacted."""

        class Col(str, enum.Enum):
            PASSWORD = "pw"

        redact = Redact()
        redact(None, "info", {"event": "login", "pw": 1})  # "pw" is a safe key now
        assert redact(None, "info", {"event": "login", Col.PASSWORD: CANARY})[Col.PASSWORD] == "[REDACTED]"
