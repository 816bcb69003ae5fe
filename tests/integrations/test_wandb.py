"""WandbHook against the real W&B SDK in offline mode; every test reads the run's transaction log back.

No network, no API key: ``WANDB_MODE=offline`` and every W&B directory under a temporary one. Each
``wandb.init`` starts a run in W&B's service process (about a second), so the runs are few and the
main one is shared by the module.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import wandb

from speedtronic.integrations import WandbHook
from speedtronic.profiling import MetricLogger
from speedtronic.testing import WandbOfflineRun, read_wandb_run

PROJECT = "speedtronic-tests"
Logged = tuple[WandbHook, WandbOfflineRun]
LONG_TEXT = "0123456789" * 7_000  # a record that spans three of the transaction log's 32 KiB blocks


@pytest.fixture(scope="module")
def wandb_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An offline, silent W&B whose every directory is temporary."""
    root = tmp_path_factory.mktemp("wandb")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "offline")
        patch.setenv("WANDB_SILENT", "true")
        for name in ("DIR", "CACHE_DIR", "CONFIG_DIR", "DATA_DIR"):
            (root / name.lower()).mkdir()
            patch.setenv(f"WANDB_{name}", str(root / name.lower()))
        yield root / "dir"


def run_dir(run: Any) -> Path:
    """The offline-run-* directory of a run (``run.dir`` is its files/ folder)."""
    return Path(run.dir).parent


def make_hook(wandb_dir: Path, **kwargs: Any) -> WandbHook:
    return WandbHook(PROJECT, dir=str(wandb_dir), mode="offline", **kwargs)


@pytest.fixture(scope="module")
def logged(wandb_dir: Path) -> Logged:
    """A training run's events through a MetricLogger (every_steps=2) into one W&B run, then closed."""
    hook = make_hook(wandb_dir)
    with MetricLogger(stream=io.StringIO(), every_steps=2) as logger:
        logger.hooks.append(hook)
        logger.emit("train_start", {"start_step": 0, "target_step": 4})
        logger.emit("train_step", {"step": 1, "loss": torch.tensor(1.0)})
        logger.emit("train_step", {"step": 2, "loss": torch.tensor(0.5), "lr": 0.1})
        logger.emit("outer_step", {"outer_step": 1, "deltas_included": 3})
        logger.emit("train_step", {"step": 4, "loss": torch.tensor(0.25), "lr": 0.1})
        logger.emit("checkpoint", {"step": 4, "path": "ckpt/step_4.pt"})
        logger.emit("odd_keys", {"_step": 99, 1: "one", "nested": {"a": 1}})
        logger.emit("note", {"text": LONG_TEXT})
        logger.emit("train_end", {"step": 4, "final_loss": 0.25})
    return hook, read_wandb_run(run_dir(hook.run))


class TestLoggedRun:
    def test_every_delivered_event_is_one_row_in_order(self, logged: Logged) -> None:
        """Nothing is dropped: one row per delivered event (cadence applied), W&B's _step 0, 1, 2..."""
        _, run = logged
        events = [row["event"] for row in run.history]
        assert events == ["train_start", "train_step", "outer_step", "train_step", "checkpoint", "odd_keys",
                          "note", "train_end"]
        assert [row["_step"] for row in run.history] == list(range(len(events)))

    def test_values_and_the_training_step_reach_the_run(self, logged: Logged) -> None:
        """Tensors arrive as numbers; step is logged; elapsed_s is in every row."""
        _, run = logged
        steps = [(row["step"], row["loss"], row["lr"]) for row in run.history if row["event"] == "train_step"]
        assert steps == [(2, 0.5, 0.1), (4, 0.25, 0.1)]
        assert all(isinstance(row["elapsed_s"], float) for row in run.history)
        assert run.history[-1]["final_loss"] == 0.25
        assert run.history[-2]["text"] == LONG_TEXT

    def test_charts_plot_against_step(self, logged: Logged) -> None:
        """step is the x-axis of every metric; an outer_step between train steps sits at the last step."""
        _, run = logged
        assert run.step_metrics == {"step": "", "*": "step"}
        [outer] = [row for row in run.history if row["event"] == "outer_step"]
        assert (outer["outer_step"], outer["deltas_included"], outer["step"]) == (1, 3, 2)

    def test_keys_w_and_b_would_lose_are_renamed(self, logged: Logged) -> None:
        """A payload _step becomes payload_step (W&B's own _step untouched); non-string keys strings."""
        _, run = logged
        [row] = [row for row in run.history if row["event"] == "odd_keys"]
        assert (row["payload_step"], row["_step"], row["1"], row["nested/a"]) == (99, 5, "one", 1)

    def test_close_finished_the_run_with_exit_code_0(self, logged: Logged) -> None:
        """MetricLogger.close() finished the run; a finished training run exits with 0."""
        _, run = logged
        assert run.exit_code == 0

    def test_after_close_the_hook_refuses_events_and_close_is_idempotent(self, logged: Logged) -> None:
        """A second close() does nothing; on_event raises and nothing more reaches the run."""
        hook, run = logged
        hook.close()
        with pytest.raises(RuntimeError, match="after close"):
            hook.on_event("train_step", {"step": 6, "loss": 0.1})
        assert read_wandb_run(run_dir(hook.run)) == run


