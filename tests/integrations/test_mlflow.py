"""MlflowHook against a real local MLflow tracking store (SQLite), read back with ``MlflowClient``.

No server and no network: every store is a ``sqlite:///`` database under a temporary directory.
Creating one runs MLflow's migrations (seconds), so the module shares one store.
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

import mlflow
import pytest
import torch
from mlflow import MlflowClient

from speedtronic.errors import HookFailureWarning
from speedtronic.integrations import MlflowHook
from speedtronic.integrations.mlflow import mlflow_name
from speedtronic.processors.enrich import timestamp_ns
from speedtronic.profiling import MetricLogger
from speedtronic.runtime import build_logger
from tests.helpers import read_jsonl

CONFIG = {"lr": 0.1, "model": {"hidden": 8, "name": "mlp"}, "hooks": [{"type": "mlflow"}]}
DOUBLE_MAX = 1.7976931348623157e308  # how MLflow's SQL stores keep an infinity


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local SQLite tracking store, also MLflow's default for the module (for joined active runs)."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        yield uri


@pytest.fixture(scope="module")
def client(store: str) -> MlflowClient:
    return MlflowClient(store)


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    """A metric's (step, value) points, in the order they were logged."""
    points = sorted(client.get_metric_history(run_id, key), key=lambda m: (m.timestamp, m.step))
    return [(point.step, point.value) for point in points]


def same(points: list[tuple[int, float]], expected: list[tuple[int, float]]) -> bool:
    """Equal point lists, NaN equal to NaN."""
    return len(points) == len(expected) and all(
        step == want_step and (value == want or (math.isnan(value) and math.isnan(want)))
        for (step, value), (want_step, want) in zip(points, expected, strict=True)
    )


Logged = tuple[MlflowHook, Path]


@pytest.fixture(scope="module")
def logged(store: str, tmp_path_factory: pytest.TempPathFactory) -> Logged:
    """A training run through a MetricLogger (every_steps=2) into one run the hook created, then closed."""
    jsonl = tmp_path_factory.mktemp("run") / "metrics.jsonl"
    hook = MlflowHook("speedtronic-tests", tracking_uri=store, run_name="main", tags={"team": "ml", "try": 3})
    with MetricLogger(stream=io.StringIO(), json_file=jsonl, every_steps=2, hooks=[hook]) as logger:
        logger.emit("train_start", {"start_step": 0, "target_step": 6, "config": CONFIG})
        logger.emit("train_step", {"step": 1, "loss": torch.tensor(1.0)})
        logger.emit("train_step", {"step": 2, "loss": torch.tensor(0.5), "lr": 0.1})
        logger.emit("eval", {"step": 2, "loss": 0.75, "val/loss": 0.8, "split": "val"})
        logger.emit("eval/val", {"step": 2, "loss": 0.7})
        logger.emit("outer_step", {"outer_step": 1, "deltas_included": 3})
        logger.emit("train_step", {"step": 4, "loss": torch.tensor(0.25), "lr": 0.1})
        logger.emit(
            "train_step",
            {"step": 6, "loss": torch.tensor(float("nan")), "grad_norm": float("inf"), "lr": float("-inf")},
        )
        logger.emit("checkpoint", {"step": 6, "path": "ckpt/step_6.pt", "saved": True, "shape": [2, 3]})
        logger.emit("odd_keys", {"acc@1": 0.9, 7: 2.0})
        logger.emit("train_end", {"step": 6, "final_loss": 0.25})
        assert dict(logger.hook_errors) == {}
    return hook, jsonl


