"""``speedtronic train --resume`` continues the run's W&B run (offline) and MLflow run (a sqlite store):
the ids are kept in the run directory, and a killed run resumed is one tracker run with every step once."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("wandb")
mlflow = pytest.importorskip("mlflow")

from tests.torch_run import train_cli  # noqa: E402  # after the skips above
from tests.wandb_files import read_wandb_run  # noqa: E402  # needs wandb, checked just above

ROOT = Path(__file__).resolve().parents[2]
STEPS = list(range(1, 9))


def train(*args: str | Path, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return train_cli(*args, cwd=cwd, env=env, timeout=300)


def offline_env(folder: Path) -> dict[str, str]:
    """An offline, silent W&B whose every directory is under ``folder``; one thread for torch."""
    out = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out |= {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    for name in ("DIR", "CACHE_DIR", "CONFIG_DIR", "DATA_DIR"):
        (folder / f"wandb-{name.lower()}").mkdir()
        out[f"WANDB_{name}"] = str(folder / f"wandb-{name.lower()}")
    return out


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return offline_env(tmp_path)


def config(path: Path, store: str, *extra_hooks: dict[str, Any]) -> Path:
    hooks = [
        {"type": "wandb", "project": "speedtronic-tests", "mode": "offline"},
        {"type": "mlflow", "tracking_uri": store, "experiment": "resumed", "run_name": "first"},
        *extra_hooks,
    ]
    path.write_text(
        yaml.safe_dump(
            {
                "model": {"hidden": 24},
                "train": {"steps": 8, "checkpoint_every": 4, "batch_size": 4, "device": "cpu"},
                "logging": {"every_steps": 1, "hooks": hooks, "system_interval_s": None},
            }
        )
    )
    return path


RESUMED_STEPS = list(range(1, 13))


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One run of 8 steps with W&B (offline) and MLflow hooks, strict_hooks, killed by SIGTERM right
    after checkpoint 4, then ``--resume --steps 12``: the folder it ran in (the run is ``r``, the
    MLflow store and its checkpoint artifacts inside it) and the resumed process. Shared by the tests
    below, which each read a part of it (both trainings are the costly part)."""
    tmp_path = tmp_path_factory.mktemp("resumed")
    out = offline_env(tmp_path)
    mlflow_hook = {
        "type": "mlflow",
        "tracking_uri": "sqlite:///{run_dir}/mlflow.db",
        "experiment": "resumed",
        "run_name": "first",
        "artifact_location": "{run_dir}/mlartifacts",
        "log_checkpoints": True,
    }

    def write(path: Path, *extra_hooks: dict[str, Any]) -> Path:
        hooks = [{"type": "wandb", "project": "speedtronic-tests", "mode": "offline"}, mlflow_hook]
        settings = {"steps": 8, "checkpoint_every": 4, "batch_size": 4, "device": "cpu"}
        logging = {
            "every_steps": 1,
            "hooks": [*hooks, *extra_hooks],
            "system_interval_s": None,
            "strict_hooks": True,
        }
        path.write_text(yaml.safe_dump({"model": {"hidden": 24}, "train": settings, "logging": logging}))
        return path

    killer = {"type": "tests.training.recording:SignalAt", "event": "checkpoint", "step": 4}
    first = train("--config", write(tmp_path / "a.yaml", killer), "--run-dir", "r", cwd=tmp_path, env=out)
    assert first.returncode == 143, first.stderr
    rest = write(tmp_path / "b.yaml")
    done = train("--config", rest, "--run-dir", "r", "--resume", "--steps", "12", cwd=tmp_path, env=out)
    assert done.returncode == 0, done.stderr
    return tmp_path, done


def test_a_killed_run_resumed_is_one_wandb_run_and_one_mlflow_run(
    resumed: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """SIGTERM right after checkpoint 4, then --resume: one W&B run id, one MLflow run, steps 1-12 once."""
    tmp_path, _ = resumed
    ids = json.loads((tmp_path / "r" / "trackers.json").read_text())
    assert list(ids) == ["wandb", "mlflow"]
    offline = sorted((tmp_path / "r" / "wandb").glob("offline-run-*"))
    assert [path.name.rsplit("-", 1)[1] for path in offline] == ids["wandb"] * 2  # W&B sync joins them
    runs = [read_wandb_run(path) for path in offline]
    logged = [row["step"] for run in runs for row in run.history if "train_step/loss" in row]
    assert logged == RESUMED_STEPS
    assert [run.exit_code for run in runs] == [1, 0]

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'r' / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "resumed"]
    (run,) = client.search_runs([experiment.experiment_id])
    assert [run.info.run_id] == ids["mlflow"]
    assert run.info.run_name == "first"
    assert run.info.status == "FINISHED"
    points = client.get_metric_history(run.info.run_id, "train_step/loss")
    assert sorted(point.step for point in points) == RESUMED_STEPS


