"""WandbHook against the real W&B SDK in offline mode; every test reads the run's transaction log back.

No network, no API key: ``WANDB_MODE=offline`` and every W&B directory under a temporary one. Each
``wandb.init`` starts a run in W&B's service process (about a second), so the runs are few and the
main one is shared by the module.
"""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import torch
import wandb

from speedtronic.distributed import RankInfo
from speedtronic.integrations import WandbHook
from speedtronic.profiling import MetricLogger
from tests.wandb_files import WandbOfflineRun, read_wandb_run

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


CONFIG = {"lr": 0.1, "model": {"hidden": 8}, "hooks": [{"type": "wandb"}]}


def events_of(run: WandbOfflineRun) -> list[str]:
    """Each row's event, read from its metric names (``<event>/<key>``; the event part escaped)."""
    return [
        unquote({key.split("/", 1)[0] for key in row if "/" in key and not key.startswith("_")}.pop())
        for row in run.history
    ]


@pytest.fixture(scope="module")
def logged(wandb_dir: Path) -> Logged:
    """A training run's events through a MetricLogger (every_steps=2) into one W&B run, then closed."""
    hook = make_hook(wandb_dir)
    with MetricLogger(stream=io.StringIO(), every_steps=2) as logger:
        logger.hooks.append(hook)
        logger.emit("train_start", {"start_step": 0, "target_step": 4, "config": CONFIG})
        logger.emit("train_step", {"step": 1, "loss": torch.tensor(1.0)})
        logger.emit("train_step", {"step": 2, "loss": torch.tensor(0.5), "lr": 0.1})
        logger.emit("eval", {"step": 2, "loss": 0.75, "val/loss": 0.8})
        logger.emit("eval/val", {"step": 2, "loss": 0.7})
        logger.emit("outer_step", {"outer_step": 1, "deltas_included": 3})
        logger.emit("train_step", {"step": 4, "loss": torch.tensor(0.25), "lr": 0.1})
        logger.emit(
            "train_step",
            {"step": 6, "loss": torch.tensor(float("nan")), "grad_norm": float("inf"), "lr": float("-inf")},
        )
        logger.emit("checkpoint", {"step": 6, "path": "ckpt/step_6.pt"})
        logger.emit("odd_keys", {"_step": 99, "_runtime": 1, 1: "one", "nested": {"a": 1}})
        logger.emit("note", {"text": LONG_TEXT})
        logger.emit("train_end", {"step": 6, "final_loss": 0.25})
    return hook, read_wandb_run(run_dir(hook.run))


