"""Runs read by role: the loss, learning rates, throughput and held-out losses of runs shaped like
each framework's (HF, Lightning, torchtune), and the overrides."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from speedtronic.runs import summary as summary_module
from speedtronic.runs.plot import plot_runs
from speedtronic.runs.roles import Roles, eval_split, is_lr, is_rate
from speedtronic.runs.summary import format_summaries, summarize_run
from tests.runs.conftest import CLI, assert_one_line_error
from tests.runs.test_summary import table


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def lightning(path: Path) -> Path:
    """Lightning's names: train_loss_step per step, train_loss_epoch per epoch, a LearningRateMonitor of
    two parameter groups, a ThroughputMonitor, val and test losses."""
    records: list[dict[str, Any]] = [{"event": "train_start"}]
    for step in range(1, 5):
        records.append({
            "event": "train_step", "step": step, "train_loss_step": 1.0 / step, "epoch": 0,
            "lr-SGD": 0.1 / step, "lr-SGD/pg1": 0.01 / step, "train/device/samples_per_sec": 100.0 * step,
        })  # fmt: skip
    records.append({"event": "train_step", "step": 4, "train_loss_epoch": 0.5, "epoch": 0})
    records.append({"event": "eval", "step": 4, "split": "val", "val_loss": 0.75})
    records.append({"event": "eval", "step": 4, "split": "test", "test_loss": 0.8})
    records.append({"event": "train_end", "status": "completed"})
    return write(path, records)


def transformers(path: Path) -> Path:
    """Hugging Face's names: loss, learning_rate, grad_norm; eval_loss; train_samples_per_second last."""
    records: list[dict[str, Any]] = [{"event": "train_start"}]
    for step in (10, 20, 30):
        records.append({"event": "train_step", "step": step, "loss": 3.0 / step * 10, "learning_rate": 5e-5,
                        "grad_norm": 1.5, "epoch": step / 30})  # fmt: skip
        records.append({"event": "eval", "step": step, "split": "eval", "eval_loss": 2.0 / step * 10})
    records.append({"event": "train_end", "status": "completed", "train_samples_per_second": 9639.25,
                    "train_loss": 1.5})  # fmt: skip
    return write(path, records)


def torchtune(path: Path) -> Path:
    """torchtune's names: loss, lr, tokens_per_second_per_gpu; a val loss."""
    records: list[dict[str, Any]] = [{"event": "train_start"}]
    for step in (1, 2, 3):
        records.append({"event": "train_step", "step": step, "loss": 2.0 - step * 0.5, "lr": 2e-5,
                        "tokens_per_second_per_gpu": 11199.0})  # fmt: skip
    records.append({"event": "eval", "step": 3, "split": "val", "loss": 0.4})
    return write(path, records)


class TestTable:
    @pytest.mark.parametrize(
        ("key", "role"),
        [("lr", "lr"), ("learning_rate", "lr"), ("lr-SGD", "lr"), ("lr-AdamW/pg12", "lr"), ("lrs", None),
         ("samples_per_s", "rate"), ("train/device/samples_per_sec", "rate"),
         ("train_samples_per_second", "rate"), ("tokens_per_second_per_gpu", "rate"), ("per_s_x", None)],
    )  # fmt: skip
    def test_lr_and_rate_names(self, key: str, role: str | None) -> None:
        """Each framework's learning-rate and throughput names are found; look-alikes are not."""
        assert ("lr" if is_lr(key) else "rate" if is_rate(key) else None) == role

    @pytest.mark.parametrize(
        ("key", "split"),
        [("eval_loss", "eval"), ("val_loss", "val"), ("val/loss", "val"), ("val_loss_epoch", "val"),
         ("test_loss", "test"), ("train_loss", None), ("val_acc", None)],
    )  # fmt: skip
    def test_held_out_loss_names_keep_their_split(self, key: str, split: str | None) -> None:
        """<split>_loss and <split>/loss are that split's held-out loss."""
        assert eval_split(key) == split

    def test_an_empty_override_is_refused(self) -> None:
        """Roles(loss="") names no key: a ValueError naming the role."""
        with pytest.raises(ValueError, match="Roles loss"):
            Roles(loss="")


