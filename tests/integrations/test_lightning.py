"""SpeedtronicLogger on a real ``lightning.pytorch.Trainer``: a tiny regression model on the CPU."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from speedtronic.integrations.lightning import SpeedtronicLogger, StepTimer
from speedtronic.profiling import MetricLogger
from tests.helpers import Journal, assert_health_split, read_jsonl


class TinyRegressor(pl.LightningModule):
    def __init__(self, lr: float = 0.05, hidden: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.linear = torch.nn.Linear(hidden, 1)

    def step_loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.linear(x).squeeze(-1), y)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
        loss = self.step_loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> None:
        self.log("val_loss", self.step_loss(batch))
        self.log("val/mae", (self.linear(batch[0]).squeeze(-1) - batch[1]).abs().mean())

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> None:
        self.log("test_loss", self.step_loss(batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def loader(n: int, seed: int, batch_size: int) -> DataLoader[tuple[torch.Tensor, ...]]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return DataLoader(TensorDataset(x, x @ torch.tensor([1.0, -2.0, 0.5, 3.0])), batch_size=batch_size)


def fit(tmp_path: Path, speedtronic_logger: SpeedtronicLogger, **changes: Any) -> pl.Trainer:
    settings: dict[str, Any] = {
        "max_steps": 8,
        "log_every_n_steps": 2,
        "val_check_interval": 4,
        "num_sanity_val_steps": 0,
        "accelerator": "cpu",
        "devices": 1,
        "logger": speedtronic_logger,
        "default_root_dir": str(tmp_path),
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "callbacks": [
            pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=4, save_top_k=-1)
        ],
    }
    model = changes.pop("model", None) or TinyRegressor()
    train_data = changes.pop("train_data", None) or loader(64, 0, 4)
    settings.update(changes)
    trainer = pl.Trainer(**settings)
    trainer.fit(model, train_data, loader(16, 1, 8))
    return trainer


def steps_of(records: list[dict[str, Any]], event: str) -> list[int]:
    return [r["step"] for r in records if r["event"] == event]


class SlowRegressor(TinyRegressor):
    """Each training and validation step sleeps ``pause`` seconds first: compute (or evaluation)
    time a clock can't miss."""

    def __init__(self, pause: float) -> None:
        super().__init__()
        self.pause = pause

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
        time.sleep(self.pause)
        return super().training_step(batch, index)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> None:
        time.sleep(self.pause)
        super().validation_step(batch, index)


class SlowItems(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """A regression dataset whose items each sleep ``pause`` seconds: data wait."""

    def __init__(self, n: int, pause: float) -> None:
        x = torch.randn(n, 4, generator=torch.Generator().manual_seed(0))
        self.x, self.y, self.pause = x, x @ torch.tensor([1.0, -2.0, 0.5, 3.0]), pause

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.pause)
        return self.x[index], self.y[index]


def timed_fit(tmp_path: Path, pause: float, **changes: Any) -> list[dict[str, Any]]:
    """A fit with StepTimer, a sleeping dataset (4 items a batch) and sleeping steps: its records."""
    speedtronic_logger = SpeedtronicLogger(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO())
    callbacks = [
        StepTimer(speedtronic_logger),
        pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=4, save_top_k=-1),
    ]
    fit(
        tmp_path,
        speedtronic_logger,
        model=SlowRegressor(pause),
        train_data=DataLoader(SlowItems(64, pause), batch_size=4),
        callbacks=callbacks,
        **changes,
    )
    speedtronic_logger.experiment.close()
    return read_jsonl(tmp_path / "metrics.jsonl")