def test_a_killed_run_resumed_shows_each_step_once_in_tensorboard(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """SIGTERM at step 6 (checkpoint 4), then --resume from 4: TensorBoard read back with
    EventAccumulator holds steps 1-8 once each, in order (steps 5 and 6 of the killed run purged)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def tb_config(path: Path, *extra_hooks: dict[str, Any]) -> Path:
        hooks = [{"type": "tensorboard", "log_dir": "{run_dir}/tensorboard"}, *extra_hooks]
        settings = {"steps": 8, "checkpoint_every": 4, "batch_size": 4, "device": "cpu"}
        logging = {"every_steps": 1, "hooks": hooks, "system_interval_s": None}
        path.write_text(yaml.safe_dump({"model": {"hidden": 24}, "train": settings, "logging": logging}))
        return path

    killer = {"type": "tests.training.recording:SignalAt", "event": "train_step", "step": 6}
    first = train("--config", tb_config(tmp_path / "a.yaml", killer), "--run-dir", "r", cwd=tmp_path, env=env)
    assert first.returncode == 143, first.stderr
    resumed = train(
        "--config", tb_config(tmp_path / "b.yaml"), "--run-dir", "r", "--resume", cwd=tmp_path, env=env
    )
    assert resumed.returncode == 0, resumed.stderr

    files = sorted((tmp_path / "r" / "tensorboard").glob("events.out.tfevents.*"))
    assert len(files) == 2  # one per process: the killed run's file keeps its steps 5 and 6
    events = EventAccumulator(str(tmp_path / "r" / "tensorboard"))
    events.Reload()
    assert [point.step for point in events.Scalars("train_step/loss")] == STEPS


def test_a_resume_that_extends_the_run_is_no_mlflow_hook_failure(
    resumed: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """--resume --steps 12 after a run of 8 killed at checkpoint 4, with strict_hooks: exit 0; the MLflow
    run keeps train.steps=8 as its param, the tag changed.train.steps says 12, and no train.resume param
    (its steps 1-12 once: the test above)."""
    tmp_path, done = resumed
    assert "Traceback" not in done.stderr
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'r' / 'mlflow.db'}")
    (run_id,) = json.loads((tmp_path / "r" / "trackers.json").read_text())["mlflow"]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["train.steps"] == "8"
    assert run.data.tags["changed.train.steps"] == "12"
    assert "train.resume" not in run.data.params


def test_mlflow_checkpoint_artifacts_stay_in_the_run_directory(
    resumed: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """A store in the run directory with artifact_location: {run_dir}/mlartifacts: every checkpoint
    uploaded lands there, before and after a resume, and nothing in ./mlruns of the working directory."""
    tmp_path, _ = resumed
    assert not (tmp_path / "mlruns").exists()
    uploaded = sorted(
        path.parent.name for path in (tmp_path / "r" / "mlartifacts").glob("*/artifacts/checkpoints/*/*.pt")
    )
    assert uploaded == sorted(["step_4", "step_8", "step_12"])
    (run_id,) = json.loads((tmp_path / "r" / "trackers.json").read_text())["mlflow"]
    run = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'r' / 'mlflow.db'}").get_run(run_id)
    assert run.info.artifact_uri == (tmp_path / "r" / "mlartifacts" / run_id / "artifacts").resolve().as_uri()


def test_a_run_id_the_tracker_refuses_names_trackers_json(tmp_path: Path, env: dict[str, str]) -> None:
    """A W&B run id in trackers.json that W&B refuses: one line naming trackers.json, the id and what
    to do, exit 2; not an error blamed on the config.yaml that lists the hook."""
    run = tmp_path / "r"
    run.mkdir()
    recorded = yaml.safe_load(config(tmp_path / "a.yaml", f"sqlite:///{tmp_path / 'mlflow.db'}").read_text())
    recorded["logging"]["hooks"] = recorded["logging"]["hooks"][:1]  # the wandb hook
    (run / "config.yaml").write_text(yaml.safe_dump(recorded))
    (run / "trackers.json").write_text(json.dumps({"wandb": ["bad/id"]}))
    done = train("--run-dir", "r", "--resume", cwd=tmp_path, env=env)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("speedtronic: error: r/trackers.json: wandb[0]: "), line
    assert "'bad/id'" in line
    assert "remove it from r/trackers.json to start a new wandb run" in line


def test_trackers_json_is_never_written_through_a_link(tmp_path: Path, env: dict[str, str]) -> None:
    """A symbolic link at trackers.json's temporary name and a hard link at trackers.json, both to
    files outside the run: the run writes its own trackers.json, the files outside untouched."""
    run = tmp_path / "r"
    run.mkdir()
    outside = [tmp_path / "victim1.txt", tmp_path / "victim2.txt"]
    for victim in outside:
        victim.write_text("someone else's file\n")
    (run / "trackers.json.partial").symlink_to(Path("..") / "victim1.txt")
    os.link(outside[1], run / "trackers.json")
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model": {"hidden": 24},
                "train": {"steps": 2, "checkpoint_every": 0, "batch_size": 4, "device": "cpu"},
                "logging": {"hooks": [{"type": "mlflow", "tracking_uri": store}], "system_interval_s": None},
            }
        )
    )
    done = train("--config", path, "--run-dir", "r", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert [victim.read_text() for victim in outside] == ["someone else's file\n"] * 2
    assert (run / "trackers.json").stat().st_nlink == 1
    assert list(json.loads((run / "trackers.json").read_text())) == ["mlflow"]
    assert not os.path.lexists(run / "trackers.json.partial")
