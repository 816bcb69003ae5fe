from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from speedtronic.commands.cli import main
from tests.helpers import SCRIPTS, UNACTIVATED_PATH

LOG_LINE = re.compile(
    r'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| (INFO|WARNING) \| \w+( \S+=("(?:[^"\\]|\\.)*"|\S+))*'
)


def speedtronic(
    *args: str, cwd: Path, code: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m speedtronic ARGS`` (or ``python -c CODE``) the way a user would."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    command = (
        [sys.executable, "-c", code] if code is not None else [sys.executable, "-m", "speedtronic", *args]
    )
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


class TestTrainCommand:
    def test_with_no_arguments_it_runs_the_embedded_default(self, tmp_path: Path) -> None:
        """Log lines on stdout, the first one short; metrics, checkpoints, config under runs/<timestamp>;
        a summary on stderr with the eval loss and the commands that show the run, which work as typed."""
        done = speedtronic("train", cwd=tmp_path, PATH=UNACTIVATED_PATH)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert all(LOG_LINE.fullmatch(line) for line in lines), lines
        assert " | INFO | train_start start_step=0 target_step=200 " in lines[0]
        # the run's config is a DEBUG hyperparams record; train_start holds the figures MFU needs and
        # where the stack signal writes (pid, stack_signal, stacks)
        assert len(lines[0]) < 300, lines[0]
        assert " | INFO | train_end step=200 " in lines[-1]

        (run_dir,) = (tmp_path / "runs").iterdir()
        events = [json.loads(line)["event"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert events.count("train_step") == 10
        assert events[:2] == ["train_start", "hyperparams"]
        assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
            "step_00000100.pt",
            "step_00000200.pt",
        ]
        assert (run_dir / "config.yaml").is_file()

        summary = done.stderr.splitlines()
        assert re.fullmatch(
            r"speedtronic train: steps 0 -> 200 in [\d.]+ s on cpu, final loss [\d.]+, eval loss [\d.]+, "
            r"[\d,]+ samples/s, [\d,]+ tokens/s",
            summary[0],
        )
        relative = run_dir.relative_to(tmp_path)
        assert f"  run dir      {relative}" in summary
        assert f"  metrics      {relative}/metrics.jsonl" in summary
        assert f"  checkpoints  {relative}/checkpoints (latest: step_00000200.pt)" in summary
        assert summary[-3:] == [
            f"  view         {SCRIPTS / 'tensorboard'} --logdir {relative}/tensorboard",
            f"  summarize    {SCRIPTS / 'speedtronic'} summarize {relative}",
            f"  plot         {SCRIPTS / 'speedtronic'} plot {relative} -o {relative}/loss.png",
        ]
        for line in summary[-2:]:  # pasted into a shell whose PATH lacks the virtualenv, as after `make run`
            typed = line.split(maxsplit=1)[1]
            shown = subprocess.run(
                typed,
                shell=True,
                cwd=tmp_path,
                env={**os.environ, "PATH": UNACTIVATED_PATH},
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert shown.returncode == 0, (typed, shown.stderr)
        assert (run_dir / "loss.png").is_file()

    def test_options_override_the_config_and_resume_continues(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--config, --run-dir, --steps; then --resume picks up at the last checkpoint."""
        config = tmp_path / "c.yaml"
        config.write_text(
            "train:\n  steps: 50\n  checkpoint_every: 5\n  device: cpu\nlogging:\n  hooks: []\n"
        )
        run_dir = tmp_path / "run"
        assert main(["train", "--config", str(config), "--run-dir", str(run_dir), "--steps", "12"]) == 0
        assert "steps 0 -> 12 " in capsys.readouterr().err
        assert (
            main(["train", "--config", str(config), "--run-dir", str(run_dir), "--steps", "20", "--resume"])
            == 0
        )
        out, err = capsys.readouterr()
        assert "steps 12 -> 20 " in err
        assert " | INFO | train_start start_step=12 target_step=20 " in out

    def test_a_bad_config_is_one_line_and_exit_code_2(self, tmp_path: Path) -> None:
        """No traceback: 'speedtronic: error: <file>: <key>: expected ..., got ...'."""
        (tmp_path / "bad.yaml").write_text("train:\n  steps: ten\n")
        done = speedtronic("train", "--config", "bad.yaml", cwd=tmp_path)
        assert done.returncode == 2
        assert done.stderr == (
            "speedtronic: error: bad.yaml: train.steps: expected an integer >= 0, got 'ten' (str)\n"
        )
        assert done.stdout == ""
        assert not (tmp_path / "runs").exists()

    def test_a_bad_option_value_is_named(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--steps -1 is refused with the key it sets."""
        assert main(["train", "--run-dir", str(tmp_path / "r"), "--steps", "-1"]) == 2
        assert capsys.readouterr().err == (
            "speedtronic: error: command line: train.steps: expected an integer >= 0, got -1 (int)\n"
        )

    def test_without_torch_it_says_what_to_install(self, tmp_path: Path) -> None:
        """torch missing: one line naming pip install 'speedtronic[torch]', exit code 2."""
        done = speedtronic(
            cwd=tmp_path,
            code=(
                "import sys; sys.modules['torch'] = None\n"
                "from speedtronic.commands.cli import main; sys.exit(main(['train', '--run-dir', 'r']))"
            ),
        )
        assert done.returncode == 2
        assert (
            done.stderr
            == "speedtronic: error: speedtronic train requires torch: pip install 'speedtronic[torch]'\n"
        )


def test_importing_speedtronic_does_not_import_torch(tmp_path: Path) -> None:
    """The package, the catalog, the runtime's config side and the CLI stay light."""
    done = speedtronic(
        cwd=tmp_path,
        code=(
            "import sys, speedtronic, speedtronic.events, speedtronic.runtime, speedtronic.commands.cli\n"
            "speedtronic.runtime.load_config({'logging': {'hooks': []}})\n"
            "print('torch' in sys.modules)"
        ),
    )
    assert done.stdout == "False\n", done.stderr


def test_the_trainer_says_what_to_install_without_torch(tmp_path: Path) -> None:
    """Importing speedtronic.training.trainer without torch raises ModuleNotFoundError naming the extra."""
    done = speedtronic(
        cwd=tmp_path,
        code=(
            "import sys; sys.modules['torch'] = None\n"
            "try:\n    import speedtronic.training.trainer\n"
            "except ModuleNotFoundError as e:\n    print(e.name, e)"
        ),
    )
    expected = "torch speedtronic.training.trainer requires torch: pip install 'speedtronic[torch]'\n"
    assert done.stdout == expected