class TestLoggedRun:
    def test_metrics_are_named_event_slash_key_at_their_step(
        self, logged: Logged, client: MlflowClient
    ) -> None:
        """train_step's loss at each delivered step (cadence applied); eval's loss is a metric of its own."""
        hook, _ = logged
        assert history(client, hook.run_id, "train_step/loss")[:2] == [(2, 0.5), (4, 0.25)]
        assert history(client, hook.run_id, "eval/loss") == [(2, 0.75)]
        assert history(client, hook.run_id, "eval/val/loss") == [(2, 0.8)]
        assert history(client, hook.run_id, "train_end/final_loss") == [(6, 0.25)]

    def test_an_event_without_a_step_is_logged_at_the_last_step(
        self, logged: Logged, client: MlflowClient
    ) -> None:
        """outer_step carries no step: its numbers sit at the last train step seen, 2."""
        hook, _ = logged
        assert history(client, hook.run_id, "outer_step/outer_step") == [(2, 1.0)]
        assert history(client, hook.run_id, "outer_step/deltas_included") == [(2, 3.0)]
        assert history(client, hook.run_id, "train_start/target_step") == [(0, 6.0)]  # 0 before the first

    def test_names_mlflow_refuses_are_written_with_underscores(
        self, logged: Logged, client: MlflowClient
    ) -> None:
        """Event eval/val is eval%2Fval in W&B and TensorBoard, eval_2Fval here; acc@1 is acc_1; 7 is '7'."""
        hook, _ = logged
        metrics = client.get_run(hook.run_id).data.metrics
        assert metrics["eval_2Fval/loss"] == 0.7
        assert (metrics["odd_keys/acc_1"], metrics["odd_keys/7"]) == (0.9, 2.0)
        assert mlflow_name("eval%2Fval/top-1 acc.x:y") == "eval_2Fval/top-1 acc.x_y"

    def test_nan_is_kept_and_infinities_are_the_largest_doubles(
        self, logged: Logged, client: MlflowClient
    ) -> None:
        """A NaN loss is logged as NaN (not dropped, not 0); MLflow's SQL store caps infinities."""
        hook, _ = logged
        assert same(history(client, hook.run_id, "train_step/loss"), [(2, 0.5), (4, 0.25), (6, math.nan)])
        assert history(client, hook.run_id, "train_step/grad_norm") == [(6, DOUBLE_MAX)]
        assert history(client, hook.run_id, "train_step/lr")[-1] == (6, -DOUBLE_MAX)

    def test_only_numbers_become_metrics(self, logged: Logged, client: MlflowClient) -> None:
        """Text, bools, lists, the step itself and elapsed_s (unless asked) are not metrics (the JSONL
        record has them)."""
        hook, _ = logged
        names = set(client.get_run(hook.run_id).data.metrics)
        assert not {name for name in names if name.startswith("checkpoint/")}
        assert not any(name.endswith("/elapsed_s") for name in names)
        assert "eval/split" not in names
        assert not any(name.endswith("/step") or "config" in name for name in names)

    def test_each_point_has_its_records_timestamp(self, logged: Logged, client: MlflowClient) -> None:
        """A metric's timestamp is the JSONL record's instant, in milliseconds."""
        hook, jsonl = logged
        [record] = [r for r in read_jsonl(jsonl) if r["event"] == "eval" and r["step"] == 2]
        [point] = client.get_metric_history(hook.run_id, "eval/loss")
        assert point.timestamp == timestamp_ns(record["timestamp"]) // 1_000_000

    def test_the_runs_params_are_train_starts_config_flattened(
        self, logged: Logged, client: MlflowClient
    ) -> None:
        """Nested keys joined with '.', values as their str(): what a reader of the config expects."""
        hook, _ = logged
        assert client.get_run(hook.run_id).data.params == {
            "lr": "0.1", "model.hidden": "8", "model.name": "mlp", "hooks": "[{'type': 'mlflow'}]",
        }  # fmt: skip

    def test_the_run_has_its_name_tags_and_experiment(self, logged: Logged, client: MlflowClient) -> None:
        """run_name, tags (as text) and the experiment, created because it was missing."""
        hook, _ = logged
        run = client.get_run(hook.run_id)
        assert (run.info.run_name, run.data.tags["team"], run.data.tags["try"]) == ("main", "ml", "3")
        experiment = client.get_experiment_by_name("speedtronic-tests")
        assert experiment is not None
        assert run.info.experiment_id == experiment.experiment_id

    def test_closing_the_logger_ended_the_run_it_created(self, logged: Logged, client: MlflowClient) -> None:
        """A finished training run is FINISHED; on_event after close raises; close is idempotent."""
        hook, _ = logged
        assert client.get_run(hook.run_id).info.status == "FINISHED"
        hook.close()
        with pytest.raises(RuntimeError, match="after close"):
            hook.on_event("train_step", {"step": 7, "loss": 0.1})
        assert history(client, hook.run_id, "train_step/loss")[-1][0] == 6