class TestLoggedRun:
    def test_every_delivered_event_is_one_row_in_order(self, logged: Logged) -> None:
        """Nothing is dropped: one row per delivered event (cadence applied), W&B's _step 0, 1, 2...;
        the one-off train_start and train_end are in the run's summary, not rows."""
        _, run = logged
        events = events_of(run)
        assert events == [
            "train_step",
            "eval",
            "eval/val",
            "outer_step",
            "train_step",
            "train_step",
            "checkpoint",
            "odd_keys",
            "note",
        ]
        assert [row["_step"] for row in run.history] == list(range(len(events)))

    def test_metrics_are_named_event_slash_key(self, logged: Logged) -> None:
        """train_step's loss and eval's loss are two metrics; an event's '/' can't make a third collide."""
        _, run = logged
        losses = [(row["step"], row["train_step/loss"]) for row in run.history if "train_step/loss" in row]
        assert losses[:2] == [(2, 0.5), (4, 0.25)]
        [evaluation] = [row for row in run.history if "eval/loss" in row]
        assert (evaluation["eval/loss"], evaluation["eval/val/loss"]) == (0.75, 0.8)
        [sub] = [row for row in run.history if "eval%2Fval/loss" in row]
        assert (sub["eval%2Fval/loss"], "eval/val/loss" in sub) == (0.7, False)
        assert run.summary["train_end/final_loss"] == 0.25
        assert run.history[-1]["note/text"] == LONG_TEXT
        assert not any("/elapsed_s" in key for row in run.history for key in row)  # unless asked
        assert "event" not in {key for row in run.history for key in row}

    def test_the_summary_holds_each_metrics_own_last_value(self, logged: Logged) -> None:
        """The eval loss logged after a train step doesn't replace the train loss in the summary."""
        _, run = logged
        assert run.summary["eval/loss"] == 0.75
        assert math.isnan(run.summary["train_step/loss"])
        assert run.summary["train_step/lr"] == -math.inf
        assert run.summary["eval%2Fval/loss"] == 0.7

    def test_non_finite_values_reach_w_and_b_as_such(self, logged: Logged) -> None:
        """NaN and infinities are logged as floats: W&B records NaN, Infinity, -Infinity."""
        _, run = logged
        [row] = [row for row in run.history if row.get("step") == 6 and "train_step/loss" in row]
        assert math.isnan(row["train_step/loss"])
        assert (row["train_step/grad_norm"], row["train_step/lr"]) == (math.inf, -math.inf)

    def test_charts_plot_against_one_step_axis(self, logged: Logged) -> None:
        """step is every metric's x-axis and in every row; a row without a step sits at the last step."""
        _, run = logged
        metrics = dict(run.step_metrics)
        assert metrics.pop("step") == ""
        assert set(metrics.values()) == {"step"}  # every metric by name, no "*"
        assert set(metrics) == {key for row in run.history for key in row if "/" in key}
        assert [row["step"] for row in run.history] == [2, 2, 2, 2, 4, 6, 6, 6, 6]
        [outer] = [row for row in run.history if "outer_step/outer_step" in row]
        assert (outer["outer_step/outer_step"], outer["outer_step/deltas_included"]) == (1, 3)
        assert not any("train_step/step" in row for row in run.history)  # the axis, not a metric

    def test_the_runs_config_is_train_starts_config(self, logged: Logged) -> None:
        """train_start's config becomes run.config, its other values the run's summary; no history
        column (a one-point chart) and no config in the summary."""
        _, run = logged
        assert {key: run.config[key] for key in CONFIG} == CONFIG
        assert run.summary["train_start/target_step"] == 4
        assert not any(key.startswith("train_start/") for row in run.history for key in row)
        assert not any(key.startswith("train_start/config") for key in run.summary)

    def test_w_and_bs_own_keys_are_untouched(self, logged: Logged) -> None:
        """A payload _step is odd_keys/_step (not payload_step); W&B's _step still counts rows."""
        _, run = logged
        [row] = [row for row in run.history if "odd_keys/_step" in row]
        assert (row["odd_keys/_step"], row["odd_keys/_runtime"], row["_step"]) == (99, 1, 7)
        assert (row["odd_keys/1"], row["odd_keys/nested/a"]) == ("one", 1)
        assert not any(key.startswith("payload") for key in row)

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
    def test_each_hook_with_create_new_has_its_own_run_and_its_exit_code(self, wandb_dir: Path) -> None:
        """Two hooks at once with reinit="create_new" never share a run; cut-short training exits 1;
        close(exit_code=) wins."""
        crashed = make_hook(wandb_dir, reinit="create_new")
        explicit = make_hook(wandb_dir, reinit="create_new")
        crashed.on_event("train_start", {"target_step": 100})
        crashed.on_event("train_step", {"step": 1, "loss": 2.0})
        explicit.on_event("train_start", {"target_step": 100})
        explicit.on_event("train_end", {"step": 100, "final_loss": 0.5})
        crashed.close()
        explicit.close(exit_code=3)

        assert run_dir(crashed.run) != run_dir(explicit.run)
        first, second = read_wandb_run(run_dir(crashed.run)), read_wandb_run(run_dir(explicit.run))
        assert events_of(first) == ["train_step"]
        assert (second.history, second.summary["train_end/final_loss"]) == ([], 0.5)
        assert (first.exit_code, second.exit_code) == (1, 3)

    def test_a_train_end_that_failed_exits_1(self, wandb_dir: Path) -> None:
        """train_end status=failed (a dead peer) or interrupted finishes the run as failed; completed as 0."""
        codes = {}
        for status in ("failed", "interrupted", "completed"):
            hook = make_hook(wandb_dir)
            hook.on_event("train_start", {"target_step": 100})
            hook.on_event("train_end", {"step": 4, "status": status})
            hook.close()
            codes[status] = read_wandb_run(run_dir(hook.run)).exit_code
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
        assert [(row.get("train_step/loss"), row.get("mine")) for row in recorded.history] == [
            (0.5, None),
            (None, 1),
        ]
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
        result = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, timeout=120, env=os.environ.copy()
        )
        assert result.returncode == 0, result.stderr.decode()
        assert "HookFailureWarning" not in result.stderr.decode()  # finished cleanly, before W&B's teardown

        recorded = read_wandb_run(Path(record.read_text()).parent)
        assert events_of(recorded) == ["train_step"]
        assert recorded.exit_code == 1


