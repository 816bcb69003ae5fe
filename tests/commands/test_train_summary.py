"""`speedtronic train`'s closing summary: where every tracker's run went, and only commands that work.

Real runs: W&B offline (``WANDB_MODE=offline``), a real MLflow sqlite store, an OTLP/HTTP receiver on
127.0.0.1, TensorBoard read back; each printed command is then typed as printed (W&B's ``sync`` with
``--dry-run``: nothing can be uploaded from here).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ACTIVATED_PATH, tensorboard_scalars, user_package
from tests.integrations.test_otel import Receiver
from tests.torch_run import train_cli
from tests.training.test_run_dirs import ROOT, write_config


def summary_lines(stderr: str) -> dict[str, list[str]]:
    """The summary's ``  label  text`` lines after its first line, by label (a label may repeat)."""
    lines = stderr[stderr.index("speedtronic train: steps") :].splitlines()[1:]
    found: dict[str, list[str]] = {}
    for line in lines:
        if line.startswith("  "):
            found.setdefault(line[2:14].strip(), []).append(line[15:])
    return found


def typed_as_printed(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` run as a user types it, in ``cwd``, with this venv's scripts on PATH."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": ACTIVATED_PATH, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        shlex.split(command), cwd=cwd, env=env, capture_output=True, text=True, timeout=180, check=False
    )


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.close()


class TestEveryTrackerSaysWhereItsRunWent:
    def test_wandb_mlflow_otel_and_tensorboard(self, tmp_path: Path, receiver: Receiver) -> None:
        """Each tracker's line names where its run is, and that place holds the run; every printed
        command runs as typed."""
        pytest.importorskip("wandb")
        pytest.importorskip("mlflow")
        pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
        pytest.importorskip("tensorboard")
        hooks = [
            {"type": "wandb", "project": "summary"},
            {"type": "mlflow", "tracking_uri": "sqlite:///{run_dir}/mlflow.db", "experiment": "summary"},
            {"type": "otel", "endpoint": receiver.endpoint},
            {"type": "tensorboard", "log_dir": "{run_dir}/tensorboard"},
        ]
        config = write_config(
            tmp_path / "c.yaml",
            train={"steps": 4, "checkpoint_every": 4},
            logging={"every_steps": 2, "hooks": hooks, "system_interval_s": None},
        )
        done = train_cli(
            "--config",
            config,
            "--run-dir",
            "runs/a",
            cwd=tmp_path,
            env={"WANDB_MODE": "offline", "PATH": ACTIVATED_PATH},
        )
        assert done.returncode == 0, done.stderr
        lines = summary_lines(done.stderr)

        (wandb_line,) = lines["wandb"]
        sync_dir, rest = wandb_line.split(" (offline run ", 1)
        run_id = rest.removesuffix("; not uploaded)")
        assert (tmp_path / sync_dir / f"run-{run_id}.wandb").is_file()
        assert Path(sync_dir).parts[:2] == ("runs", "a")  # under the run dir, shown as the other paths
        (upload,) = lines["upload"]
        assert upload == f"wandb sync {sync_dir}"
        dry = typed_as_printed(upload.replace(" sync ", " sync --dry-run ", 1), tmp_path)
        assert dry.returncode == 0, dry.stderr
        assert f"run-{run_id}.wandb" in dry.stdout + dry.stderr

        (mlflow_line,) = lines["mlflow"]
        mlflow_run, uri = mlflow_line.removeprefix("run ").split(" in ")
        assert uri == "sqlite:///runs/a/mlflow.db"
        cwd = Path.cwd()
        os.chdir(tmp_path)  # the URI is relative to where train ran, as the user's shell is
        try:
            import mlflow

            client = mlflow.MlflowClient(uri)
            assert [m.step for m in client.get_metric_history(mlflow_run, "train_step/loss")] == [2, 4]
        finally:
            os.chdir(cwd)
        has_server = importlib.util.find_spec("flask") is not None
        assert ("mlflow ui" in lines) == has_server  # mlflow-skinny has no `mlflow ui` server

        (otel_line,) = lines["otel"]
        assert otel_line == f"{receiver.endpoint} (OTLP/HTTP logs)"
        assert receiver.records()  # the endpoint named is the one that got the records

        (view,) = lines["view"]
        assert view == "tensorboard --logdir runs/a/tensorboard"
        assert [
            step for step, _ in tensorboard_scalars(tmp_path / "runs/a/tensorboard")["train_step/loss"]
        ] == [
            2,
            4,
        ]
        for label in ("summarize", "plot"):
            (command,) = lines[label]
            assert typed_as_printed(command, tmp_path).returncode == 0, command

        resumed = train_cli(
            "--run-dir",
            "runs/a",
            "--resume",
            "--steps",
            "6",
            cwd=tmp_path,
            env={"WANDB_MODE": "offline", "PATH": ACTIVATED_PATH},
        )
        assert resumed.returncode == 0, resumed.stderr
        again = summary_lines(resumed.stderr)
        assert again["mlflow"] == [mlflow_line]  # the same MLflow run, continued
        (upload,) = again["upload"]
        parts = upload.removeprefix("wandb sync ").split()
        assert len(parts) == 2  # both starts of the one W&B run: wandb sync joins them
        assert parts[0] == sync_dir
        assert again["wandb"] == [f"{parts[1]} (offline run {run_id}; not uploaded)"]
        dry = typed_as_printed(upload.replace(" sync ", " sync --dry-run ", 1), tmp_path)
        assert dry.returncode == 0, dry.stderr
        assert "Would sync 2 run(s)" in dry.stdout + dry.stderr

    def test_a_disabled_wandb_run_says_nothing_was_recorded(self, tmp_path: Path) -> None:
        """WANDB_MODE=disabled: the summary says so, and prints no sync command."""
        pytest.importorskip("wandb")
        config = write_config(
            tmp_path / "c.yaml",
            train={"steps": 2, "checkpoint_every": 0},
            logging={
                "every_steps": 1,
                "hooks": [{"type": "wandb", "project": "p"}],
                "system_interval_s": None,
            },
        )
        done = train_cli("--config", config, "--run-dir", "r", cwd=tmp_path, env={"WANDB_MODE": "disabled"})
        assert done.returncode == 0, done.stderr
        lines = summary_lines(done.stderr)
        assert lines["wandb"] == ["disabled (WANDB_MODE=disabled): nothing was recorded"]
        assert "upload" not in lines


class TestOnlyCommandsThatWork:
    def test_without_matplotlib_plot_says_what_to_install(self, tmp_path: Path) -> None:
        """matplotlib missing: no `speedtronic plot` command (it would exit 2), the install instead."""
        config = write_config(
            tmp_path / "c.yaml",
            train={"steps": 2, "checkpoint_every": 0},
            logging={"system_interval_s": None},
        )
        hide = "import sys; sys.modules['matplotlib'] = None; sys.argv[0] = 'speedtronic'\n"
        code = hide + "from speedtronic.commands.cli import main; sys.exit(main())"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": ACTIVATED_PATH}
        command = [
            sys.executable,
            "-c",
            code,
            "train",
            "--no-progress",
            "--config",
            str(config),
            "--run-dir",
            "r",
        ]
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr
        lines = summary_lines(done.stderr)
        assert lines["plot"] == ["needs matplotlib: pip install 'speedtronic[plot]'"]
        assert typed_as_printed(lines["summarize"][0], tmp_path).returncode == 0

    def test_a_run_with_nothing_to_plot_gets_no_plot_command(self, tmp_path: Path) -> None:
        """No train_step or eval record (every_steps past the steps trained, no eval): no plot line,
        since that plot exits 2; summarize is still offered, and works."""
        pytest.importorskip("matplotlib")
        config = write_config(
            tmp_path / "c.yaml",
            train={"steps": 2, "checkpoint_every": 0, "eval_every": 0},
            logging={"every_steps": 1000, "system_interval_s": None},
        )
        done = train_cli("--config", config, "--run-dir", "r", cwd=tmp_path, env={"PATH": ACTIVATED_PATH})
        assert done.returncode == 0, done.stderr
        lines = summary_lines(done.stderr)
        assert "plot" not in lines
        assert typed_as_printed(lines["summarize"][0], tmp_path).returncode == 0
        refused = typed_as_printed("speedtronic plot r -o r/loss.png", tmp_path)
        assert refused.returncode == 2  # what the summary used to offer


TIMED = re.compile(
    r"\b((?:\w+_per_s|elapsed_s|duration_s|save_s|eval_s|step_time_s|data_wait_s|compute_s|pid)=)[-+.\deE]+"
)
"""A text log field whose value is the machine's speed (or the process), not the run's."""


def machine_free(text: str) -> list[str]:
    """``text`` with what depends on the machine's speed or the clock masked: timestamps, rates,
    times, and the summary's duration and throughput."""
    lines = []
    for line in text.splitlines():
        line = re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", "<time> ", line)
        line = TIMED.sub(r"\1<t>", line)
        line = re.sub(r"\bstacks=stacks/rank(\d+)-\w+\.txt", r"stacks=stacks/rank\1-<t>.txt", line)
        line = re.sub(r" in [\d.]+ s on ", " in <t> s on ", line)
        line = re.sub(r", [\d,]+ samples/s, [\d,]+ tokens/s$", ", <t> samples/s, <t> tokens/s", line)
        lines.append(line)
    return lines


class TestTheDocsSample:
    def test_docs_training_sample_is_what_train_prints(self, tmp_path: Path) -> None:
        """docs/training.md's sample run, typed as its first line says: the same lines, keys and
        values, but for the clock and the machine's speed."""
        pytest.importorskip("tensorboard")
        pytest.importorskip("psutil")  # the default config samples the system (no warning line)
        text = (ROOT / "docs" / "training.md").read_text()
        start = text.index("```text\n$ speedtronic train ") + len("```text\n")
        block = text[start : text.index("```", start)]
        command, printed = block.split("\n", 1)
        args = shlex.split(command.removeprefix("$ "))
        assert args[:2] == ["speedtronic", "train"]
        done = train_cli(*args[2:], cwd=tmp_path, env={"PATH": ACTIVATED_PATH})
        assert done.returncode == 0, done.stderr
        assert machine_free(done.stdout + done.stderr) == machine_free(printed)


@pytest.fixture(scope="module")
def warned(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """One run with two hooks from packages of the user's: ``fakelib``'s factory issues a warning as
    torch's "Failed to initialize NumPy" does; ``badlib``'s hook raises at every event."""
    tmp_path = tmp_path_factory.mktemp("warned")
    user_package(
        tmp_path / "lib",
        "fakelib",
        "import warnings\n\n"
        "def make(**kwargs):\n"
        "    warnings.warn('Failed to initialize NumPy: _ARRAY_API not found')\n"
        "    return lambda event, payload: None\n",
    )
    user_package(
        tmp_path / "lib",
        "badlib",
        "def make(**kwargs):\n"
        "    def hook(event, payload):\n"
        "        raise RuntimeError('tracker down')\n"
        "    return hook\n",
    )
    config = write_config(
        tmp_path / "c.yaml",
        train={"steps": 1, "checkpoint_every": 0, "eval_every": 0},
        logging={"hooks": [{"type": "fakelib:make"}, {"type": "badlib:make"}], "system_interval_s": None},
    )
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path / "lib")])}
    done = train_cli("--config", config, "--run-dir", "r", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    return done


class TestWarningsSayWhoseTheyAre:
    def test_another_packages_warning_names_that_package(
        self, warned: subprocess.CompletedProcess[str]
    ) -> None:
        """A warning another package issues during the run (torch's "Failed to initialize NumPy") is
        printed as that package's, not as speedtronic's own."""
        lines = [line for line in warned.stderr.splitlines() if "Failed to initialize NumPy" in line]
        assert lines == [
            "speedtronic: warning: from fakelib: Failed to initialize NumPy: _ARRAY_API not found"
        ]

    def test_speedtronics_own_warning_is_not_attributed_elsewhere(
        self, warned: subprocess.CompletedProcess[str]
    ) -> None:
        """A hook failure is speedtronic's warning, though it points at the first frame outside
        speedtronic (the hook's own module): printed without a "from"."""
        lines = [line for line in warned.stderr.splitlines() if "tracker down" in line]
        assert lines
        assert all(line.startswith("speedtronic: warning: hook ") for line in lines), lines


class TestAddressesKeepNoSecrets:
    def test_an_otlp_endpoint_with_a_password_is_shown_redacted(self, tmp_path: Path) -> None:
        """An endpoint holding credentials is named with the password redacted; nothing is sent."""
        pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
        pytest.importorskip("torch")
        from speedtronic.commands.train import summary
        from speedtronic.integrations import OtelHook
        from speedtronic.runtime import RunInfo
        from speedtronic.training.trainer import FitResult

        hook = OtelHook("http://user:s3cretpassw0rd@127.0.0.1:9/v1/logs", timeout_s=1)
        try:
            info = RunInfo(
                run_dir=tmp_path,
                config={},
                device="cpu",
                checkpoint_dir=tmp_path / "checkpoints",
                files={"text log": "stdout"},
                hooks=(hook,),
            )
            result = FitResult(
                step=1,
                start_step=0,
                steps_run=1,
                duration_s=1.0,
                final_loss=1.0,
                samples_per_s=1.0,
                tokens_per_s=1.0,
                checkpoint=None,
            )
            text = summary(result, info)
        finally:
            hook.close()
        assert "s3cretpassw0rd" not in text
        assert (
            "  otel         http://user:[REDACTED]@127.0.0.1:9/v1/logs (OTLP/HTTP logs)" in text.splitlines()
        )
