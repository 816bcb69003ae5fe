"""SpeedtronicMetricLogger driven the way torchtune's recipes drive a metric logger.

A recipe instantiates ``cfg.metric_logger`` (``_component_`` plus keyword arguments), calls
``log_config(cfg)`` once with its OmegaConf config, ``log_dict({...}, step=global_step)`` every
``log_every_n_steps`` steps (0-d tensors among the values), ``log_dict({"val_loss": ...})`` after a
validation run, and ``close()`` at the end.
"""

from __future__ import annotations

import importlib.util
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
from tests.helpers import read_jsonl

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
    """torchtune's own ``config.instantiate``, as a recipe calls it on ``cfg.metric_logger``."""
    from torchtune import config

    metric_logger = config.instantiate(node, **overrides)
    assert isinstance(metric_logger, tt.SpeedtronicMetricLogger)
    return metric_logger


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
            "hyperparams",
            "train_start",
            "train_step",
            "train_step",
            "train_step",
            "eval",
            "train_step",
            "train_end",
        ]
        config = records[0]["config"]
        assert config["checkpointer"]["checkpoint_dir"] == f"{tmp_path}/ckpt"  # resolved
        assert config["optimizer"]["lr"] == 2e-5
        steps = [r for r in records if r["event"] == "train_step"]
        assert [r["step"] for r in steps] == [2, 4, 6, 6]
        assert steps[0]["loss"] == 1.0
        assert steps[0]["tokens_per_second_per_gpu"] == 200.0  # the name torchtune logs
        assert "tokens_per_s" not in steps[0]
        assert steps[-1]["peak_memory_gb"] == 1.5
        (evaluation,) = [r for r in records if r["event"] == "eval"]
        assert (evaluation["step"], evaluation["split"], evaluation["val_loss"]) == (6, "val", 0.75)

    def test_a_given_logger_is_flushed_not_closed(self, tmp_path: Path) -> None:
        """With logger=, close() leaves the MetricLogger open for its owner."""
        logger = MetricLogger(json_file=tmp_path / "m.jsonl", stream=io.StringIO())
        metric_logger = tt.SpeedtronicMetricLogger(logger)
        metric_logger.log_dict({"loss": 1.0}, step=1)
        metric_logger.close()
        assert not logger.closed
        logger.emit("after", {"ok": True})
        logger.close()
        assert [r["event"] for r in read_jsonl(tmp_path / "m.jsonl")] == [
            "train_start",
            "train_step",
            "train_end",
            "after",
        ]

    def test_close_leaves_a_given_loggers_tensorboard_file_complete(self, tmp_path: Path) -> None:
        """With logger=, close() (the recipe's cleanup) flushes: the TensorboardHook's file holds every
        point while the logger stays open."""
        from speedtronic.integrations import TensorboardHook
        from tests.helpers import tensorboard_scalars

        hook = TensorboardHook(tmp_path / "tb", flush_secs=3600)  # only a flush writes the file
        logger = MetricLogger(stream=io.StringIO(), hooks=[hook])
        metric_logger = tt.SpeedtronicMetricLogger(logger)
        metric_logger.log_dict({"loss": 1.0, "tokens_per_second_per_gpu": 10.0}, step=1)
        metric_logger.log_dict({"val_loss": 0.5}, step=1)
        metric_logger.close()
        scalars = tensorboard_scalars(tmp_path / "tb")
        assert scalars["train_step/tokens_per_second_per_gpu"] == [(1, 10.0)]
        assert scalars["eval/val_loss"] == [(1, 0.5)]
        logger.close()

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
        metric_logger = tt.SpeedtronicMetricLogger(log_dir=tmp_path, every_steps=2, stream=io.StringIO())
        for step in range(1, 5):
            metric_logger.log_dict({"loss": 1.0}, step=step)
        metric_logger.log_dict({"val_loss": 1.0}, step=3)
        metric_logger.close()
        records = read_jsonl(tmp_path / "metrics.jsonl")
        assert [(r["event"], r.get("step")) for r in records] == [
            ("train_start", None),
            ("train_step", 2),
            ("train_step", 4),
            ("eval", 3),
            ("train_end", 4),
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


WANDB_RECIPE = """
output_dir: /tmp/out
metric_logger:
  _component_: speedtronic.integrations.torchtune.SpeedtronicMetricLogger
  log_dir: ${output_dir}/logs
  filename: run.jsonl          # DiskLogger's
  project: speedtronic-tests   # WandBLogger's
  group: sweep-1
  hooks:
    - {type: tensorboard}
    - _component_: speedtronic.integrations.TensorboardHook
      log_dir: ${output_dir}/tb2
      skip: [step, elapsed_s]
log_every_n_steps: 2
"""


class TestLoggersDeclaredInYaml:
    def test_torchtune_logger_arguments_and_hooks_from_the_recipe(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """torchtune's config.instantiate on a recipe: filename names the JSONL in log_dir, project adds
        a W&B run, hooks are built from a type: entry and a nested _component_; summarize reads it
        (with the read-back tools' role table)."""
        from speedtronic.runs.summary import summarize_run
        from tests.helpers import tensorboard_scalars
        from tests.wandb_files import read_wandb_run

        monkeypatch.setenv("WANDB_MODE", "offline")
        monkeypatch.setenv("WANDB_SILENT", "true")
        for name in ("CACHE_DIR", "CONFIG_DIR", "DATA_DIR"):
            (tmp_path / name.lower()).mkdir()
            monkeypatch.setenv(f"WANDB_{name}", str(tmp_path / name.lower()))
        cfg = OmegaConf.create(WANDB_RECIPE)
        cfg.output_dir = str(tmp_path)
        metric_logger = instantiate(cfg.metric_logger)
        [tensorboard, nested, wandb_hook] = metric_logger.logger.hooks
        run_recipe(metric_logger, cfg)

        run = tmp_path / "logs" / "run.jsonl"
        assert read_jsonl(run)[0]["event"] == "hyperparams"
        assert tensorboard.log_dir == str(tmp_path / "logs" / "tensorboard")
        assert tensorboard_scalars(tmp_path / "logs" / "tensorboard")["train_step/loss"][0] == (2, 1.0)
        assert set(tensorboard_scalars(tmp_path / "tb2")) >= {"train_step/loss", "eval/val_loss"}
        assert "train_step/elapsed_s" not in tensorboard_scalars(tmp_path / "tb2")
        recorded = read_wandb_run(Path(wandb_hook.run.dir).parent)
        assert Path(wandb_hook.run.dir).is_relative_to(tmp_path / "logs")
        losses = [row["train_step/loss"] for row in recorded.history if "train_step/loss" in row]
        assert losses == pytest.approx([1.0, 0.5, 1 / 3])
        if importlib.util.find_spec("speedtronic.runs.roles") is not None:  # the read-back role table
            summary = summarize_run(run)
            assert (summary.finished, summary.status) == (True, "completed")
            assert summary.rates["tokens_per_second_per_gpu"].last == 600.0  # a throughput, by role
        assert nested.log_dir == str(tmp_path / "tb2")

    @pytest.mark.parametrize(
        ("entry", "error", "match"),
        [
            ({"type": "no-such-hook"}, ValueError, r"hooks\[0\]\): unknown hook type 'no-such-hook'"),
            ({"log_dir": "x"}, ValueError, r"hooks\[0\]\): an entry needs 'type'"),
            ({"type": "tensorboard", "bogus": 1}, ValueError, r"hooks\[0\]\): tensorboard hook: .*bogus"),
            ({"_component_": "speedtronic.integrations.Nope"}, ValueError, r"hooks\[0\]\):.*Nope"),
        ],
    )
    def test_a_bad_hook_entry_names_its_place(
        self, tmp_path: Path, entry: dict[str, Any], error: type[Exception], match: str
    ) -> None:
        """A hook entry that can't be built: an error naming hooks[i] and what is wrong, no file left open."""
        with pytest.raises(error, match=match):
            tt.SpeedtronicMetricLogger(log_dir=tmp_path, hooks=[entry], stream=io.StringIO())


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
