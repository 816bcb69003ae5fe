"""Checkpoints as artifacts, opt-in: ``WandbHook(log_checkpoints=True)`` read back from the offline run's
transaction log, ``MlflowHook(log_checkpoints=True)`` from a sqlite store with its artifacts in tmp_path."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from speedtronic.profiling import MetricLogger

CONFIG = {"lr": 0.01, "model": {"hidden": 8}}


def emit_run(logger: MetricLogger, checkpoints: list[Path]) -> None:
    """A run whose checkpoints are real files (``step_<n>.pt``)."""
    logger.emit("train_start", {"start_step": 0, "target_step": 8, "config": CONFIG})
    for step, path in zip((4, 8), checkpoints, strict=True):
        path.write_bytes(f"weights at step {step}".encode())
        logger.emit("train_step", {"step": step, "loss": 1 / step})
        logger.emit("checkpoint", {"step": step, "path": str(path)})
    logger.emit("train_end", {"step": 8, "steps_run": 8, "duration_s": 1.0, "final_loss": 0.125})


@pytest.fixture
def checkpoints(tmp_path: Path) -> list[Path]:
    (tmp_path / "checkpoints").mkdir()
    return [tmp_path / "checkpoints" / f"step_{step:08d}.pt" for step in (4, 8)]


class UploadThreads:
    """A hook placed after the tracker's: notes the threads alive whose name says they upload."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self.seen |= {t.name for t in threading.enumerate() if "uploads" in t.name}


class TestWandb:
    @pytest.fixture
    def wandb_dir(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
        pytest.importorskip("wandb")
        monkeypatch.setenv("WANDB_MODE", "offline")
        monkeypatch.setenv("WANDB_SILENT", "true")
        for name in ("DIR", "CACHE_DIR", "CONFIG_DIR", "DATA_DIR"):
            (tmp_path / f"w-{name.lower()}").mkdir()
            monkeypatch.setenv(f"WANDB_{name}", str(tmp_path / f"w-{name.lower()}"))
        return tmp_path / "w-dir"

    def test_each_checkpoint_is_a_version_of_the_runs_model_artifact(
        self, wandb_dir: Path, checkpoints: list[Path]
    ) -> None:
        """Two checkpoints: two versions of checkpoints-<run id>, each the file and the run's config."""
        from speedtronic.integrations import WandbHook
        from tests.wandb_files import read_wandb_run

        hook = WandbHook("speedtronic-tests", dir=str(wandb_dir), reinit="create_new", log_checkpoints=True)
        threads = UploadThreads()
        with MetricLogger(stream=io.StringIO(), hooks=[hook, threads]) as logger:
            emit_run(logger, checkpoints)
            assert dict(logger.hook_errors) == {}
        assert threads.seen == {"speedtronic-WandbHook-uploads"}  # the uploads' own thread
        (offline,) = (wandb_dir / "wandb").glob("offline-run-*")
        artifacts = read_wandb_run(offline).artifacts
        assert [(a["name"], a["type"], sorted(a["aliases"]), a["metadata"]) for a in artifacts] == [
            (f"checkpoints-{hook.run.id}", "model", ["latest", "step_4"], {"step": 4}),
            (f"checkpoints-{hook.run.id}", "model", ["latest", "step_8"], {"step": 8}),
        ]
        for artifact, checkpoint in zip(artifacts, checkpoints, strict=True):
            assert sorted(artifact["files"]) == ["config.json", checkpoint.name]
            assert Path(artifact["files"][checkpoint.name]).read_bytes() == checkpoint.read_bytes()
            assert json.loads(Path(artifact["files"]["config.json"]).read_text()) == CONFIG


class StuckRun:
    """A W&B run (injected with ``run=``) whose artifact upload never returns, as on a network that
    does not answer; it journals what the hook calls. ``release`` lets the stuck upload end."""

    def __init__(self) -> None:
        self.id, self.config, self.summary = "stuck", {}, {}
        self.journal: list[str] = []
        self.release = threading.Event()

    def define_metric(self, name: str, step_metric: str | None = None) -> None:
        pass

    def log(self, data: dict[str, Any]) -> None:
        pass

    def log_artifact(self, artifact: Any, aliases: list[str] | None = None) -> None:
        self.journal.append(f"upload {aliases}")
        self.release.wait()

    def finish(self, exit_code: int | None = None) -> None:
        self.journal.append(f"finish {exit_code}")


class TestUploadTimeout:
    def test_close_gives_up_uploads_stuck_past_the_bound_and_finishes_the_run(
        self, checkpoints: list[Path]
    ) -> None:
        """An upload that never returns: close() returns once upload_timeout_s is spent, the queued
        upload is never started, the failure is counted, the run is finished all the same."""
        pytest.importorskip("wandb")
        from speedtronic.integrations import WandbHook

        run = StuckRun()
        hook = WandbHook(run=run, finish=True, log_checkpoints=True, upload_timeout_s=0.2)
        logger = MetricLogger(stream=io.StringIO(), hooks=[hook])
        try:
            emit_run(logger, checkpoints)
            deadline = time.monotonic() + 60  # only bounds a failure
            while not run.journal:  # the step 4 upload is under way (stuck) before close() starts
                assert time.monotonic() < deadline, "the step 4 upload never started"
                time.sleep(0.01)
            closing = threading.Thread(target=logger.close, daemon=True)
            with pytest.warns(UserWarning, match=r"not done within upload_timeout_s=0.2 s"):
                closing.start()
                closing.join(120)  # a guard: a close that waits for ever fails the test, not the suite
            assert not closing.is_alive(), "close() waited for a stuck upload"
        finally:
            run.release.set()
        assert run.journal == ["upload ['step_4']", "finish None"]  # the step 8 upload: given up
        assert dict(logger.hook_errors) == {"WandbHook": 1}

    @pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), "10", True])
    def test_the_bound_must_be_a_positive_number(self, bad: Any) -> None:
        """upload_timeout_s that is not a positive finite number: ValueError naming it, for both hooks."""
        pytest.importorskip("wandb")
        from speedtronic.integrations import WandbHook

        with pytest.raises(ValueError, match=r"WandbHook: upload_timeout_s must be a positive number"):
            WandbHook(run=StuckRun(), log_checkpoints=True, upload_timeout_s=bad)