class TestBesideOtherWandbUsers:
    def test_the_hook_joins_the_active_run_and_leaves_it_to_its_owner(self, wandb_dir: Path) -> None:
        """A plain wandb.init() first (Lightning's WandbLogger makes one): the hook logs into that run,
        doesn't finish it, and doesn't re-point the owner's x-axis."""
        owner = wandb.init(project=PROJECT, dir=str(wandb_dir), mode="offline")
        owner.define_metric("trainer/global_step")
        owner.define_metric("*", step_metric="trainer/global_step")
        hook = make_hook(wandb_dir)
        assert (hook.run is owner, hook.joined) == (True, True)
        with MetricLogger(stream=io.StringIO(), hooks=[hook]) as logger:
            logger.emit("train_step", {"step": 3, "loss": 0.5})
        owner.log({"trainer/global_step": 7, "val_acc": 0.9})  # the run is still open
        assert wandb.run is owner
        owner.finish()

        recorded = read_wandb_run(run_dir(owner))
        assert [(row.get("train_step/loss"), row.get("val_acc")) for row in recorded.history] == [
            (0.5, None),
            (None, 0.9),
        ]
        assert recorded.step_metrics["*"] == "trainer/global_step"  # the owner's, untouched
        assert recorded.step_metrics["train_step/loss"] == "step"  # ours, by name

    def test_a_later_wandb_init_joins_the_hooks_run(self, wandb_dir: Path) -> None:
        """The hook first: its run is wandb.run, so Hugging Face's WandbCallback (wandb.init(), then
        wandb.config.update) works and shares it; the tool's "*" x-axis leaves ours alone."""
        hook = make_hook(wandb_dir)
        assert (wandb.run is hook.run, hook.joined) == (True, False)
        # what report_to="wandb" calls when wandb.run is set (dir= and mode=: W&B set up earlier in this
        # process keeps the settings it read then, and would write beside the tests or go online)
        other = wandb.init(project=PROJECT, dir=str(wandb_dir), mode="offline")
        wandb.config.update({"learning_rate": 0.01}, allow_val_change=True)
        other.define_metric("train/global_step")
        other.define_metric("*", step_metric="train/global_step", step_sync=True)
        other.log({"train/global_step": 2, "train/loss": 0.7})
        hook.on_event("train_step", {"step": 2, "loss": 0.6})
        hook.close()

        recorded = read_wandb_run(run_dir(hook.run))
        assert other is hook.run
        assert recorded.config["learning_rate"] == 0.01
        assert recorded.step_metrics["train_step/loss"] == "step"
        assert [row.get("train_step/loss") for row in recorded.history] == [None, 0.6]
        assert recorded.exit_code == 0


class TestSameXAsTensorboard:
    def test_every_point_lands_at_the_same_x_in_both_tools(self, wandb_dir: Path, tmp_path: Path) -> None:
        """Step-less events (outer_step), a float step 5.0, a 0-d tensor step and a nested metrics dict:
        each W&B point (metric, step) is a TensorBoard point (tag, step), and back."""
        from speedtronic.integrations import TensorboardHook
        from tests.helpers import tensorboard_scalars

        wandb_hook, tensorboard_hook = make_hook(wandb_dir), TensorboardHook(tmp_path / "tb")
        with MetricLogger(stream=io.StringIO(), hooks=[wandb_hook, tensorboard_hook]) as logger:
            logger.emit("outer_step", {"outer_step": 0, "deltas_included": 1})
            for step in (1, 2, 3, 4):
                logger.emit("train_step", {"step": step, "loss": 1.0 / step})
            logger.emit("outer_step", {"outer_step": 1, "deltas_included": 3})
            logger.emit("outer_step", {"outer_step": 2, "deltas_included": 2})
            logger.emit("eval", {"step": 5.0, "loss": 0.5, "metrics": {"f1": 0.25, "per": {"a": 1}}})
            logger.emit("eval", {"step": torch.tensor(6), "loss": 0.4})
        recorded = read_wandb_run(run_dir(wandb_hook.run))

        in_wandb = {
            (key, row["step"], round(value, 5))
            for row in recorded.history
            for key, value in row.items()
            if "/" in key and not key.endswith("elapsed_s")
        }
        in_tensorboard = {
            (tag, step, round(value, 5))
            for tag, points in tensorboard_scalars(tmp_path / "tb").items()
            if not tag.endswith("elapsed_s")
            for step, value in points
        }
        assert in_wandb == in_tensorboard
        assert ("outer_step/outer_step", 4, 1.0) in in_wandb  # at the training step it happened at
        assert ("outer_step/outer_step", 0, 0.0) in in_wandb  # before any step: 0
        assert ("eval/metrics/f1", 5, 0.25) in in_wandb
        assert ("eval/metrics/per/a", 5, 1.0) in in_wandb
        assert ("eval/loss", 6, 0.4) in in_wandb