class TestWhichRun:
    def test_a_run_resumes_by_id_into_the_same_run(self, store: str, client: MlflowClient) -> None:
        """A preempted run (FAILED: train_start without train_end) resumed with run_id= logs on and ends
        FINISHED; the same config is no conflict."""
        first = MlflowHook(tracking_uri=store)
        first.on_event("train_start", {"target_step": 4, "config": {"lr": 0.1}})
        for step in (1, 2):
            first.on_event("train_step", {"step": step, "loss": 1.0 / step})
        first.close()
        assert client.get_run(first.run_id).info.status == "FAILED"

        resumed = MlflowHook(tracking_uri=store, run_id=first.run_id)
        assert client.get_run(first.run_id).info.status == "RUNNING"
        resumed.on_event("train_start", {"start_step": 2, "target_step": 4, "config": {"lr": 0.1}})
        for step in (3, 4):
            resumed.on_event("train_step", {"step": step, "loss": 1.0 / step})
        resumed.on_event("train_end", {"step": 4, "status": "completed"})
        resumed.close()

        assert resumed.run_id == first.run_id
        run = client.get_run(first.run_id)
        assert (run.info.status, run.data.params) == ("FINISHED", {"lr": "0.1"})
        assert history(client, first.run_id, "train_step/loss") == [(1, 1.0), (2, 0.5), (3, 1 / 3), (4, 0.25)]

    def test_a_changed_param_keeps_the_runs_value_and_tags_the_new_one(
        self, store: str, client: MlflowClient
    ) -> None:
        """MLflow params can't change: the run keeps its first value, the new one is the tag
        changed.<param>, with no hook failure; a second change updates the tag."""
        first = MlflowHook(tracking_uri=store)
        first.on_event("train_start", {"config": {"lr": 0.1}})
        first.close()
        resumed = MlflowHook(tracking_uri=store, run_id=first.run_id)
        with MetricLogger(stream=io.StringIO(), hooks=[resumed], strict_hooks=True) as logger:
            logger.emit("train_start", {"target_step": 9, "config": {"lr": 0.2, "seed": 1}})
            logger.emit("train_step", {"step": 1, "loss": 0.5})
        run = client.get_run(first.run_id)
        assert run.data.params == {"lr": "0.1", "seed": "1"}
        assert run.data.tags["changed.lr"] == "0.2"
        assert "changed.seed" not in run.data.tags
        assert (run.data.metrics["train_start/target_step"], run.data.metrics["train_step/loss"]) == (9, 0.5)
        again = MlflowHook(tracking_uri=store, run_id=first.run_id)
        again.on_event("hyperparams", {"config": {"lr": 0.1, "seed": 1}})  # back to the first value
        again.close()
        run = client.get_run(first.run_id)
        assert (run.data.params["lr"], run.data.tags["changed.lr"]) == ("0.1", "0.1")

    def test_an_active_run_is_joined_and_left_to_its_owner(self, store: str, client: MlflowClient) -> None:
        """Inside mlflow.start_run(), the hook logs into that run and close() doesn't end it."""
        with mlflow.start_run() as active:
            hook = MlflowHook()
            hook.on_event("train_start", {"config": {"lr": 0.3}})
            hook.on_event("train_step", {"step": 1, "loss": 0.5})
            hook.close()
            assert hook.run_id == active.info.run_id
            assert client.get_run(hook.run_id).info.status == "RUNNING"
            mlflow.log_metric("mine", 1.0)
        run = client.get_run(active.info.run_id)
        assert (run.info.status, run.data.params) == ("FINISHED", {"lr": "0.3"})
        assert (run.data.metrics["train_step/loss"], run.data.metrics["mine"]) == (0.5, 1.0)

    def test_params_another_writer_queued_are_written_before_the_hooks(
        self, client: MlflowClient, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Inside the user's run, params queued with ``synchronous=False`` (Hugging Face's
        ``report_to="mlflow"`` logs its own so) are in the run before the hook logs its params: two
        writers inserting one param at once made MLflow's store fail the queued batch whole."""
        monkeypatch.setenv("MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS", "60")  # queued batches wait
        mlflow.flush_async_logging()  # the queue's next thread reads the setting
        with mlflow.start_run() as active:
            mlflow.log_params({"learning_rate": "0.05", "hub_token": "<HUB_TOKEN>"}, synchronous=False)
            hook = MlflowHook()
            hook.on_event("train_start", {"config": {"learning_rate": 0.05, "seed": 1}})
            params = client.get_run(active.info.run_id).data.params
            hook.close()
        assert params == {"learning_rate": "0.05", "hub_token": "<HUB_TOKEN>", "seed": "1"}

    @pytest.mark.parametrize(
        ("events", "close_status", "expected"),
        [
            ([("train_start", {}), ("train_end", {"status": "interrupted"})], None, "KILLED"),
            ([("train_start", {}), ("train_end", {"status": "failed"})], None, "FAILED"),
            ([("train_step", {"step": 1})], None, "FINISHED"),
            ([("train_start", {})], "KILLED", "KILLED"),
        ],
    )
    def test_the_run_ends_with_the_trainings_outcome(
        self,
        store: str,
        client: MlflowClient,
        events: list[tuple[str, Any]],
        close_status: str | None,
        expected: str,
    ) -> None:
        """train_end interrupted is KILLED, failed is FAILED; close(status=) wins."""
        hook = MlflowHook(tracking_uri=store)
        for event, payload in events:
            hook.on_event(event, payload)
        hook.close(close_status)
        assert client.get_run(hook.run_id).info.status == expected

    def test_finish_false_leaves_a_created_run_running(self, store: str, client: MlflowClient) -> None:
        """finish=False: the hook never ends the run, even one it created."""
        hook = MlflowHook(tracking_uri=store, finish=False)
        hook.close()
        assert client.get_run(hook.run_id).info.status == "RUNNING"
        client.set_terminated(hook.run_id)

    def test_a_hook_never_closed_ends_its_run_at_exit_as_failed(
        self, store: str, client: MlflowClient, tmp_path: Path
    ) -> None:
        """A hook used without a logger and never closed: its run is ended at exit, FAILED (training
        started and never ended), not left RUNNING."""
        record = tmp_path / "run_id.txt"
        script = textwrap.dedent(
            f"""
            import pathlib
            from speedtronic.integrations import MlflowHook
            hook = MlflowHook(tracking_uri={store!r})
            pathlib.Path({str(record)!r}).write_text(hook.run_id)
            hook.on_event("train_start", {{"target_step": 10}})
            hook.on_event("train_step", {{"step": 1, "loss": 1.5}})
            """
        )
        result = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=300,
            env=os.environ.copy(),
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr
        run = client.get_run(record.read_text())
        assert (run.info.status, run.data.metrics["train_step/loss"]) == ("FAILED", 1.5)


