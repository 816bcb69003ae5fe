"""A canary secret in every payload shape reaches no sink: text log, JSONL, hooks, the app's structlog
output, W&B's offline run files, ``hook_error`` records and warnings; exceptions whose message is clean
and whose cause, context or note holds a canary included (in a payload, and raised by a hook).

One real ``MetricLogger`` with a text file, a JSONL file and three hooks (``StructlogHook`` writing the
app's own log file, an offline ``WandbHook``, a recording hook) and a hook that fails with the secret
in its message, run in a child process (W&B offline, its files under the test's directory). Afterwards
every byte the run produced is scanned. The child's source never holds the canaries whole, so W&B
saving the program or its arguments can't make a false alarm; the same run with ``redact=False`` shows
the scan finds them when they are there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.conftest import child_env, read_records

pytest.importorskip("numpy")

CANARY = "sk-CANARY123"
"""Looks like an OpenAI key: hidden by the value rule under any key."""

PLAIN = "hunter2-CANARY"
"""Looks like nothing: hidden only by a secret key, a pair's name or a field's name."""

KEY_SPELLINGS = (
    "private-key",
    "privateKey",
    "accessKey",
    "access-key",
    "passphrase",
    "api_tokens",
    "github_token_2",
    "token_value",
    "token ",
    "db_pass",
    "pwd",
    "jwt",
    "ssh_key",
    "signing_key",
    "sessionid",
    "AUTH",
    "bearer",
    "PassWord",
)

CHILD = """
import collections, dataclasses, enum, json, os, sys, warnings
import numpy as np
import structlog
from speedtronic.integrations import StructlogHook, WandbHook
from speedtronic.profiling import MetricLogger

CANARY = "sk-" + "CANARY" + "123"   # never whole in this file: W&B may save the program
PLAIN = "hunter2-" + "CANARY"
OUT = sys.argv[1]
REDACT = sys.argv[2] == "redact"
KEY_SPELLINGS = {key_spellings!r}


@dataclasses.dataclass
class DB:
    host: str
    url: str = dataclasses.field(repr=False, default="")
    password: str = ""


Creds = collections.namedtuple("Creds", "user api_key")


class Field(str, enum.Enum):
    DB = "db_password"


class Headers(collections.UserList):
    pass


class Recorder:
    def __init__(self):
        self.seen = []

    def on_event(self, event, payload):
        self.seen.append(repr((event, payload)))


def failing(event, payload):
    raise RuntimeError(f"upload refused: Authorization: Bearer {{CANARY}} (key {{CANARY}})")


def chained(note):
    # a clean exception: the canaries in its cause (an args pair), its context and its note
    try:
        try:
            try:
                raise ValueError("api_key", PLAIN)
            except ValueError as cause:
                raise KeyError(f"refused {{CANARY}}") from cause
        except KeyError:
            error = RuntimeError("checkpoint upload failed")
            if note and hasattr(error, "add_note"):  # Python 3.11+
                error.add_note(f"while sending password={{PLAIN}}")
            raise error
    except RuntimeError as error:
        return error


def failing_chained(event, payload):
    raise chained(note=True)


payload = {{
    "db": DB("h", url=f"postgres://u:{{CANARY}}@h/db", password=PLAIN),
    "headers": [("Authorization", f"Bearer {{CANARY}}"), ("api_key", PLAIN)],
    "creds": Creds("me", PLAIN),
    "queue": collections.deque([{{"ssh_key": PLAIN}}, CANARY]),
    "user_list": Headers([("access-key", PLAIN), CANARY]),
    "items": {{"db_pass": PLAIN, "note": CANARY}}.items(),
    "objects": np.array([{{"signing_key": PLAIN}}, CANARY, 2], dtype=object),
    "auth_header": f"Bearer {{CANARY}}",
    "dsn": f"postgres://user:{{PLAIN}}@db.internal:5432/app",
    "note": f"using {{CANARY}} today",
    Field.DB: PLAIN,
    "argv": ["train.py", "--password", PLAIN, "--lr", "0.1"],
    "error": ValueError("api_key", PLAIN),
    "chained": chained(note=False),
    "noted": chained(note=True),
    "said": f"the api key: {{PLAIN}}",
    **{{key: PLAIN for key in KEY_SPELLINGS}},
    "loss": 0.5,
    "tokens_per_s": 1234.5,
    "num_tokens": 99,
}}

if not REDACT:  # unredacted, a UserList and a dict_items reach WandbHook as they are and W&B can't
    payload.pop("user_list")  # serialize them (a WandbHook failure, not a leak: reported)
    payload.pop("items")
    payload.pop("error")
    payload.pop("chained")  # W&B can't serialize an exception either: the scan of the chains is the
    payload.pop("noted")  # app log's (format_exc_info prints them) and the hook_error records'

app_file = open(os.path.join(OUT, "app.log"), "w", encoding="utf-8")
app_logger = structlog.wrap_logger(
    structlog.WriteLogger(app_file),
    processors=[
        structlog.processors.add_log_level,
        structlog.processors.format_exc_info,  # prints an exc_info's whole chain and notes
        structlog.processors.JSONRenderer(),
    ],
)
recorder = Recorder()
wandb_hook = WandbHook(project="canary", mode="offline", dir=os.path.join(OUT, "wandb_dir"))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    logger = MetricLogger(
        file=os.path.join(OUT, "run.log"),
        json_file=os.path.join(OUT, "metrics.jsonl"),
        hooks=[StructlogHook(app_logger), wandb_hook, recorder, failing, failing_chained],
        redact=REDACT,
    )
    logger.emit("train_start", dict(payload))
    logger.emit("train_step", {{"step": 1, **payload}})
    logger.emit("train_end", {{"step": 1, "final_loss": 0.5}})
    logger.emit("upload_failed", {{"error": chained(note=True)}}, level="error")
    logger.close()