class TestSpeedtronicLogger:
    def test_a_fit_is_recorded_as_the_catalog_events(self, tmp_path: Path) -> None:
        """hyperparams first, train_start, a train_step per log_every_n_steps, an eval per validation,
        a checkpoint per save, train_end; finalize leaves the logger and its hooks open."""
        journal: list[str] = []
        speedtronic_logger = SpeedtronicLogger(
            json_file=tmp_path / "metrics.jsonl", stream=io.StringIO(), hooks=[Journal("hook", journal)]
        )
        fit(tmp_path, speedtronic_logger)
        assert "hook close" not in journal  # open for a later validate() or test()
        speedtronic_logger.experiment.close()
        assert journal[-1] == "hook close"
        records = read_jsonl(tmp_path / "metrics.jsonl")
        assert [r["event"] for r in records[:2]] == ["hyperparams", "train_start"]
        end = records[-1]
        assert (end["event"], end["status"], end["step"]) == ("train_end", "completed", 8)
        # Every record at trainer.global_step: Lightning hands its loggers, during fit(), the batches
        # stepped before the one logging (1, 3, 5, 7); the adapter counts that batch too.
        assert steps_of(records, "train_step") == [2, 4, 6, 8]
        assert steps_of(records, "eval") == [4, 8]
        assert steps_of(records, "checkpoint") == [4, 8]
        assert len(records) == 11

    def test_records_hold_the_metrics(self, tmp_path: Path) -> None:
        """train_step has train_loss as logged, and epoch; eval the names as logged, split, epoch;
        hyperparams the module's saved hyperparameters; checkpoint the file written."""
        fit(tmp_path, SpeedtronicLogger(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO()))
        records = read_jsonl(tmp_path / "metrics.jsonl")
        assert records[0]["config"] == {"lr": 0.05, "hidden": 4}
        step = records[2]
        assert set(step) >= {"step", "train_loss", "epoch"}
        assert "loss" not in step
        assert isinstance(step["train_loss"], float)
        last = [r for r in records if r["event"] == "train_step"][-1]
        assert records[-1]["final_loss"] == last["train_loss"]
        evaluation = next(r for r in records if r["event"] == "eval")
        assert evaluation["split"] == "val"
        assert evaluation["epoch"] == 0
        assert {"val_loss", "val/mae"} <= evaluation.keys()
        assert "loss" not in evaluation
        checkpoint = next(r for r in records if r["event"] == "checkpoint")
        assert Path(checkpoint["path"]).is_file()
        assert "step=4" in checkpoint["path"]

    def test_validate_and_test_after_fit_reach_the_hooks(self, tmp_path: Path) -> None:
        """trainer.validate() and test() after fit(): their evals reach the same file and the same
        TensorBoard hook (no hook_error), the test split as a series of its own, and the unchanged
        hyperparameters are recorded once."""
        from speedtronic.integrations import TensorboardHook
        from tests.helpers import tensorboard_scalars

        speedtronic_logger = SpeedtronicLogger(
            json_file=tmp_path / "metrics.jsonl",
            stream=io.StringIO(),
            hooks=[TensorboardHook(tmp_path / "tb")],
        )
        trainer = fit(tmp_path, speedtronic_logger)
        trainer.validate(trainer.lightning_module, dataloaders=loader(16, 1, 8), verbose=False)
        trainer.test(trainer.lightning_module, dataloaders=loader(16, 2, 8), verbose=False)
        speedtronic_logger.experiment.close()

        records = read_jsonl(tmp_path / "metrics.jsonl")
        assert [r["event"] for r in records].count("hyperparams") == 1
        assert not any(r["event"] == "hook_error" for r in records)
        assert [r["event"] for r in records].count("train_end") == 1
        last = records[-1]
        assert (last["event"], last["split"], last["step"]) == ("eval", "test", 8)
        assert isinstance(last["test_loss"], float)
        scalars = tensorboard_scalars(tmp_path / "tb")
        assert [step for step, _ in scalars["eval/val_loss"]] == [4, 8, 8]  # two in fit, validate()
        assert [step for step, _ in scalars["eval/test_loss"]] == [8]
        assert "train_step/train_loss" in scalars

    def test_new_hyperparameters_are_recorded_again(self, tmp_path: Path) -> None:
        """A second fit() with other hyperparameters records them: only repeats are left out."""
        speedtronic_logger = SpeedtronicLogger(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO())
        speedtronic_logger.log_hyperparams({"lr": 0.1})
        speedtronic_logger.log_hyperparams({"lr": 0.1})
        speedtronic_logger.log_hyperparams(Namespace(lr=0.2))
        speedtronic_logger.experiment.close()
        assert [r["config"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [{"lr": 0.1}, {"lr": 0.2}]

    def test_summarize_reads_a_lightning_run(self, tmp_path: Path) -> None:
        """summarize finds the training loss (train_loss, as logged) and the validation loss by their
        role, and says "completed"."""
        pytest.importorskip("speedtronic.runs.roles", reason="the role table of the read-back tools")
        from speedtronic.runs.summary import summarize_run

        speedtronic_logger = SpeedtronicLogger(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO())
        fit(tmp_path, speedtronic_logger)
        speedtronic_logger.experiment.close()
        records = read_jsonl(tmp_path / "metrics.jsonl")
        summary = summarize_run(tmp_path / "metrics.jsonl")
        assert (summary.finished, summary.status, summary.segments) == (True, "completed", 1)
        assert summary.loss_last == [r["train_loss"] for r in records if "train_loss" in r][-1]
        assert summary.eval_loss_last == [r["val_loss"] for r in records if "val_loss" in r][-1]

    def test_a_failed_fit_ends_with_status_failed(self, tmp_path: Path) -> None:
        """An exception in training_step: train_end says failed, with the last loss logged."""

        class Exploding(TinyRegressor):
            def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
                if self.global_step == 3:
                    raise RuntimeError("boom")
                return super().training_step(batch, index)

        speedtronic_logger = SpeedtronicLogger(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO())
        trainer = pl.Trainer(
            max_steps=8,
            log_every_n_steps=1,
            accelerator="cpu",
            devices=1,
            logger=speedtronic_logger,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            default_root_dir=str(tmp_path),
        )
        with pytest.raises(RuntimeError, match="boom"):
            trainer.fit(Exploding(), loader(64, 0, 4))
        speedtronic_logger.experiment.close()
        end = read_jsonl(tmp_path / "metrics.jsonl")[-1]
        assert (end["event"], end["status"], end["step"]) == ("train_end", "failed", 3)  # 3 steps done

    def test_a_given_logger_stays_open(self, tmp_path: Path) -> None:
        """With a MetricLogger passed in, finalize leaves it open: its owner closes it."""
        logger = MetricLogger(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO())
        fit(tmp_path, SpeedtronicLogger(logger))
        assert not logger.closed
        logger.emit("after_fit", {"ok": True})
        logger.close()
        assert read_jsonl(tmp_path / "metrics.jsonl")[-1]["event"] == "after_fit"

    def test_name_version_and_logger_arguments(self, tmp_path: Path) -> None:
        """name and version are what was given; a logger and arguments together are refused."""
        speedtronic_logger = SpeedtronicLogger(
            save_dir=tmp_path, name="exp", version="v2", stream=io.StringIO()
        )
        assert (speedtronic_logger.name, speedtronic_logger.version) == ("exp", "v2")
        assert speedtronic_logger.log_dir == str(tmp_path / "exp" / "v2")
        logger = MetricLogger(stream=io.StringIO())
        with pytest.raises(TypeError, match="not both; got logger= and json_file"):
            SpeedtronicLogger(logger, json_file=tmp_path / "m.jsonl")
        with pytest.raises(TypeError, match=r"expected a MetricLogger, got 'm\.jsonl'"):
            SpeedtronicLogger("m.jsonl")  # type: ignore[arg-type]
        logger.close()


class StepAndEpochRegressor(TinyRegressor):
    """Logs its loss on_step and on_epoch: Lightning names them train_loss_step and train_loss_epoch."""

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
        loss = self.step_loss(batch)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss


class TestStepTimer:
    def test_train_steps_say_where_their_time_went(self, tmp_path: Path) -> None:
        """Each logged train_step has step_time_s, data_wait_s and compute_s: the dataset's sleeps are
        data wait, the training steps' compute, and both fit in the step."""
        pause = 0.005
        records = timed_fit(tmp_path, pause)
        steps = [r for r in records if r["event"] == "train_step"]
        assert [r["step"] for r in steps] == [2, 4, 6, 8]
        for record in steps:
            assert record["data_wait_s"] >= 4 * pause
            assert record["compute_s"] >= pause
            assert record["data_wait_s"] + record["compute_s"] <= record["step_time_s"]

    def test_an_accumulated_step_adds_up_its_batches(self, tmp_path: Path) -> None:
        """accumulate_grad_batches=2: a step is two batches, two draws and two forward+backward passes."""
        pause = 0.005
        records = timed_fit(tmp_path, pause, accumulate_grad_batches=2)
        steps = [r for r in records if r["event"] == "train_step"]
        assert [r["step"] for r in steps] == [2, 4, 6, 8]
        for record in steps:
            assert record["data_wait_s"] >= 2 * 4 * pause
            assert record["compute_s"] >= 2 * pause
            assert record["data_wait_s"] + record["compute_s"] <= record["step_time_s"]

    def test_validation_and_checkpoints_carry_their_time(self, tmp_path: Path) -> None:
        """eval has eval_s (the validation run: 2 sleeping batches), checkpoint save_s."""
        pause = 0.02
        records = timed_fit(tmp_path, pause)
        evals = [r for r in records if r["event"] == "eval"]
        assert len(evals) == 2
        assert all(r["eval_s"] >= 2 * pause for r in evals)
        checkpoints = [r for r in records if r["event"] == "checkpoint"]
        assert len(checkpoints) == 2
        assert all(r["save_s"] > 0 for r in checkpoints)

    def test_only_the_steps_own_record_carries_its_times(self, tmp_path: Path) -> None:
        """With a LearningRateMonitor, a step has two train_step records (lr-SGD first, then the
        step's metrics): only the step's own carries its times, once."""
        speedtronic_logger = SpeedtronicLogger(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO())
        callbacks = [StepTimer(speedtronic_logger), pl.callbacks.LearningRateMonitor()]
        fit(
            tmp_path, speedtronic_logger, callbacks=callbacks, log_every_n_steps=1, enable_checkpointing=False
        )
        speedtronic_logger.experiment.close()
        steps = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["event"] == "train_step"]
        timed = [r["step"] for r in steps if "step_time_s" in r]
        assert timed == list(range(1, 9))
        assert all("lr-SGD" not in r for r in steps if "step_time_s" in r)
        assert {r["step"] for r in steps if "lr-SGD" in r} == set(range(1, 9))

    def test_without_the_timer_nothing_is_timed(self, tmp_path: Path) -> None:
        """A SpeedtronicLogger alone sees no batch: its records hold no timing keys."""
        fit(tmp_path, SpeedtronicLogger(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO()))
        timing = {"step_time_s", "data_wait_s", "compute_s", "eval_s", "save_s"}
        assert not any(timing & r.keys() for r in read_jsonl(tmp_path / "metrics.jsonl"))

    def test_health_splits_a_lightning_run(self, tmp_path: Path) -> None:
        """speedtronic.runs.health reads the timing keys of a Lightning run: goodput, and the lost time
        split into data waiting, evaluation and checkpoints."""
        pause = 0.005
        timed_fit(tmp_path, pause, log_every_n_steps=1)
        assert_health_split(tmp_path / "metrics.jsonl", 8, pause)

    def test_a_timer_needs_a_speedtronic_logger(self, tmp_path: Path) -> None:
        """StepTimer names what it expected."""
        with pytest.raises(TypeError, match=r"StepTimer\(logger=\.\.\.\): expected a SpeedtronicLogger"):
            StepTimer(MetricLogger(stream=io.StringIO()))  # type: ignore[arg-type]


class TestNamesStepsAndDirectories:
    def test_metrics_keep_lightnings_names(self, tmp_path: Path) -> None:
        """on_step/on_epoch's train_loss_step and train_loss_epoch, LearningRateMonitor's lr-SGD: in the
        JSONL and in TensorBoard under the names Lightning logged, at global steps."""
        from speedtronic.integrations import TensorboardHook
        from tests.helpers import tensorboard_scalars

        speedtronic_logger = SpeedtronicLogger(
            save_dir=tmp_path, stream=io.StringIO(), hooks=[TensorboardHook(tmp_path / "tb")]
        )
        trainer = pl.Trainer(
            max_epochs=2,
            log_every_n_steps=2,
            accelerator="cpu",
            devices=1,
            logger=speedtronic_logger,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            callbacks=[pl.callbacks.LearningRateMonitor()],
        )
        trainer.fit(StepAndEpochRegressor(), loader(16, 0, 4))
        speedtronic_logger.experiment.close()
        records = read_jsonl(Path(speedtronic_logger.log_dir) / "metrics.jsonl")
        keys = {key for r in records if r["event"] == "train_step" for key in r}
        assert {"train_loss_step", "train_loss_epoch", "lr-SGD", "epoch"} <= keys
        assert not {"loss", "lr"} & keys
        assert [r["step"] for r in records if "train_loss_epoch" in r] == [4, 8]  # epoch ends
        scalars = tensorboard_scalars(tmp_path / "tb")
        assert [step for step, _ in scalars["train_step/train_loss_epoch"]] == [4, 8]
        assert [step for step, _ in scalars["train_step/train_loss_step"]] == [2, 4, 6, 8]
        assert "train_step/lr-SGD" in scalars

    def test_each_run_gets_a_directory_of_its_own(self, tmp_path: Path) -> None:
        """Two fits with default arguments: version_0 then version_1 under <save_dir>/speedtronic, each
        with its JSONL and Lightning's checkpoints; nothing shared."""
        log_dirs = []
        for _ in range(2):
            speedtronic_logger = SpeedtronicLogger(save_dir=tmp_path, stream=io.StringIO())
            fit(tmp_path, speedtronic_logger, callbacks=[], enable_checkpointing=True)
            speedtronic_logger.experiment.close()
            log_dirs.append(Path(speedtronic_logger.log_dir))
        assert log_dirs == [tmp_path / "speedtronic" / "version_0", tmp_path / "speedtronic" / "version_1"]
        assert [speedtronic_logger.save_dir, speedtronic_logger.version] == [str(tmp_path), 1]
        for log_dir in log_dirs:
            assert read_jsonl(log_dir / "metrics.jsonl")[-1]["event"] == "train_end"
            assert [p.name for p in (log_dir / "checkpoints").iterdir()] == ["epoch=0-step=8.ckpt"]

    def test_fit_and_test_leave_the_tensorboard_file_complete(self, tmp_path: Path) -> None:
        """Right after trainer.fit() and trainer.test() return (the logger still open), the
        TensorboardHook's event file holds every point: finalize flushes the hooks."""
        from speedtronic.integrations import TensorboardHook
        from tests.helpers import tensorboard_scalars

        hook = TensorboardHook(tmp_path / "tb", flush_secs=3600)  # only a flush writes the file
        speedtronic_logger = SpeedtronicLogger(save_dir=tmp_path, stream=io.StringIO(), hooks=[hook])
        trainer = fit(tmp_path, speedtronic_logger)
        assert len(tensorboard_scalars(tmp_path / "tb")["train_step/train_loss"]) == 4
        trainer.test(trainer.lightning_module, dataloaders=loader(16, 2, 8), verbose=False)
        assert len(tensorboard_scalars(tmp_path / "tb")["eval/test_loss"]) == 1
        speedtronic_logger.experiment.close()


def test_wandb_logger_and_a_wandb_hook_share_a_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lightning's WandbLogger and a WandbHook on its run (run=wandb_logger.experiment), read back from
    the .wandb file: Lightning's metrics against trainer/global_step, ours against step, no name
    logged by both, and each validation once per tool."""
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    from speedtronic.integrations import WandbHook
    from tests.wandb_files import read_wandb_run

    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("DIR", "CACHE_DIR", "CONFIG_DIR", "DATA_DIR"):
        (tmp_path / name.lower()).mkdir()
        monkeypatch.setenv(f"WANDB_{name}", str(tmp_path / name.lower()))
    wandb_logger = WandbLogger(project="speedtronic-tests", save_dir=str(tmp_path / "dir"), offline=True)
    hook = WandbHook(run=wandb_logger.experiment)
    speedtronic_logger = SpeedtronicLogger(save_dir=tmp_path, stream=io.StringIO(), hooks=[hook])
    fit(tmp_path, [wandb_logger, speedtronic_logger])
    speedtronic_logger.experiment.close()
    assert wandb.run is hook.run  # still open: the run is the WandbLogger's to finish
    wandb.finish()

    recorded = read_wandb_run(Path(hook.run.dir).parent)
    assert recorded.step_metrics["*"] == "trainer/global_step"  # Lightning's, for its names
    ours = [row for row in recorded.history if "step" in row]
    theirs = [row for row in recorded.history if "trainer/global_step" in row]
    assert len(ours) + len(theirs) == len(recorded.history)
    names = {key for row in ours for key in row if not key.startswith("_")} - {"step"}
    their_names = {key for row in theirs for key in row if not key.startswith("_")}
    assert not names & their_names
    assert {recorded.step_metrics[name] for name in names} == {"step"}
    assert {"train_loss", "val_loss"} <= their_names
    assert {"train_step/train_loss", "eval/val_loss"} <= names
    assert [row["trainer/global_step"] for row in theirs if "val_loss" in row] == [3, 7]  # Lightning's
    assert [row["step"] for row in ours if "eval/val_loss" in row] == [4, 8]  # global_step


def test_only_rank_zero_logs(tmp_path: Path) -> None:
    """On a rank other than zero (Lightning's rank_zero_only.rank), no method writes and no
    MetricLogger is built."""
    code = (
        "import io, sys\n"
        "from lightning.pytorch.utilities import rank_zero_only\n"
        "rank_zero_only.rank = 1\n"
        "from speedtronic.integrations.lightning import SpeedtronicLogger\n"
        f"logger = SpeedtronicLogger(json_file={str(tmp_path / 'metrics.jsonl')!r})\n"
        "logger.log_hyperparams({'lr': 1.0}); logger.log_metrics({'loss': 1.0}, step=1)\n"
        "logger.finalize('success')\n"
        "print(type(logger.experiment).__name__)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("DummyExperiment")  # Lightning's no-op experiment
    assert not (tmp_path / "metrics.jsonl").exists()


class TestTheProgressBar:
    @pytest.mark.parametrize("bar", ["rich", "tqdm"])
    def test_v_num_is_the_run_number(
        self, tmp_path: Path, bar: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Lightning's own progress bars (Rich and tqdm) show v_num: 0, not 0.000."""
        if bar == "rich":
            pytest.importorskip("rich")
            console = io.StringIO()
            callback: Any = pl.callbacks.RichProgressBar(
                console_kwargs={"file": console, "force_terminal": True, "width": 250}
            )
        else:
            callback = pl.callbacks.TQDMProgressBar()
        speedtronic_logger = SpeedtronicLogger(save_dir=tmp_path, stream=io.StringIO())
        fit(tmp_path, speedtronic_logger, enable_progress_bar=True, callbacks=[callback])
        shown = console.getvalue() if bar == "rich" else capsys.readouterr().out + capsys.readouterr().err
        assert re.search(r"v_num[:=] ?0\b(?!\.)", shown), shown[-500:]
        assert "v_num: 0.000" not in shown
        assert "v_num=0.000" not in shown
        assert speedtronic_logger.version == 0
        assert speedtronic_logger.log_dir == str(tmp_path / "speedtronic" / "version_0")


class TestFabric:
    def test_fabric_log_dict_is_recorded_at_the_step_it_names(self, tmp_path: Path) -> None:
        """fabric.log_dict(step=...) beside Fabric's own CSVLogger: train_step and eval records at
        the steps the CSV holds (no one-step shift meant for Trainer.fit())."""
        import csv

        from lightning.fabric import Fabric
        from lightning.fabric.loggers import CSVLogger

        speedtronic_logger = SpeedtronicLogger(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO())
        csv_logger = CSVLogger(tmp_path / "csv", name="fabric")
        fabric = Fabric(accelerator="cpu", devices=1, loggers=[csv_logger, speedtronic_logger])
        for step in (2, 4, 6):
            fabric.log_dict({"loss": 1.0 / step}, step=step)
        fabric.log("val_loss", 0.5, step=6)
        csv_logger.finalize("success")
        speedtronic_logger.finalize("success")
        speedtronic_logger.experiment.close()

        with open(Path(csv_logger.log_dir) / "metrics.csv", newline="") as file:
            rows = list(csv.DictReader(file))
        csv_steps = [int(row["step"]) for row in rows if row["loss"]]
        assert csv_steps == [2, 4, 6]
        records = read_jsonl(tmp_path / "metrics.jsonl")
        assert steps_of(records, "train_step") == csv_steps
        assert [r["loss"] for r in records if r["event"] == "train_step"] == [0.5, 0.25, 1.0 / 6]
        assert [(r["step"], r["split"], r["val_loss"]) for r in records if r["event"] == "eval"] == [
            (6, "val", 0.5)
        ]
        assert [int(row["step"]) for row in rows if row["val_loss"]] == [6]
        assert records[-1]["event"] == "train_end"
        assert records[-1]["step"] == 6
