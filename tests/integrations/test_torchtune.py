"""SpeedtronicMetricLogger driven the way torchtune's recipes drive a metric logger.

A recipe instantiates ``cfg.metric_logger`` (``_component_`` plus keyword arguments), calls
``log_config(cfg)`` once with its OmegaConf config, ``log_dict({...}, step=global_step)`` every
``log_every_n_steps`` steps (0-d tensors among the values), ``log_dict({"val_loss": ...})`` after a
validation run, and ``close()`` at the end.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from speedtronic.integrations import torchtune as tt
from speedtronic.profiling import MetricLogger
from tests.conftest import read_jsonl

RECIPE_CONFIG = """
output_dir: /tmp/out
metric_logger:
  _component_: speedtronic.integrations.torchtune.SpeedtronicMetricLogger
  log_dir: ${output_dir}/logs
optimizer:
  lr: 2e-5
checkpointer:
  checkpoint_dir: ${output_dir}/ckpt
log_every_n_steps: 2
"""


def instantiate(node: Any, **overrides: Any) -> tt.SpeedtronicMetricLogger:
    """What torchtune's ``config.instantiate`` does: import ``_component_``, call it with the rest."""
    kwargs = OmegaConf.to_container(node, resolve=True)
    assert isinstance(kwargs, dict)
    module, _, name = kwargs.pop("_component_").rpartition(".")
    factory = getattr(sys.modules[module], name)
    return factory(**{**kwargs, **overrides})  # type: ignore[no-any-return]


def run_recipe(metric_logger: Any, cfg: Any, steps: int = 6) -> None:
    """A recipe's calls: log_config, log_dict every log_every_n_steps, a validation, close."""
    metric_logger.log_config(cfg)
    for step in range(1, steps + 1):
        if step % cfg.log_every_n_steps == 0:
            metric_logger.log_dict(
                {"loss": torch.tensor(2.0 / step), "lr": 2e-5, "tokens_per_second_per_gpu": 100.0 * step},
                step=step,
            )
    metric_logger.log_dict({"val_loss": torch.tensor(0.75)}, step=steps)
    metric_logger.log("peak_memory_gb", 1.5, step=steps)
    metric_logger.close()


class TestSpeedtronicMetricLogger:
    def test_a_recipe_run_becomes_hyperparams_train_steps_and_eval(self, tmp_path: Path) -> None:
        """Instantiated from a recipe config with log_dir, it writes metrics.jsonl there: the resolved
        config, a train_step per log_dict call at its step, an eval for val_loss."""
        cfg = OmegaConf.create(RECIPE_CONFIG)
        cfg.output_dir = str(tmp_path)
        run_recipe(instantiate(cfg.metric_logger), cfg)

        records = read_jsonl(tmp_path / "logs" / "metrics.jsonl")
        assert [r["event"] for r in records] == [
            "hyperparams", "train_step", "train_step", "train_step", "eval", "train_step",
        ]
        config = records[0]["config"]
        assert config["checkpointer"]["checkpoint_dir"] == f"{tmp_path}/ckpt"  # resolved
        assert config["optimizer"]["lr"] == 2e-5
        steps = [r for r in records if r["event"] == "train_step"]
        assert [r["step"] for r in steps] == [2, 4, 6, 6]
        assert steps[0]["loss"] == 1.0
        assert steps[0]["tokens_per_second_per_gpu"] == 200.0
        assert steps[-1]["peak_memory_gb"] == 1.5
        (evaluation,) = [r for r in records if r["event"] == "eval"]
        assert (evaluation["step"], evaluation["split"], evaluation["loss"]) == (6, "val", 0.75)

    def test_a_given_logger_is_flushed_not_closed(self, tmp_path: Path) -> None:
        """With logger=, close() leaves the MetricLogger open for its owner."""
        logger = MetricLogger(json_file=tmp_path / "m.jsonl", stream=io.StringIO())
        metric_logger = tt.SpeedtronicMetricLogger(logger)
        metric_logger.log_dict({"loss": 1.0}, step=1)
        metric_logger.close()
        assert not logger.closed
        logger.emit("after", {"ok": True})
        logger.close()
        assert [r["event"] for r in read_jsonl(tmp_path / "m.jsonl")] == ["train_step", "after"]

    def test_an_owned_logger_is_closed_and_close_is_idempotent(self, tmp_path: Path) -> None:
        """Built from arguments, close() closes it; a second close() is harmless."""
        metric_logger = tt.SpeedtronicMetricLogger(json_file=tmp_path / "m.jsonl", stream=io.StringIO())
        metric_logger.log_config({"lr": 1e-3})
        metric_logger.close()
        metric_logger.close()
        assert metric_logger.logger.closed
        assert read_jsonl(tmp_path / "m.jsonl")[0]["config"] == {"lr": 1e-3}

    def test_the_cadence_of_the_logger_applies(self, tmp_path: Path) -> None:
        """every_steps= from the config thins train_step records; eval records always pass."""
        metric_logger = tt.SpeedtronicMetricLogger(
            log_dir=tmp_path, every_steps=2, stream=io.StringIO()
        )
        for step in range(1, 5):
            metric_logger.log_dict({"loss": 1.0}, step=step)
        metric_logger.log_dict({"val_loss": 1.0}, step=3)
        metric_logger.close()
        records = read_jsonl(tmp_path / "metrics.jsonl")
        assert [(r["event"], r["step"]) for r in records] == [
            ("train_step", 2), ("train_step", 4), ("eval", 3)
        ]

    def test_logger_and_arguments_together_are_refused(self, tmp_path: Path) -> None:
        """Passing a MetricLogger and MetricLogger arguments is a TypeError naming both."""
        logger = MetricLogger(stream=io.StringIO())
        with pytest.raises(TypeError, match="logger= and json_file, log_dir"):
            tt.SpeedtronicMetricLogger(logger, log_dir=tmp_path, json_file="x")
        logger.close()

    def test_a_config_that_is_no_mapping_is_refused(self, tmp_path: Path) -> None:
        """log_config with a list names what it expected."""
        metric_logger = tt.SpeedtronicMetricLogger(stream=io.StringIO())
        with pytest.raises(TypeError, match="expected a DictConfig or a mapping, got list"):
            metric_logger.log_config([1, 2])
        metric_logger.close()


def test_the_module_imports_neither_torchtune_nor_omegaconf() -> None:
    """Importing the adapter and logging a dict config pulls in neither torchtune nor omegaconf."""
    code = (
        "import sys, io\n"
        "from speedtronic.integrations.torchtune import SpeedtronicMetricLogger\n"
        "m = SpeedtronicMetricLogger(stream=io.StringIO())\n"
        "m.log_config({'a': 1}); m.log_dict({'loss': 1.0}, step=1); m.close()\n"
        "print(sorted({n.partition('.')[0] for n in sys.modules} & {'torchtune', 'omegaconf', 'torch'}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
