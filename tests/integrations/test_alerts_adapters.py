"""The framework adapters' alerts: default rules on, and a stop on an alert through each framework's
own mechanism, on real Hugging Face, Lightning and torchtune-style runs on the CPU."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader, TensorDataset
from transformers import Trainer, TrainingArguments

from speedtronic.integrations import torchtune as tt
from speedtronic.integrations.lightning import SpeedtronicLogger, StopOnAlert
from speedtronic.integrations.transformers import SpeedtronicCallback
from tests.helpers import read_jsonl

NAN_FROM = 5
"""The training forward pass from which the models' loss is NaN."""


class GoesNaN(torch.nn.Module):
    """A tiny regressor whose training loss turns NaN at its NAN_FROM-th forward pass."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)
        self.calls = 0

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        prediction = self.linear(x).squeeze(-1)
        loss = torch.nn.functional.mse_loss(prediction, labels)
        if self.training:
            self.calls += 1
            if self.calls >= NAN_FROM:
                loss = loss * math.nan
        return {"loss": loss, "logits": prediction}


def data(n: int) -> list[dict[str, torch.Tensor]]:
    x = torch.randn(n, 4, generator=torch.Generator().manual_seed(0))
    return [{"x": x[i], "labels": x[i].sum()} for i in range(n)]


def alerts_and_end(path: Path) -> tuple[list[tuple[str, Any]], list[int]]:
    records = read_jsonl(path)
    alerts = [(r["rule"], r["step"]) for r in records if r["event"] == "alert"]
    steps = [r["step"] for r in records if r["event"] == "train_step"]
    return alerts, steps


class TestTransformers:
    def test_a_nan_stops_the_trainer_through_should_training_stop(self, tmp_path: Path) -> None:
        """A callback building its logger runs the default rules; on_alert="stop" ends train() at the
        NaN's step (the Trainer's own stop: its checkpoint and on_train_end follow)."""
        callback = SpeedtronicCallback(on_alert="stop", json_file=tmp_path / "m.jsonl", stream=io.StringIO())
        args = TrainingArguments(
            output_dir=str(tmp_path / "out"), max_steps=20, logging_steps=1, save_strategy="no",
            per_device_train_batch_size=4, learning_rate=0.01, report_to="none", use_cpu=True,
            disable_tqdm=True, seed=0, logging_nan_inf_filter=False,
        )  # fmt: skip
        trainer = Trainer(model=GoesNaN(), args=args, train_dataset=data(64), callbacks=[callback])
        trainer.train()
        callback.logger.close()
        alerts, steps = alerts_and_end(tmp_path / "m.jsonl")
        assert alerts == [("non_finite", NAN_FROM)]
        assert trainer.state.global_step == NAN_FROM
        assert steps[-1] == NAN_FROM
        assert callback.alert is not None
        assert callback.alert.step == NAN_FROM

    def test_on_alert_log_trains_on(self, tmp_path: Path) -> None:
        """The default, log: the alert is a record and training reaches max_steps."""
        callback = SpeedtronicCallback(json_file=tmp_path / "m.jsonl", stream=io.StringIO())
        args = TrainingArguments(
            output_dir=str(tmp_path / "out"), max_steps=8, logging_steps=1, save_strategy="no",
            per_device_train_batch_size=4, report_to="none", use_cpu=True, disable_tqdm=True,
            logging_nan_inf_filter=False,
        )  # fmt: skip
        trainer = Trainer(model=GoesNaN(), args=args, train_dataset=data(64), callbacks=[callback])
        trainer.train()
        callback.logger.close()
        assert trainer.state.global_step == 8
        assert alerts_and_end(tmp_path / "m.jsonl")[0] == [("non_finite", NAN_FROM)]


class NaNModule(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = GoesNaN()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
        loss = self.model(batch[0], batch[1])["loss"]
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class FiniteModule(pl.LightningModule):
    """A tiny regressor whose loss stays finite."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
        loss = torch.nn.functional.mse_loss(self.linear(batch[0]).squeeze(-1), batch[1])
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def fit_with_stop(
    tmp_path: Path, module: pl.LightningModule, *, samples: int, max_steps: int
) -> tuple[SpeedtronicLogger, StopOnAlert, pl.Trainer]:
    """A real ``fit()`` on CPU logging to a ``SpeedtronicLogger`` (its default rules) with a
    ``StopOnAlert`` callback; the logger closed when it returns."""
    logger = SpeedtronicLogger(save_dir=tmp_path, stream=io.StringIO())
    stop = StopOnAlert(logger)
    x = torch.randn(samples, 4, generator=torch.Generator().manual_seed(0))
    trainer = pl.Trainer(
        max_steps=max_steps, log_every_n_steps=1, accelerator="cpu", devices=1, logger=logger,
        callbacks=[stop], enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, default_root_dir=str(tmp_path),
    )  # fmt: skip
    trainer.fit(module, DataLoader(TensorDataset(x, x.sum(-1)), batch_size=4))
    logger.experiment.close()
    return logger, stop, trainer