class TestSummarize:
    def test_lightning(self, tmp_path: Path) -> None:
        """train_loss_step is the loss (the epoch mean is not mixed in); both parameter groups' lr; the
        ThroughputMonitor rate; val and test each their own rows."""
        summary = summarize_run(lightning(tmp_path / "m.jsonl"))
        assert (summary.loss_key, summary.loss_first, summary.loss_last) == ("train_loss_step", 1.0, 0.25)
        assert summary.lrs == {"lr-SGD": 0.025, "lr-SGD/pg1": 0.0025}
        assert summary.rates["train/device/samples_per_sec"].last == 400.0
        assert {split: stats.last for split, stats in summary.evals.items()} == {"val": 0.75, "test": 0.8}
        assert summary.eval_loss_last == 0.75
        rows = table(format_summaries([summary]))
        assert rows["loss key"] == ["train_loss_step"]
        assert rows["val loss last"] == ["0.75 @ step 4"]
        assert rows["test loss last"] == ["0.8 @ step 4"]
        assert rows["lr-SGD/pg1 last"] == ["0.0025"]

    def test_transformers(self, tmp_path: Path) -> None:
        """loss, learning_rate, eval_loss and the train_end rate are all filled."""
        summary = summarize_run(transformers(tmp_path / "m.jsonl"))
        assert (summary.loss_key, summary.loss_last) == ("loss", 1.0)
        assert summary.lrs == {"learning_rate": 5e-5}
        assert (summary.eval_loss_last, summary.eval_loss_best_step) == (2.0 / 3, 30)
        assert summary.end_rates == {"train_samples_per_second": 9639.25}
        rows = table(format_summaries([summary]))
        assert rows["train_samples_per_second (train_end)"] == ["9,639"]
        assert rows["eval loss best"] == ["0.6667 @ step 30"]

    def test_torchtune(self, tmp_path: Path) -> None:
        """loss, lr, tokens_per_second_per_gpu and the val loss are all filled."""
        summary = summarize_run(torchtune(tmp_path / "m.jsonl"))
        assert (summary.loss_last, summary.lrs) == (0.5, {"lr": 2e-5})
        assert summary.rates["tokens_per_second_per_gpu"].mean == 11199.0
        assert summary.evals["val"].last == 0.4

    def test_the_loss_can_be_named(self, tmp_path: Path) -> None:
        """Roles(loss=...) reads that key as the loss, and only it."""
        summary = summarize_run(lightning(tmp_path / "m.jsonl"), roles=Roles(loss="train_loss_epoch"))
        assert (summary.loss_key, summary.loss_last) == ("train_loss_epoch", 0.5)

    def test_the_cli_takes_the_overrides(self, tmp_path: Path, cli: CLI) -> None:
        """summarize --loss KEY --lr KEY: the table reads those keys."""
        lightning(tmp_path / "m.jsonl")
        result = cli("summarize", "m.jsonl", "--loss", "train_loss_epoch", "--lr", "lr-SGD")
        assert result.returncode == 0, result.stderr
        rows = table(result.stdout)
        assert (rows["loss last"], rows["loss key"]) == (["0.5"], ["train_loss_epoch"])
        assert "lr-SGD last" in rows
        assert "lr-SGD/pg1 last" not in rows
        assert_one_line_error(cli("summarize", "m.jsonl", "--lr", ","), "--lr")