class TestMlflow:
    @pytest.fixture
    def store(self, tmp_path: Path) -> tuple[Any, str]:
        """A sqlite store whose experiment keeps its artifacts under tmp_path."""
        mlflow = pytest.importorskip("mlflow")
        client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
        client.create_experiment("artifacts", artifact_location=(tmp_path / "artifacts").as_uri())
        return client, f"sqlite:///{tmp_path / 'mlflow.db'}"

    def test_each_checkpoint_and_the_config_are_run_artifacts(
        self, store: tuple[Any, str], checkpoints: list[Path], tmp_path: Path
    ) -> None:
        """checkpoints/step_<n>/ holds the checkpoint file and config.json, read back from the store."""
        from speedtronic.integrations import MlflowHook

        client, uri = store
        hook = MlflowHook("artifacts", tracking_uri=uri, log_checkpoints=True)
        with MetricLogger(stream=io.StringIO(), hooks=[hook]) as logger:
            emit_run(logger, checkpoints)
            assert dict(logger.hook_errors) == {}
        for step, checkpoint in zip((4, 8), checkpoints, strict=True):
            where = f"checkpoints/step_{step}"
            listed = sorted(f.path for f in client.list_artifacts(hook.run_id, where))
            assert listed == [f"{where}/config.json", f"{where}/{checkpoint.name}"]
            folder = Path(client.download_artifacts(hook.run_id, where, str(tmp_path / f"d{step}")))
            assert (folder / checkpoint.name).read_bytes() == checkpoint.read_bytes()
            assert json.loads((folder / "config.json").read_text()) == CONFIG

    def test_a_failed_upload_is_a_hook_failure_and_training_goes_on(
        self, store: tuple[Any, str], tmp_path: Path
    ) -> None:
        """A checkpoint file gone before its upload: counted as MlflowHook's failure, later events logged."""
        from speedtronic.integrations import MlflowHook

        client, uri = store
        hook = MlflowHook("artifacts", tracking_uri=uri, log_checkpoints=True)
        jsonl = tmp_path / "metrics.jsonl"
        with (
            pytest.warns(UserWarning, match="a checkpoint upload failed"),
            MetricLogger(stream=io.StringIO(), json_file=jsonl, hooks=[hook]) as logger,
        ):
            logger.emit("checkpoint", {"step": 4, "path": str(tmp_path / "gone.pt")})
            logger.emit("train_step", {"step": 5, "loss": 0.5})
        assert dict(logger.hook_errors) == {"MlflowHook": 1}
        assert [point.step for point in client.get_metric_history(hook.run_id, "train_step/loss")] == [5]
        assert client.get_run(hook.run_id).info.status == "FINISHED"


class TestMlflowSystemMetrics:
    def test_log_system_metrics_runs_mlflows_monitor_until_close(self, tmp_path: Path) -> None:
        """log_system_metrics=True: MLflow's SystemMetricsMonitor thread runs while the hook is open."""
        mlflow = pytest.importorskip("mlflow")
        pytest.importorskip("psutil")
        from speedtronic.integrations import MlflowHook

        def monitors() -> list[threading.Thread]:
            return [t for t in threading.enumerate() if t.name == "SystemMetricsMonitor"]

        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        before = monitors()
        hook = MlflowHook(tracking_uri=uri, log_system_metrics=True)
        (running,) = [t for t in monitors() if t not in before]
        hook.close()
        running.join(60)  # finish() has asked it to stop; 60 s only if it is stuck
        assert not running.is_alive()
        assert mlflow.MlflowClient(uri).get_run(hook.run_id).info.status == "FINISHED"