app_file.close()
with open(os.path.join(OUT, "hooks.txt"), "w", encoding="utf-8") as out:
    out.write("\\n".join(recorder.seen))
with open(os.path.join(OUT, "warnings.txt"), "w", encoding="utf-8") as out:
    out.write("\\n".join(str(w.message) for w in caught))
print(json.dumps({{"hook_errors": dict(logger.hook_errors), "recorded": len(recorder.seen),
                  "warnings": len(caught)}}))
"""


def run_child(out: Path, mode: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The run above, its files in ``out`` (W&B's under ``out/wandb_dir``), from a directory that is no
    git checkout (W&B records the checkout's state)."""
    out.mkdir()
    (out / "wandb_dir").mkdir()
    script = out / "child.py"
    script.write_text(CHILD.format(key_spellings=KEY_SPELLINGS), encoding="utf-8")
    env = {
        **child_env(),
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(out / "wandb_dir"),
        "WANDB_SILENT": "true",
        "WANDB_CONSOLE": "off",
    }
    result = subprocess.run(
        [sys.executable, str(script), str(out), mode],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=out,
    )
    assert result.returncode == 0, result.stderr
    return result, json.loads(result.stdout.splitlines()[-1])


def files_holding(root: Path, *secrets: str) -> dict[str, list[str]]:
    """Every file under ``root`` (W&B's binary run log too, as bytes) that holds one of ``secrets``."""
    found: dict[str, list[str]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name != "child.py"):
        data = path.read_bytes()
        hits = [secret for secret in secrets if secret.encode() in data]
        if hits:
            found[str(path.relative_to(root))] = hits
    return found


@pytest.fixture(scope="module")
def wandb_available() -> None:
    pytest.importorskip("wandb")
    pytest.importorskip("speedtronic.integrations")


class TestCanaryEverySink:
    def test_no_sink_holds_the_canary(self, tmp_path: Path, wandb_available: None) -> None:
        """Text log, JSONL, hook payloads, the app's structlog file, every W&B file, hook_error
        records, warnings and the child's own output: no canary anywhere."""
        out = tmp_path / "run"
        result, report = run_child(out, "redact")
        assert files_holding(out, CANARY, PLAIN) == {}
        assert CANARY not in result.stdout + result.stderr
        assert PLAIN not in result.stdout + result.stderr

        # ... and each sink did receive the events (the scan is not of empty files)
        assert report["recorded"] == 4
        assert report["hook_errors"] == {"failing": 4, "failing_chained": 4}
        records = read_records(out / "metrics.jsonl")
        assert [r["event"] for r in records if r["event"].startswith("train")] == [
            "train_start",
            "train_step",
            "train_end",
        ]
        (step,) = [r for r in records if r["event"] == "train_step"]
        assert (step["loss"], step["tokens_per_s"], step["num_tokens"]) == (0.5, 1234.5, 99)
        assert step["db"] == {"host": "h", "password": "[REDACTED]"}  # url: repr=False, left out
        errors = [r for r in records if r["event"] == "hook_error" and r["hook"] == "failing"]
        assert "upload refused" in errors[0]["error"]
        assert "upload refused" in (out / "warnings.txt").read_text()
        app = [json.loads(line) for line in (out / "app.log").read_text().splitlines()]
        assert [line["event"] for line in app] == ["train_start", "train_step", "train_end", "upload_failed"]
        assert app[-1]["error"] == "RuntimeError: checkpoint upload failed"
        chained = [r for r in records if r["event"] == "hook_error" and r.get("hook") == "failing_chained"]
        assert "checkpoint upload failed" in chained[0]["error"]
        assert "During handling of the above exception" in chained[0]["traceback"]
        assert "train_step" in (out / "hooks.txt").read_text()
        wandb_run = self.wandb_run(out)
        assert [sorted({key.split("/")[0] for key in row if "/" in key}) for row in wandb_run.history] == [
            ["train_step"],  # train_start and train_end, one-off events, are in the run's summary
            ["upload_failed"],
        ]
        assert wandb_run.history[0]["train_step/loss"] == 0.5

    def test_without_redaction_the_scan_finds_them(self, tmp_path: Path, wandb_available: None) -> None:
        """redact=False: the same run writes both canaries to the files and to W&B (so the scan above
        can fail)."""
        out = tmp_path / "run"
        _, report = run_child(out, "plain")  # W&B can't serialize upload_failed's raw exception
        assert report["hook_errors"] == {"failing": 4, "failing_chained": 4, "WandbHook": 1}
        found = files_holding(out, CANARY, PLAIN)
        for name in ("run.log", "metrics.jsonl", "app.log", "hooks.txt", "warnings.txt"):
            assert CANARY in found.get(name, []), (name, found)
        app = (out / "app.log").read_text()  # the chain and note of upload_failed's error, printed whole
        if sys.version_info >= (3, 11):  # notes
            assert "while sending password=" + PLAIN in app
        assert "refused " + CANARY in app
        assert any(name.startswith("wandb_dir/") and PLAIN in hits for name, hits in found.items()), found

    @staticmethod
    def wandb_run(out: Path) -> Any:
        from tests.wandb_files import read_wandb_run

        (run_dir,) = (out / "wandb_dir").glob("wandb/offline-run-*")
        return read_wandb_run(run_dir)