class TestPlot:
    @pytest.mark.parametrize("shape", [lightning, transformers, torchtune])
    def test_loss_and_lr_panels_are_filled(self, tmp_path: Path, shape: Any) -> None:
        """The default loss and lr panels have points for every framework's run."""
        pytest.importorskip("matplotlib")
        result = plot_runs([shape(tmp_path / "m.jsonl")], tmp_path / "p.png")
        assert result.empty_keys() == []

    def test_each_split_and_parameter_group_is_its_own_line(self, tmp_path: Path) -> None:
        """Lightning: one lr line per parameter group; val and test dashed apart; the loss by role."""
        pytest.importorskip("matplotlib")
        result = plot_runs([lightning(tmp_path / "m.jsonl")], tmp_path / "p.png")
        lines = [(s.key, s.source, s.split, list(s.y)) for s in result.series]
        assert ("loss", "train_loss_step", None, [1.0, 0.5, 1 / 3, 0.25]) in lines
        assert ("loss", "val_loss", "val", [0.75]) in lines
        assert ("loss", "test_loss", "test", [0.8]) in lines
        assert [source for key, source, _, _ in lines if key == "lr"] == ["lr-SGD", "lr-SGD/pg1"]

    def test_a_held_out_loss_in_a_training_record_is_its_own_line(self, tmp_path: Path) -> None:
        """val_loss logged in a train_step record: a dashed val line, left out with with_eval=False."""
        pytest.importorskip("matplotlib")
        path = write(tmp_path / "m.jsonl", [
            {"event": "train_step", "step": 1, "train_loss": 2.0},
            {"event": "train_step", "step": 2, "train_loss": 1.0, "val_loss": 1.5},
        ])  # fmt: skip
        drawn = plot_runs([path], tmp_path / "p.png", keys=["loss"]).series
        assert [(s.source, s.split, list(s.y)) for s in drawn] == [("train_loss", None, [2.0, 1.0]),
                                                                   ("val_loss", "val", [1.5])]  # fmt: skip
        alone = plot_runs([path], tmp_path / "q.png", keys=["loss"], with_eval=False).series
        assert [s.source for s in alone] == ["train_loss"]


class TestSystem:
    def test_summarize_shows_peak_memory_and_mean_utilisation(self, tmp_path: Path) -> None:
        """system records: the peak of each *_bytes key but capacities (*_total_bytes), the mean of
        each *_percent key; a key some records lack is read where it is."""
        path = write(tmp_path / "m.jsonl", [
            {"event": "system", "cpu_percent": 50.0, "rss_bytes": 3 << 30, "gpu0_util_percent": 90.0,
             "gpu0_memory_used_bytes": 10 << 30},
            {"event": "system", "cpu_percent": 100.0, "rss_bytes": 2 << 30},
            {"event": "system", "cpu_percent": "n/a", "host_memory_used_bytes": 512 << 20,
             "host_memory_total_bytes": 64 << 30, "gpu0_memory_total_bytes": 80 << 30},
        ])  # fmt: skip
        summary = summarize_run(path)
        assert summary.peaks == {"rss_bytes": 3 << 30, "gpu0_memory_used_bytes": 10 << 30,
                                 "host_memory_used_bytes": 512 << 20}  # fmt: skip
        rows = table(format_summaries([summary]))
        assert rows["rss_bytes peak"] == ["3.0 GiB"]
        assert rows["host_memory_used_bytes peak"] == ["512.0 MiB"]
        assert rows["cpu_percent mean"] == ["75.0%"]
        assert rows["gpu0_util_percent mean"] == ["90.0%"]
        assert summary.as_dict()["system"]["means"] == {"cpu_percent": 75.0, "gpu0_util_percent": 90.0}

    def test_pieces_give_the_one_pass_figures(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A framework run with system records, cut into one-line pieces: the same summary as one pass."""
        path = lightning(tmp_path / "m.jsonl")
        with path.open("a") as file:
            for at in range(5):
                record = {"event": "system", "cpu_percent": 10.0 * at, "rss_bytes": at % 3}
                file.write(json.dumps(record) + "\n")
        whole = summarize_run(path).as_dict()
        monkeypatch.setattr(summary_module, "PIECE_BYTES", 1)
        assert summarize_run(path).as_dict() == whole
        assert whole["loss"]["key"] == "train_loss_step"
