"""Paths are data, not secrets: a path under a path key (``path``, ``run_dir``, ``log_file``...) or a
``PurePath`` is kept whole, while a URL's password and a query string's secret in it are still hidden.

Both sides through the public door: ``Redact`` directly, a real ``speedtronic train`` run into a
directory named like a key, whose checkpoint event records the real path, a checkpoint upload
(``MlflowHook(log_checkpoints=True)``) from such a directory, and URLs with a token.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from speedtronic.processors import Redact
from speedtronic.processors.redact import REDACTED, redact_path
from speedtronic.profiling import MetricLogger
from speedtronic.testing import RecordingHook
from tests.helpers import read_jsonl

RUN = "sk-learn-run1"
"""A run directory's name that looks like an OpenAI key (``sk-``, 8 characters or more, a digit)."""


def redact(event_dict: dict[str, Any]) -> dict[str, Any]:
    return Redact()(None, "info", {"event": "x", **event_dict})


class TestPathsAreKept:
    @pytest.mark.parametrize(
        "key", ["path", "run_dir", "checkpoint_path", "log_file", "outputDir", "json_file", "folder"]
    )
    def test_a_path_key_keeps_its_path_whole(self, key: str) -> None:
        """A local path under a key naming a path is kept as written, its key-like parts included."""
        path = f"/runs/{RUN}/checkpoints/step_00000010.pt"
        assert redact({key: path})[key] == path

    def test_nested_and_purepath_values_are_kept(self) -> None:
        """A path key in a nested mapping (a config's run_dir), and a PurePath under any key."""
        out = redact({"config": {"run_dir": RUN}, "where": pathlib.PurePosixPath("/runs") / RUN})
        assert out["config"] == {"run_dir": RUN}
        assert out["where"] == pathlib.PurePosixPath("/runs") / RUN

    def test_the_same_text_under_another_key_is_still_redacted(self) -> None:
        """The rule is the key's: the same text as a free value looks like a key and is hidden."""
        assert redact({"note": RUN})["note"] == REDACTED

    def test_a_secret_key_naming_a_file_is_still_secret(self) -> None:
        """secret_file, password_file, api_key_path: the key rule wins over the path rule."""
        out = redact({"secret_file": "/x", "password_file": "/y", "api_key_path": "/z"})
        assert set(out.values()) == {"x", REDACTED}


class TestSecretsInPathsAreHidden:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            (f"https://hub.example/{RUN}/ckpt?token=abc123", f"https://hub.example/{REDACTED}/ckpt?token={REDACTED}"),
            ("s3://user:hunter2@bucket/ckpt.pt", f"s3://user:{REDACTED}@bucket/ckpt.pt"),
            (f"/runs/{RUN}/db?password=hunter2&mode=ro", f"/runs/{RUN}/db?password={REDACTED}&mode=ro"),
            (f"/runs/{RUN}/x?sig=sk-abc123456789", f"/runs/{RUN}/x?sig={REDACTED}"),
        ],
    )  # fmt: skip
    def test_a_url_or_query_string_under_a_path_key(self, value: str, expected: str) -> None:
        """A URL is text (its password, its token, its key-like parts hidden); a local path's query
        string is text too."""
        assert redact({"path": value})["path"] == expected
        assert redact_path(value) == expected

    def test_a_plain_path_is_returned_itself(self) -> None:
        """redact_path: nothing to hide, the same object."""
        path = f"/runs/{RUN}/checkpoints"
        assert redact_path(path) is path


class TestThroughTheLibrary:
    def test_speedtronic_train_records_the_real_checkpoint_path(self, tmp_path: Path) -> None:
        """A real `speedtronic train` into a run directory named like a key: the checkpoint event
        (JSONL and text log) records the path of the file written, which exists; nothing of the run
        directory's name is redacted anywhere in the run's files."""
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        done = subprocess.run(
            [sys.executable, "-m", "speedtronic", "train", "--run-dir", RUN, "--steps", "20"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        records = read_jsonl(tmp_path / RUN / "metrics.jsonl")
        (checkpoint,) = [r for r in records if r["event"] == "checkpoint"]
        assert checkpoint["path"] == f"{RUN}/checkpoints/step_00000020.pt"
        assert (tmp_path / checkpoint["path"]).is_file()
        assert f"path={RUN}/checkpoints/step_00000020.pt" in done.stdout
        (hyperparams,) = [r for r in records if r["event"] == "hyperparams"]
        assert hyperparams["config"]["run_dir"] == RUN
        for path in (tmp_path / RUN).rglob("*"):
            if path.is_file() and path.suffix != ".pt":
                assert REDACTED.encode() not in path.read_bytes(), path
        assert REDACTED not in done.stdout + done.stderr

    def test_a_checkpoint_upload_from_such_a_directory(self, tmp_path: Path) -> None:
        """MlflowHook(log_checkpoints=True) uploads the checkpoint of the path the event records."""
        mlflow = pytest.importorskip("mlflow")
        from speedtronic.integrations import MlflowHook

        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        client = mlflow.MlflowClient(uri)
        client.create_experiment("paths", artifact_location=(tmp_path / "artifacts").as_uri())
        checkpoint = tmp_path / RUN / "checkpoints" / "step_00000004.pt"
        checkpoint.parent.mkdir(parents=True)
        checkpoint.write_bytes(b"weights")
        hook, recording = MlflowHook("paths", tracking_uri=uri, log_checkpoints=True), RecordingHook()
        with MetricLogger(stream=io.StringIO(), hooks=[hook, recording]) as logger:
            logger.emit("train_start", {"start_step": 0, "target_step": 4, "config": {"run_dir": RUN}})
            logger.emit("checkpoint", {"step": 4, "path": str(checkpoint)})
            assert dict(logger.hook_errors) == {}
        assert recording.calls[1][1]["path"] == str(checkpoint)
        listed = [f.path for f in client.list_artifacts(hook.run_id, "checkpoints/step_4")]
        assert f"checkpoints/step_4/{checkpoint.name}" in listed
        assert json.loads(json.dumps(recording.calls[0][1]["config"])) == {"run_dir": RUN}
