"""Each integration example runs as a user would run it (a subprocess), does what it says, and emits
only payloads the event catalog accepts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from speedtronic.processors.validate import payload_problems
from tests.helpers import parse_jsonl, read_jsonl
from tests.wandb_files import read_wandb_run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, **env},
    )
    assert result.returncode == 0, result.stderr
    for jsonl in tmp_path.rglob("*.jsonl"):
        assert_in_catalog(read_jsonl(jsonl))
    return result


def assert_in_catalog(records: list[dict[str, Any]]) -> None:
    """Every record's payload is what speedtronic.events says its event carries."""
    for record in records:
        assert payload_problems(record["event"], record) == [], record


def test_structlog_app_gets_speedtronic_events_in_its_json_stream(tmp_path: Path) -> None:
    """stdout is the app's JSON only: its own events and speedtronic's, all with the app's context."""
    result = run_example("structlog_app.py", tmp_path, "run")
    records = parse_jsonl(result.stdout)
    assert [(r["event"], r["level"]) for r in records] == [
        ("job_started", "info"),
        ("train_step", "info"),
        ("train_step", "info"),
        ("shape_warning", "warning"),
        ("job_finished", "info"),
    ]
    assert {r["job_id"] for r in records} == {"nightly-7"}
    assert_in_catalog(records)
    assert [r["step"] for r in records if r["event"] == "train_step"] == [2, 4]
    assert "train_step step=2" in (tmp_path / "run" / "train.log").read_text()


def test_tensorboard_example_writes_readable_scalars(tmp_path: Path) -> None:
    """The event file holds the curves the example's docstring lists, at the logged steps."""
    run_example("tensorboard_logging.py", tmp_path, "tb")
    accumulator = EventAccumulator(str(tmp_path / "tb"))
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])  # every number of the events a run has many of
    assert tags == {"eval/val_loss"} | {
        f"train_step/{name}"
        for name in ("loss", "lr", "samples", "tokens", "microbatches", "samples_per_s", "tokens_per_s")
    }
    assert {"train_start/values", "train_end/values"} <= set(accumulator.Tags()["tensors"])  # as text
    assert [p.step for p in accumulator.Scalars("train_step/loss")] == [10, 20, 30, 40, 50]
    assert [p.step for p in accumulator.Scalars("eval/val_loss")] == [25, 50]


def test_wandb_offline_example_finishes_its_run(tmp_path: Path) -> None:
    """Offline, no key: the run holds every delivered event, the outer steps too (train_start and
    train_end in its summary), and exit code 0."""
    dirs = {f"WANDB_{name}": str(tmp_path / name.lower()) for name in ("CACHE_DIR", "CONFIG_DIR", "DATA_DIR")}
    run_example("wandb_offline.py", tmp_path, "wb", WANDB_MODE="offline", WANDB_SILENT="true", **dirs)
    [run_dir] = (tmp_path / "wb" / "wandb").glob("offline-run-*")
    run = read_wandb_run(run_dir)
    assert [(next(key for key in row if "/" in key).split("/")[0], row["step"]) for row in run.history] == [
        *[("train_step", step) for step in (10, 20)],
        ("outer_step", 20),
        *[("train_step", step) for step in (30, 40, 50)],
        ("outer_step", 50),
    ]
    assert run.summary["train_start/target_step"] == 50  # train_end carries only its step, the x
    assert run.exit_code == 0
    assert len((tmp_path / "wb" / "metrics.jsonl").read_text().splitlines()) == len(run.history) + 2