class TestLifecycle:
    def test_each_hook_has_its_own_run_and_its_exit_code(self, wandb_dir: Path) -> None:
        """Two hooks at once never share a run; cut-short training exits 1; close(exit_code=) wins."""
        crashed, explicit = make_hook(wandb_dir), make_hook(wandb_dir)
        crashed.on_event("train_start", {"target_step": 100})
        crashed.on_event("train_step", {"step": 1, "loss": 2.0})
        explicit.on_event("train_start", {"target_step": 100})
        explicit.on_event("train_end", {"step": 100})
        crashed.close()
        explicit.close(exit_code=3)

        assert run_dir(crashed.run) != run_dir(explicit.run)
        first, second = read_wandb_run(run_dir(crashed.run)), read_wandb_run(run_dir(explicit.run))
        assert [row["event"] for row in first.history] == ["train_start", "train_step"]
        assert [row["event"] for row in second.history] == ["train_start", "train_end"]
        assert (first.exit_code, second.exit_code) == (1, 3)

    def test_a_train_end_that_failed_exits_1(self, wandb_dir: Path) -> None:
        """train_end status=failed (a dead peer) or interrupted finishes the run as failed; completed as 0."""
        hooks = {status: make_hook(wandb_dir) for status in ("failed", "interrupted", "completed")}
        for status, hook in hooks.items():
            hook.on_event("train_start", {"target_step": 100})
            hook.on_event("train_end", {"step": 4, "status": status})
            hook.close()
        codes = {status: read_wandb_run(run_dir(hook.run)).exit_code for status, hook in hooks.items()}
        assert codes == {"failed": 1, "interrupted": 1, "completed": 0}

    def test_a_run_passed_in_is_not_finished_by_the_hook(self, wandb_dir: Path) -> None:
        """WandbHook(run=...) logs into the user's run and leaves finishing it to them."""
        run = wandb.init(project=PROJECT, dir=str(wandb_dir), mode="offline", reinit="create_new")
        hook = WandbHook(run=run)
        hook.on_event("train_step", {"step": 1, "loss": 0.5})
        hook.close()
        run.log({"mine": 1})
        run.finish()

        recorded = read_wandb_run(run_dir(run))
        assert [(row.get("event"), row.get("mine")) for row in recorded.history] == [("train_step", None),
                                                                                    (None, 1)]
        assert recorded.exit_code == 0

    def test_run_and_project_together_are_refused(self) -> None:
        """Either reuse a run or create one: both is a ValueError before anything starts."""
        with pytest.raises(ValueError, match="either run= or project="):
            WandbHook("p", run=object())  # type: ignore[arg-type]  # refused before it is used

    def test_a_run_never_closed_is_finished_at_exit_as_failed(self, wandb_dir: Path, tmp_path: Path) -> None:
        """A script that forgets close() mid-training: the run is finished at exit with code 1."""
        record = tmp_path / "run_dir.txt"
        script = textwrap.dedent(
            f"""
            import io, pathlib
            from speedtronic.integrations import WandbHook
            from speedtronic.profiling import MetricLogger
            hook = WandbHook({PROJECT!r}, dir={str(wandb_dir)!r}, mode="offline")
            pathlib.Path({str(record)!r}).write_text(hook.run.dir)
            logger = MetricLogger(stream=io.StringIO(), hooks=[hook])
            logger.emit("train_start", {{"target_step": 10}})
            logger.emit("train_step", {{"step": 1, "loss": 1.5}})
            """
        )
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120,
                                env=os.environ.copy())
        assert result.returncode == 0, result.stderr.decode()
        assert "HookFailureWarning" not in result.stderr.decode()  # finished cleanly, before W&B's teardown

        recorded = read_wandb_run(Path(record.read_text()).parent)
        assert [row["event"] for row in recorded.history] == ["train_start", "train_step"]
        assert recorded.exit_code == 1