class TestLightning:
    def test_a_nan_stops_fit_through_trainer_should_stop(self, tmp_path: Path) -> None:
        """SpeedtronicLogger builds its MetricLogger with the default rules; StopOnAlert sets
        trainer.should_stop once the NaN's alert is raised, and fit() ends well before max_steps."""
        logger, stop, trainer = fit_with_stop(tmp_path, NaNModule(), samples=256, max_steps=40)
        alerts, steps = alerts_and_end(Path(logger.log_dir) / "metrics.jsonl")
        assert alerts == [("non_finite", NAN_FROM)]
        assert stop.alert is not None
        assert NAN_FROM <= trainer.global_step <= NAN_FROM + 1  # the step logged, then the stop
        assert max(steps) < 40

    def test_train_end_says_stopped_with_the_alert_as_reason(self, tmp_path: Path) -> None:
        """After StopOnAlert stopped fit(), train_end's status is stopped and its reason the alert's
        message (Lightning itself calls that ending a success)."""
        logger, stop, trainer = fit_with_stop(tmp_path, NaNModule(), samples=256, max_steps=40)
        (end,) = [r for r in read_jsonl(Path(logger.log_dir) / "metrics.jsonl") if r["event"] == "train_end"]
        assert stop.alert is not None
        assert (end["status"], end["reason"]) == ("stopped", stop.alert.message)
        assert end["step"] == trainer.global_step

    def test_a_fit_that_ran_to_its_end_is_completed(self, tmp_path: Path) -> None:
        """StopOnAlert on a run without alerts changes nothing: train_end says completed, no reason."""
        logger, stop, _ = fit_with_stop(tmp_path, FiniteModule(), samples=64, max_steps=6)
        (end,) = [r for r in read_jsonl(Path(logger.log_dir) / "metrics.jsonl") if r["event"] == "train_end"]
        assert stop.alert is None
        assert end["status"] == "completed"
        assert "reason" not in end


class TestTorchtune:
    def test_a_recipe_leaves_its_loop_when_should_stop(self, tmp_path: Path) -> None:
        """Instantiated as a recipe does, with on_alert: stop; a real training loop whose loss goes
        NaN checks should_stop after each log_dict, as docs/alerts.md tells a recipe to."""
        from torchtune import config

        cfg = OmegaConf.create(
            {
                "metric_logger": {
                    "_component_": "speedtronic.integrations.torchtune.SpeedtronicMetricLogger",
                    "log_dir": str(tmp_path),
                    "on_alert": "stop",
                }
            }
        )
        metric_logger = config.instantiate(cfg.metric_logger, stream=io.StringIO())
        assert isinstance(metric_logger, tt.SpeedtronicMetricLogger)
        model = GoesNaN()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        batches = data(64)
        last = 0
        for step in range(1, 21):
            batch = batches[step]
            loss = model(batch["x"][None], batch["labels"][None])["loss"]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            metric_logger.log_dict({"loss": loss.detach(), "lr": 0.01}, step=step)
            last = step
            if metric_logger.should_stop:
                break
        metric_logger.close()
        alerts, _ = alerts_and_end(tmp_path / "metrics.jsonl")
        assert alerts == [("non_finite", NAN_FROM)]
        assert last == NAN_FROM

    def test_with_alerts_off_it_never_stops(self, tmp_path: Path) -> None:
        """alerts=[]: no rule, no alert record, should_stop stays False."""
        metric_logger = tt.SpeedtronicMetricLogger(
            log_dir=tmp_path, alerts=[], on_alert="stop", stream=io.StringIO()
        )
        metric_logger.log_dict({"loss": math.nan}, step=1)
        assert not metric_logger.should_stop
        metric_logger.close()
        assert alerts_and_end(tmp_path / "metrics.jsonl")[0] == []
