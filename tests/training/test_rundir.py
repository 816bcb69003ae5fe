"""A run directory is one run: its config revisions, its lock, and a start that fails leaves no trace.

Driven as a user would, through `speedtronic train` in subprocesses (``tests.runtime.test_run_dirs``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.readback.conftest import assert_one_line_error
from tests.runtime.test_run_dirs import ROOT, records, train, write_config

DUMP = "tests.runtime.recording:DumpHook"


def tree(path: Path) -> dict[str, bytes | None]:
    """Every path under ``path`` with its bytes (``None`` for a directory)."""
    return {
        str(item.relative_to(path)): None if item.is_dir() else item.read_bytes()
        for item in sorted(path.rglob("*"))
    }


class TestConfigChanges:
    def test_a_changed_hook_config_leaks_no_secret(self, tmp_path: Path) -> None:
        """Resumed with other credentials in a hook: no secret in the records, the text log, a hook's
        view, stdout or stderr; the change is a structured record naming the key."""
        dump = tmp_path / "hook.txt"
        old = {"type": DUMP, "path": str(dump), "api_key": "s3cret-old", "password": "hunter2-old"}
        first = write_config(tmp_path / "a.yaml", logging={"hooks": [old]}, train={"steps": 4})
        assert train("--config", first, "--run-dir", "r", cwd=tmp_path).returncode == 0
        new = {**old, "api_key": "s3cret-new", "password": "hunter2-new"}
        second = write_config(tmp_path / "b.yaml", logging={"hooks": [new]}, train={"steps": 8})
        done = train("--config", second, "--run-dir", "r", "--resume", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        run_dir = tmp_path / "r"
        seen = {
            "stdout": done.stdout,
            "stderr": done.stderr,
            "hook": dump.read_text(),
            **{
                str(path): path.read_bytes().decode("utf-8", "replace")
                for path in run_dir.rglob("*")
                if path.is_file() and not path.name.startswith("config.")  # the user's own config
            },
        }
        for secret in ("s3cret-old", "hunter2-old", "s3cret-new", "hunter2-new"):
            for where, text in seen.items():
                assert secret not in text, (secret, where)
        (start,) = [r for r in records(run_dir) if r["event"] == "train_start" and r["start_step"] == 4]
        changes = {change["key"]: change for change in start["config_changes"]}
        assert set(changes) == {"train.steps", "logging.hooks"}
        assert (changes["train.steps"]["old"], changes["train.steps"]["new"]) == (4, 8)
        assert changes["logging.hooks"]["new"][0]["api_key"] == "[REDACTED]"
        assert changes["logging.hooks"]["new"][0]["path"] == str(dump)  # the rest stays readable
        assert "train.steps: 4 -> 8" in done.stderr

    def test_changes_are_fixed_keys_a_reader_can_infer(self, tmp_path: Path) -> None:
        """Every change is {key, old, new}: polars reads train_start.config_changes as a list of structs."""
        polars = pytest.importorskip("polars")
        config = write_config(tmp_path / "a.yaml", train={"steps": 4})
        assert train("--config", config, "--run-dir", "r", cwd=tmp_path).returncode == 0
        assert train("--run-dir", "r", "--resume", "--steps", "8", cwd=tmp_path).returncode == 0
        frame = polars.read_ndjson(tmp_path / "r" / "metrics.jsonl", infer_schema_length=None)
        starts = frame.filter(polars.col("event") == "train_start")
        changes = starts.get_column("config_changes").to_list()
        assert changes == [None, [{"key": "train.steps", "old": 4, "new": 8}]]