class TestBadInput:
    def test_an_unknown_run_id_is_a_value_error_naming_it(self, store: str) -> None:
        """A typo in run_id fails at construction, naming the argument."""
        with pytest.raises(ValueError, match=r"MlflowHook\(run_id='0123abc'\): can't read the run"):
            MlflowHook(tracking_uri=store, run_id="0123abc")

    def test_a_new_runs_options_with_an_existing_run_are_refused(self, store: str) -> None:
        """experiment= or run_name= with run_id= (or an active run) would be ignored: refused instead."""
        with pytest.raises(ValueError, match="experiment=, run_name= and artifact_location= describe a run"):
            MlflowHook("x", tracking_uri=store, run_id="0123abc")
        with mlflow.start_run(), pytest.raises(ValueError, match="the active run"):
            MlflowHook(run_name="mine")

    def test_artifact_location_needs_an_experiment_that_can_have_it(self, store: str, tmp_path: Path) -> None:
        """artifact_location= without experiment= is refused (Default's location is fixed), and so is an
        existing experiment whose artifacts are elsewhere; the same location is accepted."""
        with pytest.raises(ValueError, match=r"artifact_location='.*'\): name the experiment"):
            MlflowHook(tracking_uri=store, artifact_location=tmp_path / "a")
        hook = MlflowHook("located", tracking_uri=store, artifact_location=tmp_path / "a")
        hook.close()
        assert (
            MlflowClient(store).get_run(hook.run_id).info.artifact_uri.startswith((tmp_path / "a").as_uri())
        )
        again = MlflowHook("located", tracking_uri=store, artifact_location=f"file://{tmp_path / 'a'}")
        again.close()
        with pytest.raises(ValueError, match=r"the experiment 'located' keeps its artifacts in"):
            MlflowHook("located", tracking_uri=store, artifact_location=tmp_path / "b")

    def test_close_refuses_an_unknown_status(self, store: str, client: MlflowClient) -> None:
        """close(status='DONE') names the statuses MLflow knows and leaves the run open."""
        hook = MlflowHook(tracking_uri=store)
        with pytest.raises(ValueError, match=r"status='DONE'.*FINISHED"):
            hook.close("DONE")
        hook.close()
        assert client.get_run(hook.run_id).info.status == "FINISHED"


