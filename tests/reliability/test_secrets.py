"""Secrets: a canary in any payload shape reaches no file and no hook of a real ``MetricLogger``."""

from __future__ import annotations

import argparse
import collections
import dataclasses
import io
import types
from pathlib import Path
from typing import Any

import attrs
import pydantic
import pytest

from speedtronic.profiling import MetricLogger

CANARY = "sk-CANARY123"
"""Looks like an OpenAI key: hidden by the value rule wherever it is."""

PLAIN = "hunter2-CANARY"
"""Looks like nothing: hidden only by a secret key, a pair's name or a field's name."""


@dataclasses.dataclass
class DB:
    host: str
    url: str = dataclasses.field(repr=False, default="")
    password: str = ""


@dataclasses.dataclass
class Config:
    lr: float
    wandb_api_key: str


Creds = collections.namedtuple("Creds", "user api_key")


class Tracker(pydantic.BaseModel):
    project: str
    api_key: str


@attrs.define
class Store:
    host: str
    PGPASSWORD: str


class Headers(collections.UserList[Any]):
    pass


def keyed_shapes(secret: str) -> dict[str, Any]:
    """``secret`` under a secret key, in every container shape ``Redact`` opens."""
    import numpy as np

    return {
        "api_key": secret,
        "OPENAI_API_KEY": secret,
        "privateKey": secret,
        "github_token_2": secret,
        "token ": secret,
        "db": DB("h", url=f"postgres://u:{secret}@h/db", password=secret),
        "nested": {
            "host": "h",
            "Password": secret,
            "replicas": [{"secret_key": secret}, ("x", {"jwt": secret})],
            "author": "me",
        },
        "headers": [("Authorization", f"Token {secret}"), ("api_key", secret)],
        "user_list": Headers([("access-key", secret)]),
        "queue": collections.deque([{"ssh_key": secret}]),
        "creds": Creds("me", secret),
        "config": Config(lr=0.1, wandb_api_key=secret),
        "args": argparse.Namespace(seed=1, github_token=secret),
        "ns": types.SimpleNamespace(aws_secret_access_key=secret),
        "items": {"db_pass": secret, "step": 1}.items(),
        "objects": np.array([{"signing_key": secret}, 2], dtype=object),
        "credentials": {"user": "me", "pw": secret},
        "tracker": Tracker(project="p", api_key=secret),
        "store": [Store("h", PGPASSWORD=secret)],
        "env": {"userpassword": secret, "REDISPASSWORD": secret},
        "tokens_per_s": 1234.5,
        "num_tokens": 99,
    }


def valued_shapes(secret: str) -> dict[str, Any]:
    """``secret`` under innocent keys, as text that looks like a credential, in every shape."""
    import numpy as np

    return {
        "note": f"using {secret} today",
        "bearer_header": f"Bearer {secret}",
        "dsn": f"postgres://u:{secret}@h/db",
        "list": [secret],
        "set": {secret},
        "frozen": frozenset({secret}),
        "deque": collections.deque([secret]),
        "view": {"a": secret}.values(),
        "text_array": np.array([secret, "x"]),
        "error": ValueError(f"refused {secret}"),
        "raw": secret.encode(),
        secret: "as a key",
    }


def written(tmp_path: Path, payload: dict[str, Any], **options: Any) -> tuple[str, list[Any]]:
    """Everything a logger with a text file, a JSONL file and a hook wrote for one event."""
    seen: list[Any] = []
    text, jsonl = tmp_path / "run.log", tmp_path / "m.jsonl"
    logger = MetricLogger(file=text, json_file=jsonl, hooks=[lambda e, p: seen.append((e, p))], **options)
    try:
        logger.emit("train_start", payload)
    finally:
        logger.close()
    return text.read_text() + jsonl.read_text(), seen


class TestCanary:
    @pytest.mark.parametrize("secret", [CANARY, PLAIN])
    def test_secret_keys_in_every_shape(self, tmp_path: Path, secret: str) -> None:
        """Under a secret key, in every container shape: in no file and no hook's payload."""
        text, seen = written(tmp_path, keyed_shapes(secret))
        assert secret not in text
        assert secret not in repr(seen)
        ((_, payload),) = seen
        assert payload["config"] == {"lr": 0.1, "wandb_api_key": "[REDACTED]"}
        assert payload["db"] == {"host": "h", "password": "[REDACTED]"}  # the repr=False url left out
        assert payload["tracker"] == {"project": "p", "api_key": "[REDACTED]"}
        assert payload["store"] == [{"host": "h", "PGPASSWORD": "[REDACTED]"}]
        assert (payload["tokens_per_s"], payload["num_tokens"]) == (1234.5, 99)  # metrics, not secrets

    def test_credential_values_under_any_key(self, tmp_path: Path) -> None:
        """Credential-looking text under innocent keys, in every shape: in no file and no hook."""
        text, seen = written(tmp_path, valued_shapes(CANARY))
        assert CANARY not in text
        assert CANARY not in repr(seen)
        assert "postgres://u:[REDACTED]@h/db" in text

    def test_without_redaction_the_canary_is_written(self, tmp_path: Path) -> None:
        """redact=False writes the values as given (so the tests above can fail)."""
        text, seen = written(tmp_path, {**keyed_shapes(CANARY), **valued_shapes(CANARY)}, redact=False)
        assert CANARY in text
        assert CANARY in repr(seen)

    def test_redaction_never_shows_more_than_the_unredacted_output(self, tmp_path: Path) -> None:
        """A dataclass's repr=False field, absent without redaction, stays absent with it."""
        db = DB("h", url=f"postgres://u:{PLAIN}@h/db")
        for redact in (False, True):
            text, seen = written(tmp_path / str(redact), {"db": db}, redact=redact)
            assert PLAIN not in text
            assert PLAIN not in repr(seen)

    def test_custom_patterns_add_to_the_defaults(self, tmp_path: Path) -> None:
        """redact=[...] hides the keys it matches as well as the default secret keys."""
        text, _ = written(tmp_path, {"user_ssn": PLAIN, "api_key": PLAIN, "loss": 0.5}, redact=["*ssn*"])
        assert PLAIN not in text
        assert "loss=0.5" in text

    def test_one_string_is_refused(self) -> None:
        """redact="*key*" (a string, not a list of patterns) is a TypeError at construction."""
        with pytest.raises(TypeError, match="list of patterns"):
            MetricLogger(stream=io.StringIO(), redact="*key*")

    def test_caller_payload_untouched(self) -> None:
        """The caller's nested objects are never changed; only the logger's copies are redacted."""
        payload = keyed_shapes(CANARY)
        with MetricLogger(stream=io.StringIO()) as logger:
            logger.emit("x", payload)
        assert payload["nested"]["Password"] == CANARY
        assert payload["config"].wandb_api_key == CANARY
        assert payload["tracker"].api_key == CANARY
        assert payload["headers"][1] == ("api_key", CANARY)
