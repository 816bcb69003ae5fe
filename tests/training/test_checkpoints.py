"""Checkpoints as `speedtronic train` writes and resumes them, on real files: damaged ones, ones that
can't be written, and a run directory whose `checkpoints/` points elsewhere."""

from __future__ import annotations

import resource
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers import ACTIVATED_PATH, run_records
from tests.runs.conftest import assert_one_line_error
from tests.torch_run import train_cli

from .test_run_dirs import write_config

STEP_4, STEP_8 = "step_00000004.pt", "step_00000008.pt"


def train(
    *args: str | Path, cwd: Path, file_size_limit: int | None = None
) -> subprocess.CompletedProcess[str]:
    """`speedtronic train` in a subprocess; ``file_size_limit``: RLIMIT_FSIZE in bytes, SIGXFSZ ignored,
    so a write past it fails with EFBIG as on a quota-limited file system."""

    def limit() -> None:
        if file_size_limit is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    env = {"PATH": ACTIVATED_PATH}
    if file_size_limit is not None:
        # Not under coverage (`make test`): its data file can't be written past the limit either, and
        # its error would land on the stderr this test reads. An empty value leaves coverage off.
        env["COVERAGE_PROCESS_CONFIG"] = ""
    return train_cli(*args, cwd=cwd, env=env, preexec_fn=limit)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run trained to step 8 with checkpoints at 4 and 8 (copied by each test that changes it)."""
    base = tmp_path_factory.mktemp("finished")
    config = write_config(base / "c.yaml", train={"steps": 8})
    done = train("--config", config, "--run-dir", "r", cwd=base)
    assert done.returncode == 0, done.stderr
    return base / "r"


@pytest.fixture(scope="module")
def from_step_4(finished: Path, tmp_path_factory: pytest.TempPathFactory) -> float:
    """The final loss of ``finished`` resumed to step 10 with its step-8 checkpoint removed: what a run
    that skips a damaged step-8 checkpoint must end with (trained once for every kind of damage)."""
    base = tmp_path_factory.mktemp("from-step-4")
    clean = shutil.copytree(finished, base / "clean")
    (clean / "checkpoints" / STEP_8).unlink()
    done = train("--run-dir", "clean", "--resume", "--steps", "10", cwd=base)
    assert done.returncode == 0, done.stderr
    return float([r for r in run_records(clean) if r["event"] == "train_end"][-1]["final_loss"])


def copy_run(run: Path, tmp_path: Path) -> Path:
    shutil.copytree(run, tmp_path / "r")
    return tmp_path / "r"


def damage(path: Path, change: Any) -> None:
    """Rewrite a real checkpoint with ``change(state)`` applied: torch.load still reads it."""
    state = torch.load(path, weights_only=True)
    change(state)
    torch.save(state, path)


def no_scheduler(state: dict[str, Any]) -> None:
    del state["scheduler"]


def rng_of_the_wrong_type(state: dict[str, Any]) -> None:
    state["rng"]["torch"] = [1, 2, 3]


def no_generator(state: dict[str, Any]) -> None:
    del state["data"]["generator"]


def no_betas(state: dict[str, Any]) -> None:
    del state["optimizer"]["param_groups"][0]["betas"]


class TestDamagedCheckpoints:
    @pytest.mark.parametrize(
        ("change", "why"),
        [
            (no_scheduler, "no 'scheduler' entry"),
            (rng_of_the_wrong_type, "'rng' can't be restored"),
            (no_generator, "'data' has no 'generator' entry"),
            (no_betas, "'optimizer' group 0 has no 'betas' entry"),
        ],
    )
    def test_a_damaged_newest_checkpoint_falls_back_before_restoring_anything(
        self, finished: Path, from_step_4: float, tmp_path: Path, change: Any, why: str
    ) -> None:
        """A newest checkpoint torch.load reads but that is damaged inside is skipped, named with why,
        and the run resumes from the one before exactly as if the damaged one were not there."""
        run = copy_run(finished, tmp_path)
        damage(run / "checkpoints" / STEP_8, change)

        done = train("--run-dir", "r", "--resume", "--steps", "10", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        assert "steps 4 -> 10 " in done.stderr
        (warning,) = [line for line in done.stderr.splitlines() if line.startswith("speedtronic: warning:")]
        assert f"skipped checkpoint r/checkpoints/{STEP_8}: damaged" in warning
        assert why in warning
        (skipped,) = [r for r in run_records(run) if r["event"] == "checkpoint_skipped"]
        assert (skipped["step"], why in skipped["error"]) == (8, True)

        end = [r for r in run_records(run) if r["event"] == "train_end"][-1]
        assert end["final_loss"] == from_step_4  # nothing of the damaged one was restored


def test_a_moved_run_keeps_its_file_names(finished: Path, tmp_path: Path) -> None:
    """A run recorded in `r` and moved to `clean` resumes writing `clean/metrics.jsonl`: only the
    directory part of a path moves, never letters of a file's name."""
    shutil.copytree(finished, tmp_path / "clean")
    done = train("--run-dir", "clean", "--resume", "--steps", "10", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "  metrics      clean/metrics.jsonl" in done.stderr.splitlines()
    assert sorted(p.name for p in (tmp_path / "clean").glob("*.jsonl")) == ["metrics.jsonl"]
    assert [r["event"] for r in run_records(tmp_path / "clean")][-1] == "train_end"


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


class TestAFailedCheckpointWrite:
    def test_a_file_size_limit_names_the_file_and_keeps_the_previous_checkpoint(
        self, finished: Path, tmp_path: Path
    ) -> None:
        """A checkpoint past a real file-size limit (EFBIG): one line naming the file and why, the paths,
        train_end failed, exit 1; the checkpoint before it intact and no partial file left."""
        run = copy_run(finished, tmp_path)
        before = (run / "checkpoints" / STEP_8).read_bytes()
        limit = len(before) // 2
        assert (run / "metrics.jsonl").stat().st_size * 2 < limit  # the log itself stays writable

        done = train("--run-dir", "r", "--resume", "--steps", "12", cwd=tmp_path, file_size_limit=limit)
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr
        line, *files = done.stderr.splitlines()
        assert line == (
            "speedtronic: error: can't write checkpoint r/checkpoints/step_00000012.pt: file too large; "
            "the run stopped at step 12 (latest checkpoint: step_00000008.pt); fix that, then continue "
            "with: speedtronic train --run-dir r --resume"
        )
        assert "  checkpoints  r/checkpoints (latest: step_00000008.pt)" in files
        assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [STEP_4, STEP_8]
        assert (run / "checkpoints" / STEP_8).read_bytes() == before
        end = run_records(run)[-1]
        assert (end["event"], end["status"], end["step"]) == ("train_end", "failed", 12)
        assert end["error"] == (
            "CheckpointWriteError: can't write checkpoint r/checkpoints/step_00000012.pt: file too large"
        )


class TestRunsStayInTheirDirectory:
    def test_a_symlinked_checkpoints_directory_is_refused(self, finished: Path, tmp_path: Path) -> None:
        """checkpoints/ linked to a directory elsewhere: one line naming the link, exit 2, and nothing
        outside the run is written or deleted (keep_checkpoints would have pruned there)."""
        run = copy_run(finished, tmp_path)
        elsewhere = tmp_path / "elsewhere"
        (run / "checkpoints").rename(elsewhere)
        (elsewhere / "step_00000001.pt").write_bytes(b"someone else's file")
        (run / "checkpoints").symlink_to(elsewhere)
        outside = tree(elsewhere)

        done = train("--run-dir", "r", "--resume", "--steps", "16", cwd=tmp_path)
        assert_one_line_error(done, "r/checkpoints: is a symbolic link", "replace the link with a directory")
        assert tree(elsewhere) == outside


class TestResumeTrainsWhatItRecords:
    def test_a_changed_lr_is_the_lr_trained(self, finished: Path, tmp_path: Path) -> None:
        """--resume --config with a new train.lr: config_changes records it and every later train_step
        trains at it (the schedule's position kept: new lr x the schedule's factor)."""
        from speedtronic.runtime import warmup_cosine

        run = copy_run(finished, tmp_path)
        (tmp_path / "lr.yaml").write_text("train:\n  lr: 0.01\n")
        done = train("--run-dir", "r", "--resume", "--config", "lr.yaml", "--steps", "12", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        start = [r for r in run_records(run) if r["event"] == "train_start"][-1]
        assert {"key": "train.lr", "old": 0.001, "new": 0.01} in start["config_changes"]
        factor = warmup_cosine(2, start["lr_schedule_steps"])
        trained = {
            r["step"]: r["lr"] for r in run_records(run) if r["event"] == "train_step" and r["step"] > 8
        }
        assert trained == pytest.approx({step: 0.01 * factor(step - 1) for step in range(9, 13)})

    @pytest.mark.parametrize(
        ("steps", "said"),
        [
            ((), "--resume: the run in r is finished (step 8 of train.steps 8)"),
            (("--steps", "6"), "--steps 6: the run in r is already at step 8"),
        ],
    )
    def test_resuming_a_finished_run_says_which_steps_to_pass(
        self, finished: Path, tmp_path: Path, steps: tuple[str, ...], said: str
    ) -> None:
        """--resume of a run already at its target: one line saying to pass --steps N > 8, exit 2, and
        the run's files untouched (no empty segment)."""
        run = copy_run(finished, tmp_path)
        before = tree(run)
        done = train("--run-dir", "r", "--resume", *steps, cwd=tmp_path)
        assert_one_line_error(done, said, "pass --steps N with N > 8")
        assert tree(run) == before


def test_load_checkpoint_refuses_a_damaged_one_before_restoring_anything(tmp_path: Path) -> None:
    """Trainer.load_checkpoint of a checkpoint with an RNG state of the wrong type: ConfigError naming
    the file and why, and the trainer's weights, optimizer and step untouched."""
    from speedtronic.training.config import ConfigError

    from .test_trainer import fit, make_trainer

    trained, _ = make_trainer(tmp_path / "a", steps=3, checkpoint_every=3)
    fit(trained)
    path = tmp_path / "a" / "ckpt" / "step_00000003.pt"
    damage(path, rng_of_the_wrong_type)
    fresh, _ = make_trainer(tmp_path / "b", steps=3, seed=1)
    weights = {key: value.clone() for key, value in fresh.module.state_dict().items()}
    try:
        with pytest.raises(ConfigError, match=r"step_00000003\.pt.*'rng' can't be restored"):
            fresh.load_checkpoint(path)
    finally:
        fresh.logger.close()
    assert all(torch.equal(fresh.module.state_dict()[key], value) for key, value in weights.items())
    assert (fresh.step, fresh.optimizer.state_dict()["state"]) == (0, {})
