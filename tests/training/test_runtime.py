from __future__ import annotations

import math
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from speedtronic import HookError
from speedtronic.hooks import BackgroundHooks
from speedtronic.runtime import (
    ConfigError,
    RunDirError,
    build_logger,
    build_runtime,
    fit_and_close,
    load_config,
    open_start,
    train_from_config,
)
from tests.helpers import read_jsonl

from .recording import RecordingHook, journal

JOURNAL = "tests.training.recording:JournalHook"


def with_logging(config: dict[str, Any], **logging: Any) -> dict[str, Any]:
    return {**config, "logging": {**config["logging"], **logging}}


def with_train(config: dict[str, Any], **train: Any) -> dict[str, Any]:
    return {**config, "train": {**config["train"], **train}}


def open_fds() -> dict[str, str]:
    """This process's open file descriptors and what each one points at."""
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        with_target = Path("/proc/self/fd") / fd
        try:
            fds[fd] = os.readlink(with_target)
        except FileNotFoundError:  # the descriptor listdir itself used
            continue
    return fds


class TestProgrammaticPattern:
    def test_the_documented_pattern_with_a_recording_hook(self, config: dict[str, Any]) -> None:
        """build_runtime, append a hook to trainer.logger, fit_and_close: the hook saw the run and was
        closed, and everything the start made is closed: the same process can start the run again."""
        trainer, info = build_runtime(config)
        hook = RecordingHook()
        trainer.logger.hooks.append(hook)
        result, info = fit_and_close(trainer, info)
        assert result.step == 20
        assert [p["step"] for p in hook.named("train_step")] == [5, 10, 15, 20]
        assert [p["step"] for p in hook.named("checkpoint")] == [10, 20]
        assert hook.named("train_end")[0]["final_loss"] == result.final_loss
        assert hook.closed == 1
        assert info.write_errors == 0
        resumed, _ = train_from_config(with_train(config, steps=25, resume=True))  # the lock was released
        assert (resumed.resumed_from, resumed.step) == (info.checkpoint_dir / "step_00000020.pt", 25)

    def test_the_documented_pattern_with_wandb(
        self, config: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """docs/training.md's pattern, with W&B offline."""
        integrations = pytest.importorskip(
            "speedtronic.integrations", reason="speedtronic.integrations not here"
        )
        WandbHook = integrations.WandbHook  # the pattern's name
        from tests.wandb_files import read_wandb_run

        monkeypatch.setenv("WANDB_MODE", "offline")
        monkeypatch.setenv("WANDB_DIR", str(tmp_path))  # W&B may keep an earlier test's dir: see below
        monkeypatch.setenv("WANDB_SILENT", "true")
        import wandb

        wandb.teardown()  # W&B reads its environment once per process: forget an earlier test's
        trainer, info = build_runtime(config)
        hook = WandbHook(project="speedtronic")
        trainer.logger.hooks.append(hook)
        result, info = fit_and_close(trainer, info)
        assert result.step == 20
        recorded = read_wandb_run(Path(hook.run.dir).parent)  # type: ignore[attr-defined]  # wandb.Run
        assert "train_start/target_step" in recorded.summary  # a one-off event: the run's summary
        assert "train_end/final_loss" in recorded.summary  # fit() returned once the hook had every event
        assert [row["step"] for row in recorded.history if "train_step/loss" in row] == [5, 10, 15, 20]
        assert recorded.config["train"]["steps"] == 20  # hyperparams' config is the run's
        assert recorded.exit_code == 0


class TestBuildRuntime:
    def test_the_run_dir_holds_metrics_checkpoints_and_the_config(self, config: dict[str, Any]) -> None:
        """metrics.jsonl, checkpoints/step_<N>.pt and config.yaml (which loads back to the same config)."""
        result, info = train_from_config(config)
        run_dir = Path(config["run_dir"])
        assert info.run_dir == run_dir
        events = [r["event"] for r in read_jsonl(run_dir / "metrics.jsonl")]
        assert events[0] == "train_start"
        assert events[-1] == "train_end"
        assert sorted(p.name for p in info.checkpoint_dir.iterdir()) == [
            "step_00000010.pt",
            "step_00000020.pt",
        ]
        assert result.checkpoint == info.checkpoint_dir / "step_00000020.pt"
        assert load_config(run_dir / "config.yaml") == info.config
        assert info.files == {
            "text log": "stdout",
            "metrics": str(run_dir / "metrics.jsonl"),
            "checkpoints": str(run_dir / "checkpoints"),
            "config": str(run_dir / "config.yaml"),
        }

    def test_the_default_hooks_write_tensorboard_files_in_the_run_dir(self, config: dict[str, Any]) -> None:
        """With the integration and tensorboard installed, the default config writes event files."""
        pytest.importorskip("speedtronic.integrations", reason="speedtronic.integrations not here")
        pytest.importorskip("tensorboard")
        config = {**config, "logging": {"validate": True}}  # the default hooks
        _, info = train_from_config(config)
        assert info.files["tensorboard"] == str(info.run_dir / "tensorboard")
        assert list((info.run_dir / "tensorboard").rglob("events.out.tfevents.*"))

    def test_resume_continues_the_step_count(self, config: dict[str, Any]) -> None:
        """A second run with resume: true starts at the first run's last checkpoint and counts on."""
        train_from_config(with_train(config, steps=15))
        result, info = train_from_config(with_train(config, steps=25, resume=True))
        assert (result.start_step, result.step, result.steps_run) == (15, 25, 10)
        lines = read_jsonl(info.run_dir / "metrics.jsonl")
        starts = [r for r in lines if r["event"] == "train_start"]
        assert [s["start_step"] for s in starts] == [0, 15]
        steps = [r["step"] for r in lines if r["event"] == "train_step"]
        assert steps == [5, 10, 15, 20, 25]

    def test_the_default_task_learns(self, config: dict[str, Any]) -> None:
        """Its default 200 steps take the loss from ln(32) to well under half of that."""
        config = {**config, "train": {"device": "cpu"}, "logging": {**config["logging"], "every_steps": 1}}
        result, info = train_from_config(config)
        losses = [r["loss"] for r in read_jsonl(info.run_dir / "metrics.jsonl") if r["event"] == "train_step"]
        assert len(losses) == 200
        assert losses[0] == pytest.approx(math.log(32), rel=0.1)
        assert sum(losses[-20:]) / 20 < 0.5 * losses[0]
        assert result.final_loss == losses[-1]

    def test_the_logging_section_configures_the_logger(self, config: dict[str, Any], run_dir: Path) -> None:
        """level, file, json_file and every_steps reach the MetricLogger."""
        config = with_logging(
            config,
            level="WARNING",
            file="{run_dir}/log.txt",
            json_file="{run_dir}/m/x.jsonl",
            every_steps=10,
            hooks=[{"type": JOURNAL, "path": "{run_dir}/journal.jsonl"}],
        )
        train_from_config(with_train(config, precision="fp32"))
        assert (run_dir / "log.txt").read_text() == ""  # nothing at WARNING on an aligned model
        assert [r["step"] for r in read_jsonl(run_dir / "m" / "x.jsonl") if r["event"] == "train_step"] == [
            10,
            20,
        ]
        assert [e["step"] for e in journal(run_dir / "journal.jsonl") if e["event"] == "train_step"] == [
            10,
            20,
        ]

    def test_shape_warnings_reach_the_text_log_at_warning(
        self, config: dict[str, Any], run_dir: Path
    ) -> None:
        """A hidden size of 100: level=WARNING still shows the shape warnings."""
        config = with_logging({**config, "model": {"hidden": 100}}, level="WARNING", file="{run_dir}/log.txt")
        train_from_config(with_train(config, steps=1))
        lines = (run_dir / "log.txt").read_text().splitlines()
        assert len(lines) == 4  # the embedding, both sides of the hidden layer, the output's input
        assert all(" | WARNING | shape_warning field=" in line for line in lines)

    def test_a_bad_device_is_a_config_error(self, config: dict[str, Any]) -> None:
        """train.device that torch can't use is named."""
        with pytest.raises(ConfigError, match=r"^config: train.device: can't use 'gpu': "):
            build_runtime(with_train(config, device="gpu"))

    @pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
    def test_cuda_without_a_gpu_is_a_config_error(self, config: dict[str, Any]) -> None:
        """device: cuda on a CPU-only build is named, not a traceback from deep inside torch."""
        with pytest.raises(ConfigError, match=r"^config: train.device: 'cuda' needs CUDA, "):
            build_runtime(with_train(config, device="cuda"))


class TestOpenStart:
    def test_build_runtime_takes_the_opened_start(self, config: dict[str, Any], run_dir: Path) -> None:
        """open_start, then build_runtime on it and fit_and_close: the run trains in the directory
        open_start locked, which is released at the end."""
        start = open_start(config)
        assert start.run is not None
        assert start.run.path == run_dir
        trainer, info = build_runtime(start)
        assert info.run is start.run
        result, _ = fit_and_close(trainer, info)
        assert result.step == 20
        open_start(with_train(config, resume=True)).undo()  # released: a new start may open it
        assert (run_dir / "metrics.jsonl").is_file()

    def test_a_second_start_on_an_opened_directory_is_refused(
        self, config: dict[str, Any], run_dir: Path
    ) -> None:
        """While one start holds the directory, another is refused naming this process; undo() leaves
        the directory as it was found (here: none) and lets it go."""
        start = open_start(config)
        with pytest.raises(RunDirError, match=rf"in use by another run \(pid {os.getpid()}\)"):
            open_start(config)
        start.undo()
        assert not run_dir.exists()
        open_start(config).undo()

    def test_a_resume_is_checked_when_opened(self, config: dict[str, Any], run_dir: Path) -> None:
        """A resumed start's checks run in open_start: what it changed in the recorded config, and a
        link planted in place of its metrics is refused there."""
        train_from_config(with_train(config, steps=2))
        resumed = with_train(config, steps=4, resume=True)
        start = open_start(resumed)
        assert [change["key"] for change in start.config_changes] == ["train.steps"]
        start.undo()
        (run_dir / "metrics.jsonl").rename(run_dir / "elsewhere.jsonl")
        (run_dir / "metrics.jsonl").symlink_to("elsewhere.jsonl")
        with pytest.raises(RunDirError, match=r"metrics\.jsonl: is a symbolic link"):
            open_start(resumed)
        (run_dir / "elsewhere.jsonl").replace(run_dir / "metrics.jsonl")
        open_start(resumed).undo()  # the refusal left no lock behind

    def test_a_start_that_fails_to_build_is_undone(self, config: dict[str, Any], run_dir: Path) -> None:
        """build_runtime of an opened start that fails (a device torch can't use): the directory
        keeps exactly what it held, and is released."""
        run_dir.mkdir()
        (run_dir / "notes.txt").write_text("mine\n")
        start = open_start(with_train(config, device="gpu"))
        with pytest.raises(ConfigError, match=r"train\.device"):
            build_runtime(start)
        assert sorted(path.name for path in run_dir.iterdir()) == ["notes.txt"]
        open_start(config).undo()


class TestBuildLogger:
    def test_hooks_are_built_in_order_with_their_arguments(
        self, config: dict[str, Any], run_dir: Path
    ) -> None:
        """Each hooks entry is its factory called with the entry's other keys."""
        logger = build_logger(
            with_logging(
                config,
                hooks=[
                    {"type": "tests.training.recording:RecordingHook", "a": 1},
                    {"type": JOURNAL, "path": "{run_dir}/j.jsonl"},
                ],
            )
        )
        try:
            first, second = logger.hooks
            assert isinstance(first, RecordingHook)
            assert first.kwargs == {"a": 1}
            assert type(second).__name__ == "JournalHook"
        finally:
            logger.close()
        assert journal(run_dir / "j.jsonl") == [{"event": "close"}]

    def test_background_true_runs_the_hook_off_the_training_thread(
        self, config: dict[str, Any], run_dir: Path
    ) -> None:
        """A hooks entry with background: true is called on a worker thread and gets every event by close."""
        entry = {"type": "tests.training.recording:ThreadJournalHook", "path": "{run_dir}/j"}
        entry["background"] = True
        logger = build_logger(with_logging(config, hooks=[entry]))
        (hook,) = logger.hooks
        assert isinstance(hook, BackgroundHooks)
        for step in range(3):
            logger.emit("probe", {"step": step})
        logger.close()
        lines = journal(run_dir / "j")
        assert [line["event"] for line in lines] == ["probe"] * 3 + ["close"]
        assert threading.current_thread().name not in {line["thread"] for line in lines[:3]}

    def test_background_must_be_a_bool(self, config: dict[str, Any]) -> None:
        """background: "yes" is refused, naming the entry, before the hook is created."""
        entry = {"type": JOURNAL, "path": "{run_dir}/j", "background": "yes"}
        problem = r"logging.hooks\[0\]: .*background must be true or false, got 'yes'"
        with pytest.raises(ConfigError, match=problem):
            build_logger(with_logging(config, hooks=[entry]))

    def test_a_failing_hook_closes_the_ones_before_it(self, config: dict[str, Any], run_dir: Path) -> None:
        """The second hook's factory raises: the first is closed, the error names entry 1."""
        hooks = [
            {"type": JOURNAL, "path": "{run_dir}/j.jsonl"},
            {"type": "tests.training.recording:broken_factory"},
        ]
        before = open_fds()
        with pytest.raises(
            ConfigError,
            match=r"logging.hooks\[1\]: tests.training.recording:broken_factory hook "
            r"can't be created: RuntimeError: this factory always fails",
        ):
            build_logger(with_logging(config, hooks=hooks))
        assert journal(run_dir / "j.jsonl") == [{"event": "close"}]
        assert open_fds() == before

    def test_a_factory_must_return_a_hook(self, config: dict[str, Any]) -> None:
        """A factory returning something that can't take events is refused, naming the entry."""
        with pytest.raises(ConfigError, match=r"logging.hooks\[0\]: hook 'int' is neither a TrainingHook"):
            build_logger(with_logging(config, hooks=[{"type": "tests.training.recording:not_a_hook"}]))


class TestTrackerRuns:
    def test_a_damaged_trackers_file_is_named_on_resume(self, config: dict[str, Any], run_dir: Path) -> None:
        """A trackers.json that is no {type: [run id]} mapping stops a resume with a ConfigError naming it."""
        run_dir.mkdir(parents=True)
        (run_dir / "trackers.json").write_text('{"wandb": "abc"}')
        with pytest.raises(ConfigError, match=r"trackers.json: expected \{\"wandb\": \[run id, \.\.\.\]"):
            build_logger(with_train(config, resume=True))


class TestSystemEvents:
    def test_a_run_samples_the_machine_while_it_trains(self, config: dict[str, Any], run_dir: Path) -> None:
        """logging.system_interval_s: system records in the JSONL after train_start; stopped by close."""
        trainer, info = build_runtime(with_logging(config, system_interval_s=0.01))
        seen = threading.Event()
        trainer.logger.hooks.append(lambda event, payload: event == "system" and seen.set())
        try:
            trainer.fit()
            assert seen.wait(60)  # the sampler's thread emits within its interval; 60 s only if it is stuck
        finally:
            fit_and_close_steps(trainer, info)
        assert info.monitor is not None
        assert not info.monitor._thread.is_alive()  # type: ignore[union-attr]
        events = [r["event"] for r in read_jsonl(run_dir / "metrics.jsonl")]
        assert "system" in events
        assert events.index("system") > events.index("train_start")
        system = next(r for r in read_jsonl(run_dir / "metrics.jsonl") if r["event"] == "system")
        assert system["rss_bytes"] > 0
        assert system["host_memory_total_bytes"] > 0

    def test_no_system_record_comes_before_train_start(self, config: dict[str, Any], run_dir: Path) -> None:
        """The sampler starts once train_start is written, however long the fit's start takes (a
        callback of the user's): train_start stays the run's first record, so a resumed run's samples
        are never read back as the previous process's (its segment, its restart time)."""
        trainer, info = build_runtime(with_logging(config, system_interval_s=0.01))
        seen = threading.Event()
        trainer.logger.hooks.append(lambda event, payload: event == "system" and seen.set())
        sampling: list[bool] = []
        others = set(threading.enumerate())  # an earlier test's sampler, ending by itself, is not this run's

        def slow_start(_: Any) -> None:  # the user's, after the runtime's own at_fit_start callbacks
            started = set(threading.enumerate()) - others
            sampling.append(any(thread.name == "speedtronic-system" for thread in started))
            if sampling[-1]:
                assert seen.wait(60)  # a sample taken while the fit is still starting

        trainer.at_fit_start.append(slow_start)
        try:
            trainer.fit()
            assert seen.wait(60)  # the sampler's thread emits within its interval; 60 s only if it is stuck
        finally:
            fit_and_close_steps(trainer, info)
        assert sampling == [False]
        events = [r["event"] for r in read_jsonl(run_dir / "metrics.jsonl")]
        assert events[0] == "train_start"
        assert "system" in events

    def test_null_runs_no_sampler(self, config: dict[str, Any]) -> None:
        """system_interval_s: null: no monitor, no system records."""
        _, info = train_from_config(with_train(with_logging(config, system_interval_s=None), steps=2))
        assert info.monitor is None
        assert "system" not in {r["event"] for r in read_jsonl(info.run_dir / "metrics.jsonl")}


def fit_and_close_steps(trainer: Any, info: Any) -> None:
    """What fit_and_close does after fit(): the monitor, then the logger, then the run directory."""
    info.monitor.close()
    trainer.logger.close()
    info.run.release()


class TestTrainFromConfigCloses:
    @pytest.fixture(autouse=True)
    def _warm(self, config: dict[str, Any], tmp_path: Path) -> None:
        """One run first, so the descriptors torch opens once per process are open before we count."""
        train_from_config({**config, "run_dir": str(tmp_path / "warm-up")})

    def test_no_file_is_left_open(self, config: dict[str, Any], run_dir: Path) -> None:
        """After train_from_config, every descriptor it opened (text log, JSONL, a hook's file) is closed."""
        config = with_logging(
            config, file="{run_dir}/log.txt", hooks=[{"type": JOURNAL, "path": "{run_dir}/j"}]
        )
        before = open_fds()
        train_from_config(config)
        assert open_fds() == before
        assert journal(run_dir / "j")[-1] == {"event": "close"}

    def test_no_file_is_left_open_when_training_raises(self, config: dict[str, Any], run_dir: Path) -> None:
        """A hook failing under strict_hooks ends training; the logger and every hook are still closed."""
        config = with_logging(
            config,
            file="{run_dir}/log.txt",
            strict_hooks=True,
            hooks=[{"type": JOURNAL, "path": "{run_dir}/j", "fail_on": "train_step"}],
        )
        before = open_fds()
        with pytest.raises(HookError, match="JournalHook fails on train_step"):
            train_from_config(config)
        assert open_fds() == before
        # the run still ends with train_end, status failed, before the hooks are closed
        assert [e["event"] for e in journal(run_dir / "j")][-3:] == ["train_step", "train_end", "close"]

    def test_repeated_runs_leave_nothing_open(self, config: dict[str, Any], tmp_path: Path) -> None:
        """Three programmatic runs in a row: the descriptor table is as it was."""
        before = open_fds()
        for n in range(3):
            train_from_config(with_train({**config, "run_dir": str(tmp_path / f"r{n}")}, steps=2))
        assert open_fds() == before