class TestUnderTheCLI:
    def test_speedtronic_train_records_the_runs_config(self, wandb_dir: Path, tmp_path: Path) -> None:
        """`speedtronic train` with {type: wandb}: the run's config is the resolved config, train_step
        metrics under train_step/, one row per delivered event."""
        run, own_dir = tmp_path / "run", tmp_path / "wandb"
        own_dir.mkdir()
        (tmp_path / "config.yaml").write_text(
            "train: {steps: 4, checkpoint_every: 0, batch_size: 8, device: cpu, lr: 0.002}\n"
            f"logging: {{every_steps: 2, hooks: [{{type: wandb, project: {PROJECT}, mode: offline, "
            f"dir: {str(own_dir)!r}}}]}}\n"
        )
        done = subprocess.run(
            [sys.executable, "-m", "speedtronic", "train", "--config", "config.yaml", "--run-dir", str(run)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        assert done.returncode == 0, done.stderr
        [offline] = (own_dir / "wandb").glob("offline-run-*")
        recorded = read_wandb_run(offline)
        assert recorded.config["train"]["lr"] == 0.002
        assert recorded.config["run_dir"] == str(run)
        assert recorded.config["logging"]["every_steps"] == 2
        steps = [(row["step"], row["train_step/lr"]) for row in recorded.history if "train_step/loss" in row]
        assert [step for step, _ in steps] == [2, 4]
        one_offs = ("train_start/", "hyperparams/")  # in the summary: no single-point charts
        assert not any(key.startswith(one_offs) for row in recorded.history for key in row)
        assert recorded.exit_code == 0


@pytest.fixture(scope="module")
def alerted(wandb_dir: Path) -> WandbOfflineRun:
    """Two alerts (a warning, an error) on rank 1 of a job, through a MetricLogger into an offline run."""
    hook = make_hook(wandb_dir)
    rank = RankInfo(rank=1, world_size=2)
    with MetricLogger(stream=io.StringIO(), hooks=[hook], rank=rank, lead_rank=None) as logger:
        logger.emit("train_step", {"step": 7, "loss": 9.5})
        spike = {"rule": "spike", "severity": "warning", "key": "loss", "step": 7, "value": 9.5}
        logger.emit("alert", {**spike, "threshold": 4.25, "message": "loss 9.5 above 4.25; password=hunter2"})
        nan = {"rule": "non_finite", "severity": "error", "key": "loss", "step": 8, "value": float("nan")}
        logger.emit("alert", {**nan, "threshold": None, "message": "loss is NaN at step 8"})
        assert dict(logger.hook_errors) == {}
    return read_wandb_run(run_dir(hook.run))


class TestAlerts:
    def test_an_alert_is_w_and_bs_own_alert_kept_offline(self, alerted: WandbOfflineRun) -> None:
        """run.alert(title, text, level), redacted, naming the rank: in the offline log, for wandb sync."""
        assert [(a["title"], a["text"], a["level"]) for a in alerted.alerts] == [
            ("spike on loss", "loss 9.5 above 4.25; password=[REDACTED] (rank 1)", "WARN"),
            ("non_finite on loss", "loss is NaN at step 8 (rank 1)", "ERROR"),
        ]

    def test_an_alert_is_also_a_row_at_its_step(self, alerted: WandbOfflineRun) -> None:
        """Its numbers are charted like any event's: alert/value, alert/threshold at the alert's step."""
        rows = [row for row in alerted.history if "alert/value" in row]
        assert (rows[0]["step"], rows[0]["alert/value"], rows[0]["alert/threshold"]) == (7, 9.5, 4.25)