class TestFailures:
    def test_a_run_deleted_mid_training_never_stops_training(
        self, store: str, client: MlflowClient, tmp_path: Path
    ) -> None:
        """MLflow refuses to log into a deleted run: the logger counts each refusal, the JSONL keeps
        every event."""
        hook = MlflowHook(tracking_uri=store)
        jsonl = tmp_path / "metrics.jsonl"
        with (
            pytest.warns(HookFailureWarning, match="MlflowHook"),
            MetricLogger(stream=io.StringIO(), json_file=jsonl, hooks=[hook]) as logger,
        ):
            logger.emit("train_step", {"step": 1, "loss": 0.5})
            client.delete_run(hook.run_id)
            logger.emit("train_step", {"step": 2, "loss": 0.4})
            logger.emit("train_step", {"step": 3, "loss": 0.3})
            assert dict(logger.hook_errors) == {"MlflowHook": 2}
        steps = [record["step"] for record in read_jsonl(jsonl) if record["event"] == "train_step"]
        assert steps == [1, 2, 3]


class TestUnderTheConfig:
    def test_type_mlflow_builds_the_hook_with_its_arguments(
        self, store: str, client: MlflowClient, tmp_path: Path
    ) -> None:
        """A config's {type: mlflow, ...} is an MlflowHook with those arguments."""
        spec = {"type": "mlflow", "tracking_uri": store, "run_name": "from-config"}
        logger = build_logger({"run_dir": str(tmp_path), "logging": {"every_steps": 1, "hooks": [spec]}})
        try:
            (hook,) = logger.hooks
            assert isinstance(hook, MlflowHook)
            logger.emit("train_step", {"step": 1, "loss": 0.5})
        finally:
            logger.close()
        run = client.get_run(hook.run_id)
        assert (run.info.run_name, run.data.metrics["train_step/loss"], run.info.status) == (
            "from-config", 0.5, "FINISHED",
        )  # fmt: skip


class TestAlerts:
    def test_an_alert_tags_the_run_and_is_kept_as_an_artifact(self, store: str, tmp_path: Path) -> None:
        """Tags speedtronic.alert.<rule> and .last: the message; the alert an artifact; numbers metrics."""
        MlflowClient(store).create_experiment("alerts", artifact_location=(tmp_path / "artifacts").as_uri())
        hook = MlflowHook("alerts", tracking_uri=store, run_name="alerts")
        with MetricLogger(stream=io.StringIO(), hooks=[hook]) as logger:
            logger.emit("train_step", {"step": 7, "loss": 9.5})
            spike = {"rule": "spike", "severity": "warning", "key": "loss", "step": 7, "value": 9.5}
            logger.emit(
                "alert", {**spike, "threshold": 4.25, "message": "loss 9.5 above 4.25", "window": 128}
            )
            nan = {"rule": "non_finite", "severity": "error", "key": "loss", "step": 8, "value": float("nan")}
            logger.emit("alert", {**nan, "threshold": None, "message": "loss is NaN; token=abc123"})
            assert dict(logger.hook_errors) == {}
        client = MlflowClient(store)
        tags = client.get_run(hook.run_id).data.tags
        assert tags["speedtronic.alert.spike"] == "loss 9.5 above 4.25"
        assert tags["speedtronic.alert.non_finite"] == "loss is NaN; token=[REDACTED]"
        assert tags["speedtronic.alert.last"] == "loss is NaN; token=[REDACTED]"
        assert same(history(client, hook.run_id, "alert/value"), [(7, 9.5), (8, math.nan)])
        assert history(client, hook.run_id, "alert/threshold") == [(7, 4.25)]
        paths = sorted(f.path for f in client.list_artifacts(hook.run_id, "alerts"))
        assert paths == ["alerts/step_7_spike.json", "alerts/step_8_non_finite.json"]
        artifacts = client.get_run(hook.run_id).info.artifact_uri
        saved = mlflow.artifacts.load_dict(f"{artifacts}/alerts/step_8_non_finite.json")
        assert {key: saved[key] for key in ("event", "rule", "severity", "value", "message")} == {
            "event": "alert", "rule": "non_finite", "severity": "error", "value": None,
            "message": "loss is NaN; token=[REDACTED]",
        }  # fmt: skip
        assert saved["_speedtronic"]["non_finite"]["nan"] == ["/value"]
        assert (tmp_path / "artifacts" / hook.run_id / "artifacts" / "alerts" / "step_7_spike.json").is_file()
