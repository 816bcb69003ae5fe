"""SpeedtronicLogger on a real ``lightning.pytorch.Trainer``: a tiny regression model on the CPU."""

from __future__ import annotations

import io
import subprocess
import sys
from argparse import Namespace
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from speedtronic.integrations.lightning import SpeedtronicLogger
from speedtronic.profiling import MetricLogger
from tests.conftest import Journal, read_jsonl


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
    settings.update(changes)
    trainer = pl.Trainer(**settings)
    trainer.fit(TinyRegressor(), loader(64, 0, 4), loader(16, 1, 8))
    return trainer


def steps_of(records: list[dict[str, Any]], event: str) -> list[int]:
    return [r["step"] for r in records if r["event"] == event]


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
        assert (end["event"], end["status"], end["step"]) == ("train_end", "completed", 7)
        # Lightning hands its loggers the 0-based step (batches stepped before the one logging), as
        # its TensorBoard and CSV loggers write it; a checkpoint's step is trainer.global_step.
        assert steps_of(records, "train_step") == [1, 3, 5, 7]
        assert steps_of(records, "eval") == [3, 7]
        assert steps_of(records, "checkpoint") == [4, 8]
        assert len(records) == 11

    def test_records_hold_the_metrics(self, tmp_path: Path) -> None:
        """train_step has train_loss as the catalog's loss, and epoch; eval the bare names, split, epoch;
        hyperparams the module's saved hyperparameters; checkpoint the file written."""
        fit(tmp_path, SpeedtronicLogger(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO()))
        records = read_jsonl(tmp_path / "metrics.jsonl")
        assert records[0]["config"] == {"lr": 0.05, "hidden": 4}
        step = records[2]
        assert set(step) >= {"step", "loss", "epoch"}
        assert "train_loss" not in step
        assert isinstance(step["loss"], float)
        assert records[-1]["final_loss"] == [r for r in records if r["event"] == "train_step"][-1]["loss"]
        evaluation = next(r for r in records if r["event"] == "eval")
        assert evaluation["split"] == "val"
        assert evaluation["epoch"] == 0
        assert {"loss", "mae"} <= evaluation.keys()
        assert "val_loss" not in evaluation
        checkpoint = next(r for r in records if r["event"] == "checkpoint")
        assert Path(checkpoint["path"]).is_file()
        assert "step=4" in checkpoint["path"]

    def test_validate_and_test_after_fit_reach_the_hooks(self, tmp_path: Path) -> None:
        """trainer.validate() and test() after fit(): their evals reach the same file and the same
        TensorBoard hook (no hook_error), and the unchanged hyperparameters are recorded once."""
        from speedtronic.integrations import TensorboardHook
        from tests.conftest import tensorboard_scalars

        speedtronic_logger = SpeedtronicLogger(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO(),
                                               hooks=[TensorboardHook(tmp_path / "tb")])
        trainer = fit(tmp_path, speedtronic_logger)
        trainer.validate(trainer.lightning_module, dataloaders=loader(16, 1, 8), verbose=False)
        trainer.test(trainer.lightning_module, dataloaders=loader(16, 2, 8), verbose=False)
        speedtronic_logger.experiment.close()

        records = read_jsonl(tmp_path / "metrics.jsonl")
        assert [r["event"] for r in records].count("hyperparams") == 1
        assert not any(r["event"] == "hook_error" for r in records)
        assert [r["event"] for r in records].count("train_end") == 1
        last = records[-1]
        assert (last["event"], last["split"]) == ("eval", "test")
        assert isinstance(last["loss"], float)
        scalars = tensorboard_scalars(tmp_path / "tb")
        assert len(scalars["eval/loss"]) == 2 + 1 + 1  # two in fit, validate(), test()
        assert "train_step/loss" in scalars

    def test_new_hyperparameters_are_recorded_again(self, tmp_path: Path) -> None:
        """A second fit() with other hyperparameters records them: only repeats are left out."""
        speedtronic_logger = SpeedtronicLogger(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO())
        speedtronic_logger.log_hyperparams({"lr": 0.1})
        speedtronic_logger.log_hyperparams({"lr": 0.1})
        speedtronic_logger.log_hyperparams(Namespace(lr=0.2))
        speedtronic_logger.experiment.close()
        assert [r["config"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [{"lr": 0.1}, {"lr": 0.2}]

    def test_summarize_and_plot_read_a_lightning_run(self, tmp_path: Path) -> None:
        """summarize shows the training loss and "completed"; plot draws the train loss, not only eval."""
        from speedtronic.runs.plot import plot_runs
        from speedtronic.runs.summary import summarize_run

        speedtronic_logger = SpeedtronicLogger(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO())
        fit(tmp_path, speedtronic_logger)
        speedtronic_logger.experiment.close()
        summary = summarize_run(tmp_path / "metrics.jsonl")
        assert (summary.finished, summary.status, summary.segments) == (True, "completed", 1)
        assert summary.loss_last is not None
        assert summary.eval_loss_last is not None
        drawn = plot_runs([tmp_path / "metrics.jsonl"], tmp_path / "plot.png", keys=["loss"])
        assert [(s.event, len(s.y)) for s in drawn.series] == [("train_step", 4), ("eval", 2)]

    def test_a_failed_fit_ends_with_status_failed(self, tmp_path: Path) -> None:
        """An exception in training_step: train_end says failed, with the last loss logged."""

        class Exploding(TinyRegressor):
            def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
                if self.global_step == 3:
                    raise RuntimeError("boom")
                return super().training_step(batch, index)

        speedtronic_logger = SpeedtronicLogger(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO())
        trainer = pl.Trainer(max_steps=8, log_every_n_steps=1, accelerator="cpu", devices=1,
                             logger=speedtronic_logger, enable_progress_bar=False, enable_model_summary=False,
                             enable_checkpointing=False, default_root_dir=str(tmp_path))
        with pytest.raises(RuntimeError, match="boom"):
            trainer.fit(Exploding(), loader(64, 0, 4))
        speedtronic_logger.experiment.close()
        end = read_jsonl(tmp_path / "metrics.jsonl")[-1]
        assert (end["event"], end["status"], end["step"]) == ("train_end", "failed", 2)

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
        speedtronic_logger = SpeedtronicLogger(name="exp", version="v2", stream=io.StringIO())
        assert (speedtronic_logger.name, speedtronic_logger.version) == ("exp", "v2")
        logger = MetricLogger(stream=io.StringIO())
        with pytest.raises(TypeError, match="not both; got logger= and json_file"):
            SpeedtronicLogger(logger, json_file=tmp_path / "m.jsonl")
        with pytest.raises(TypeError, match=r"expected a MetricLogger, got 'm\.jsonl'"):
            SpeedtronicLogger("m.jsonl")  # type: ignore[arg-type]
        logger.close()


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
