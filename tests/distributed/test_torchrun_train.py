"""The trainer under ``torchrun --standalone --nproc_per_node=2`` with gloo on the CPU: real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from speedtronic.processors.validate import payload_problems
from tests.helpers import read_jsonl

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]


def torchrun(tmp_path: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(tmp_path / "wandb-dir"),
        "WANDB_SILENT": "true",
    }
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env=env,
        check=False,
    )
    if check:
        assert result.returncode == 0, result.stderr[-4000:]
    return result


def write_config(tmp_path: Path, config: dict[str, Any]) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def by_rank(run_dir: Path) -> dict[int, list[dict[str, Any]]]:
    """Each rank's JSONL records, parsed strictly: a single broken line fails the test."""
    return {0: read_jsonl(run_dir / "metrics.jsonl"), 1: read_jsonl(run_dir / "metrics.rank1.jsonl")}


def named(records: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [record for record in records if record["event"] == event]


def test_speedtronic_train_under_torchrun(tmp_path: Path) -> None:
    """-m speedtronic train x2: per-rank JSONL, one console, hooks (one TensorBoard file, one W&B
    offline run) and checkpoints on rank 0 only, DDP-averaged gradients, per-rank data."""
    run_dir = tmp_path / "run"
    config = write_config(
        tmp_path,
        {
            "run_dir": str(run_dir),
            "train": {
                "steps": 6,
                "checkpoint_every": 3,
                "batch_size": 8,
                "grad_accum": 2,
                "device": "cpu",
                "warmup_steps": 2,
            },
            "logging": {
                "every_steps": 2,
                "validate": True,
                "hooks": [
                    {"type": "tensorboard"},
                    {"type": "wandb", "mode": "offline", "project": "speedtronic-test"},
                    {"type": "tests.distributed.hooks:OverlapHook", "path": str(tmp_path / "journal")},
                ],
            },
        },
    )
    result = torchrun(tmp_path, "-m", "speedtronic", "train", "--config", str(config))

    records = by_rank(run_dir)
    for rank, mine in records.items():
        assert {(r["rank"], r["world_size"]) for r in mine} == {(rank, 2)}
        (start,) = named(mine, "train_start")
        assert (start["world_size"], start["rank"]) == (2, rank)
        assert [r["step"] for r in named(mine, "train_step")] == [2, 4, 6]
        for record in mine:
            assert payload_problems(record["event"], record) == [], record
    # one checkpoint writer
    assert [r["step"] for r in named(records[0], "checkpoint")] == [3, 6]
    assert named(records[1], "checkpoint") == []
    written = sorted(p.name for p in (run_dir / "checkpoints").iterdir())  # each rank's own state
    assert written == [
        "step_00000003.pt",
        "step_00000003.rank1.pt",
        "step_00000006.pt",
        "step_00000006.rank1.pt",
    ]
    # DDP: both ranks step with the same averaged gradients, computed from their own batches
    steps = [named(mine, "train_step") for mine in records.values()]
    assert [r["grad_norm"] for r in steps[0]] == [r["grad_norm"] for r in steps[1]]
    assert [r["loss"] for r in steps[0]] != [r["loss"] for r in steps[1]]
    # one console, one summary, hooks on rank 0 only
    text = [line for line in result.stdout.splitlines() if " | INFO | " in line]
    debug = ("ooo_backprop", "hyperparams", "system")  # DEBUG: in the JSONL, not in the INFO text log
    assert len(text) == len([r for r in records[0] if r["event"] not in debug])
    assert all(" rank=0 " in line for line in text)
    assert result.stderr.count("speedtronic train: steps 0 -> 6") == 1
    journal = read_jsonl(tmp_path / "journal.0")
    assert [e["event"] for e in journal[:-1]] == [r["event"] for r in records[0]]
    assert journal[-1] == {"event": "close", "overlaps": 0}
    assert not (tmp_path / "journal.1").exists()
    assert len(list(run_dir.rglob("events.out.tfevents.*"))) == 1
    assert len([p for p in tmp_path.rglob("offline-run-*") if p.is_dir()]) == 1


WORKER = textwrap.dedent(
    """
    import json, os, sys, warnings
    import torch
    from speedtronic.errors import EventPayloadWarning
    from speedtronic.training.outer import checksum
    from speedtronic.runtime import build_runtime

    warnings.simplefilter("error", EventPayloadWarning)  # a payload off the catalog fails the run
    trainer, info = build_runtime(sys.argv[1])
    loop = trainer.outer
    reduce, calls = loop.reduce, []

    def flaky(tensor):  # the third exchange fails on every rank
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected exchange failure")
        reduce(tensor)

    loop.reduce = flaky
    # one step before each boundary, wait for the exchange: every boundary uploads, deterministically
    trainer.after_optimizer_step.append(lambda t: loop.wait() if (t.step + 1) % loop.every == 0 else None)
    sums = open(os.path.join(sys.argv[2], f"model.{info.rank.rank}.jsonl"), "w")

    def model_checksum():
        return checksum(torch.cat([p.detach().reshape(-1) for p in trainer.module.parameters()]))

    def record(t):
        if t.step % loop.every == 0:
            sums.write(json.dumps({"step": t.step, "checksum": model_checksum()}) + "\\n")

    trainer.after_optimizer_step.append(record)
    try:
        trainer.fit()
        sums.write(json.dumps({"step": "final", "checksum": model_checksum()}) + "\\n")
    finally:
        loop.close()
        trainer.logger.close()
        sums.close()
        torch.distributed.destroy_process_group()
    """
)


def test_outer_loop_under_torchrun(tmp_path: Path) -> None:
    """outer_every 4 over 16 steps on 2 ranks, the third exchange failing: the models are identical
    after every outer boundary and equal to the synced parameters; the events interleave whole in
    each JSONL, validate, and reach a hook that is never called concurrently."""
    run_dir = tmp_path / "run"
    config = write_config(
        tmp_path,
        {
            "run_dir": str(run_dir),
            "train": {
                "steps": 16,
                "checkpoint_every": 0,
                "batch_size": 8,
                "device": "cpu",
                "warmup_steps": 2,
                "outer_every": 4,
            },
            "logging": {
                "every_steps": 1,
                "validate": True,
                "hooks": [
                    {"type": "tests.distributed.hooks:OverlapHook", "path": str(tmp_path / "journal")},
                ],
            },
        },
    )
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    result = torchrun(tmp_path, str(script), str(config), str(tmp_path))
    assert "Traceback" not in result.stderr, result.stderr[-4000:]

    records = by_rank(run_dir)
    models = {rank: read_jsonl(tmp_path / f"model.{rank}.jsonl") for rank in (0, 1)}
    assert models[0] == models[1]  # identical parameters on both ranks after each boundary, and at the end
    for rank, mine in records.items():
        for record in mine:
            assert payload_problems(record["event"], record) == [], record
        events = [r["event"] for r in mine]
        assert [r["step"] for r in named(mine, "train_step")] == list(range(1, 17))
        for step in named(mine, "train_step"):  # the outer loop's wait is timed apart from the step's parts
            assert step["sync_wait_s"] >= 0
            assert step["step_time_s"] >= step["data_wait_s"] + step["compute_s"] + step["sync_wait_s"]
        assert events[-1] == "train_end"
        outer = named(mine, "outer_step")
        assert [(r["outer_step"], r["step"], r["lag"], r["candidates"], r["included"]) for r in outer] == [
            (1, 4, 0, 2, 2),
            (2, 8, 1, 2, 2),
            (3, 16, 0, 2, 2),
        ]
        assert [(r["local_step"], r["base_outer_step"]) for r in named(mine, "delta_upload_queued")] == [
            (4, 0),
            (8, 0),
            (12, 1),
            (16, 2),
        ]
        assert [r["local_step"] for r in named(mine, "delta_uploaded")] == [4, 8, 16]
        (stale,) = named(mine, "delta_upload_stale")
        assert (stale["local_step"], stale["base_outer_step"], stale["baseline_generation"]) == (8, 0, 1)
        (failed,) = named(mine, "delta_upload_failed")
        assert (failed["local_step"], failed["error"]) == (12, "RuntimeError: injected exchange failure")
        assert named(mine, "delta_upload_skipped") == []
        # the model each boundary continues from is the one the queued event names: the initial
        # parameters, then the synced ones of the latest outer step (none came of the failed one)
        queued = [r["checksum"] for r in named(mine, "delta_upload_queued")]
        assert [m["checksum"] for m in models[rank][:-1]] == queued
        assert queued[1:] == [outer[0]["checksum"], outer[1]["checksum"], outer[1]["checksum"]]
        assert models[rank][-1]["checksum"] == outer[2]["checksum"]
    # the exchange thread's events sit between the training thread's in the same file
    first_outer = next(i for i, r in enumerate(records[0]) if r["event"] == "outer_step")
    assert any(r["event"] == "train_step" for r in records[0][first_outer:])
    # hooks: rank 0 only, every record, never two calls at once, from both threads' events
    journal = read_jsonl(tmp_path / "journal.0")
    assert [e["event"] for e in journal[:-1]] == [r["event"] for r in records[0]]
    assert journal[-1] == {"event": "close", "overlaps": 0}
    assert not (tmp_path / "journal.1").exists()


def test_an_interrupted_outer_loop_job_resumed_ends_as_the_uninterrupted_one(tmp_path: Path) -> None:
    """torchrun x2 on gloo with outer_every 4: killed after its step-4 checkpoint, then resumed with
    --resume: every rank's final loss equals the uninterrupted job's."""
    train = {
        "steps": 12,
        "checkpoint_every": 4,
        "batch_size": 4,
        "device": "cpu",
        "warmup_steps": 2,
        "outer_every": 4,
    }
    plain = {"model": {"hidden": 16}, "train": train, "logging": {"every_steps": 1, "hooks": []}}
    for name in "abc":
        (tmp_path / name).mkdir()
    whole = write_config(tmp_path / "a", {**plain, "run_dir": str(tmp_path / "whole")})
    torchrun(tmp_path, "-m", "speedtronic", "train", "--no-progress", "--config", str(whole))
    killer = {"type": "tests.training.recording:ExitAt", "event": "checkpoint", "step": 4}
    cut = write_config(
        tmp_path / "b",
        {
            **plain,
            "run_dir": str(tmp_path / "cut"),
            "logging": {"every_steps": 1, "hooks": [killer], "strict_hooks": True},
        },
    )
    crashed = torchrun(
        tmp_path, "-m", "speedtronic", "train", "--no-progress", "--config", str(cut), check=False
    )
    assert crashed.returncode != 0
    no_hooks = write_config(tmp_path / "c", {"logging": {"hooks": []}})
    torchrun(
        tmp_path,
        "-m",
        "speedtronic",
        "train",
        "--no-progress",
        "--config",
        str(no_hooks),
        "--run-dir",
        str(tmp_path / "cut"),
        "--resume",
    )
    for name in ("metrics.jsonl", "metrics.rank1.jsonl"):
        ends = [read_jsonl(tmp_path / run / name)[-1] for run in ("whole", "cut")]
        assert [end["event"] for end in ends] == ["train_end", "train_end"]
        assert ends[0]["final_loss"] == ends[1]["final_loss"], name


def test_an_alert_stops_every_rank_at_the_same_step(tmp_path: Path) -> None:
    """on_alert: stop under torchrun x2: rank 1's rules alert only in its own JSONL (no hooks there),
    yet both ranks agree, checkpoint and end with status stopped at the NaN's step; each exits 3."""
    run_dir = tmp_path / "run"
    config = write_config(
        tmp_path,
        {
            "run_dir": str(run_dir),
            "train": {
                "steps": 20,
                "lr": 1e30,
                "warmup_steps": 0,
                "max_grad_norm": None,
                "device": "cpu",
                "checkpoint_every": 0,
                "eval_every": 0,
            },
            "logging": {"every_steps": 1, "hooks": [], "validate": True},
            "on_alert": "stop",
        },
    )
    result = torchrun(
        tmp_path, "-m", "speedtronic", "train", "--no-progress", "--config", str(config), check=False
    )
    assert result.returncode != 0  # torchrun reports its workers' exit code 3 as a failure
    assert (
        "exitcode  : 3" in result.stderr or "exit code 3" in result.stderr or "exitcode: 3" in result.stderr
    )
    records = by_rank(run_dir)
    ends = {rank: named(mine, "train_end")[-1] for rank, mine in records.items()}
    assert {rank: (end["status"], end["step"]) for rank, end in ends.items()} == {
        0: ("stopped", 2),
        1: ("stopped", 2),
    }
    assert all(named(mine, "alert") for mine in records.values())
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "step_00000002.pt",
        "step_00000002.rank1.pt",
    ]
