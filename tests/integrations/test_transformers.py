"""SpeedtronicCallback on a real ``transformers.Trainer``: a tiny regression model on the CPU."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import Trainer, TrainerControl, TrainerState, TrainingArguments

from speedtronic.integrations.transformers import SpeedtronicCallback
from speedtronic.profiling import MetricLogger
from tests.helpers import assert_health_split, read_jsonl


class TinyRegressor(torch.nn.Module):
    """What a Trainer needs of a model: keyword inputs, a dict with ``loss`` when given labels."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        prediction = self.linear(x).squeeze(-1)
        return {"loss": torch.nn.functional.mse_loss(prediction, labels), "logits": prediction}


def dataset(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0])
    return [{"x": x[i], "labels": y[i]} for i in range(n)]


class SlowRegressor(TinyRegressor):
    """Each forward pass sleeps: at least ``pause`` seconds of compute (or evaluation) per microbatch."""

    def __init__(self, pause: float) -> None:
        super().__init__()
        self.pause = pause

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        time.sleep(self.pause)
        return super().forward(x, labels)


class SlowDataset(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Each item sleeps ``pause`` seconds before it is handed over: data wait the loader can't hide."""

    def __init__(self, items: list[dict[str, torch.Tensor]], pause: float) -> None:
        self.items, self.pause = items, pause

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        time.sleep(self.pause)
        return self.items[index]


def train(tmp_path: Path, logger: MetricLogger, **changes: Any) -> Trainer:
    settings: dict[str, Any] = {
        "output_dir": str(tmp_path / "out"),
        "max_steps": 6,
        "logging_steps": 2,
        "eval_strategy": "steps",
        "eval_steps": 3,
        "save_strategy": "steps",
        "save_steps": 3,
        "per_device_train_batch_size": 4,
        "per_device_eval_batch_size": 8,
        "learning_rate": 0.05,
        "report_to": "none",
        "use_cpu": True,
        "disable_tqdm": True,
        "seed": 0,
    }
    model = changes.pop("model", None) or TinyRegressor()
    train_dataset = changes.pop("train_dataset", None) or dataset(64, seed=0)
    settings.update(changes)
    trainer = Trainer(
        model=model,
        args=TrainingArguments(**settings),
        train_dataset=train_dataset,
        eval_dataset=dataset(16, seed=1),
        callbacks=[SpeedtronicCallback(logger)],
    )
    trainer.train()
    return trainer


@pytest.fixture
def logger(tmp_path: Path) -> Any:
    logger = MetricLogger(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO())
    yield logger
    logger.close()


class TestSpeedtronicCallback:
    def test_a_training_run_is_recorded_as_the_catalog_events(
        self, tmp_path: Path, logger: MetricLogger
    ) -> None:
        """hyperparams and train_start, a train_step per logging_steps, an eval per eval_steps, a
        checkpoint per save, then train_end: in the order the Trainer does them."""
        train(tmp_path, logger)
        logger.close()
        records = read_jsonl(tmp_path / "metrics.jsonl")
        assert [(r["event"], r.get("step")) for r in records] == [
            ("hyperparams", None),
            ("train_start", None),
            ("train_step", 2),
            ("eval", 3),
            ("checkpoint", 3),
            ("train_step", 4),
            ("train_step", 6),
            ("eval", 6),
            ("checkpoint", 6),
            ("train_end", 6),
        ]

    def test_train_steps_keep_the_keys_as_hugging_face_logs_them(
        self, tmp_path: Path, logger: MetricLogger
    ) -> None:
        """loss, grad_norm, learning_rate and epoch under HF's names; step is state.global_step."""
        train(tmp_path, logger)
        logger.close()
        steps = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["event"] == "train_step"]
        for record in steps:
            assert {"step", "loss", "learning_rate", "grad_norm", "epoch"} <= record.keys()
            assert "lr" not in record
            assert isinstance(record["loss"], float)
        assert steps[0]["epoch"] == pytest.approx(2 / 16)

    def test_evaluation_metrics_keep_their_names_and_split(
        self, tmp_path: Path, logger: MetricLogger
    ) -> None:
        """eval_loss stays eval_loss in an eval record with split "eval"; evaluate(metric_key_prefix=
        "test") is split "test" with test_loss: each split apart, nothing renamed."""
        trainer = train(tmp_path, logger)
        direct = trainer.evaluate()
        trainer.evaluate(metric_key_prefix="test")
        logger.close()
        evals = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["event"] == "eval"]
        assert [r["split"] for r in evals] == ["eval", "eval", "eval", "test"]
        assert {"eval_loss", "eval_runtime", "eval_samples_per_second", "epoch"} <= evals[0].keys()
        assert "loss" not in evals[0]
        assert evals[2]["eval_loss"] == pytest.approx(direct["eval_loss"])
        assert evals[-1]["test_loss"] == pytest.approx(direct["eval_loss"])
        assert evals[-1]["step"] == 6

    def test_checkpoints_name_the_directories_written(self, tmp_path: Path, logger: MetricLogger) -> None:
        """Each checkpoint record's path is the checkpoint-<step> directory the Trainer saved."""
        train(tmp_path, logger)
        logger.close()
        checkpoints = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["event"] == "checkpoint"]
        assert [r["path"] for r in checkpoints] == [
            str(tmp_path / "out" / "checkpoint-3"),
            str(tmp_path / "out" / "checkpoint-6"),
        ]
        assert all(Path(r["path"]).is_dir() for r in checkpoints)

    def test_start_and_end_carry_the_run(self, tmp_path: Path, logger: MetricLogger) -> None:
        """train_start has the catalog's keys from the arguments; train_end the summary and last loss;
        hyperparams the TrainingArguments, at DEBUG (no 3 kB first line in the text log)."""
        train(tmp_path, logger, gradient_accumulation_steps=2)
        logger.close()
        records = read_jsonl(tmp_path / "metrics.jsonl")
        by_event = {r["event"]: r for r in records}
        assert by_event["hyperparams"]["config"]["logging_steps"] == 2
        start = by_event["train_start"]
        assert (start["start_step"], start["target_step"], start["grad_accum"]) == (0, 6, 2)
        assert (start["device"], start["precision"], start["parameters"]) == ("cpu", "fp32", 5)
        end = by_event["train_end"]
        last_loss = [r for r in records if r["event"] == "train_step"][-1]["loss"]
        assert (end["step"], end["steps_run"], end["final_loss"]) == (6, 6, last_loss)
        assert end["duration_s"] > 0
        assert end["status"] == "completed"
        assert {"train_loss", "train_runtime", "train_samples_per_second"} <= end.keys()  # as HF logs them

    def test_hyperparams_reach_the_jsonl_not_the_text_log(self, tmp_path: Path) -> None:
        """hyperparams is DEBUG: the JSONL has the TrainingArguments, the INFO text log no line of them."""
        text = io.StringIO()
        logger = MetricLogger(json_file=tmp_path / "metrics.jsonl", stream=text)
        train(tmp_path, logger, max_steps=2, eval_strategy="no", save_strategy="no")
        logger.close()
        assert read_jsonl(tmp_path / "metrics.jsonl")[0]["event"] == "hyperparams"
        assert "hyperparams" not in text.getvalue()
        assert "train_start" in text.getvalue()

    def test_summarize_reads_a_hugging_face_run(self, tmp_path: Path, logger: MetricLogger) -> None:
        """summarize finds HF's loss and eval_loss by their role, and says "completed"."""
        pytest.importorskip("speedtronic.runs.roles", reason="the role table of the read-back tools")
        from speedtronic.runs.summary import summarize_run

        train(tmp_path, logger)
        logger.close()
        records = read_jsonl(tmp_path / "metrics.jsonl")
        summary = summarize_run(tmp_path / "metrics.jsonl")
        assert (summary.finished, summary.status) == (True, "completed")
        assert summary.loss_last == [r["loss"] for r in records if r["event"] == "train_step"][-1]
        assert summary.eval_loss_last == [r["eval_loss"] for r in records if r["event"] == "eval"][-1]

    def test_report_to_wandb_beside_a_wandb_hook(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Trainer(report_to="wandb") and a WandbHook in one run, read back from the .wandb file: HF's
        callback joins the hook's run; no metric is logged by both; HF's rows keep train/global_step
        as their x and get no "step", ours keep "step" and get no train/global_step; each evaluation
        is one point per tool."""
        import wandb

        from speedtronic.integrations import WandbHook
        from tests.wandb_files import read_wandb_run

        monkeypatch.setenv("WANDB_MODE", "offline")
        monkeypatch.setenv("WANDB_SILENT", "true")
        for name in ("DIR", "CACHE_DIR", "CONFIG_DIR", "DATA_DIR"):
            (tmp_path / name.lower()).mkdir()
            monkeypatch.setenv(f"WANDB_{name}", str(tmp_path / name.lower()))
        # dir= as well: W&B set up earlier in this process keeps the settings it read then
        hook = WandbHook("speedtronic-tests", dir=str(tmp_path / "dir"), mode="offline")
        logger = MetricLogger(stream=io.StringIO(), hooks=[hook], strict_hooks=True)
        train(tmp_path, logger, report_to="wandb")
        logger.close()
        assert wandb.run is None  # the hook finished the run it made
        recorded = read_wandb_run(Path(hook.run.dir).parent)
        ours = [row for row in recorded.history if "step" in row]
        theirs = [row for row in recorded.history if "train/global_step" in row]
        assert len(ours) + len(theirs) == len(recorded.history)  # every row is one tool's
        names = {key for row in ours for key in row if not key.startswith("_")} - {"step"}
        their_names = {key for row in theirs for key in row if not key.startswith("_")}
        assert not names & their_names
        assert {"train_step/loss", "train_step/learning_rate", "eval/eval_loss"} <= names
        assert {"train/loss", "eval/loss"} <= their_names
        assert [row["step"] for row in ours if "eval/eval_loss" in row] == [3, 6]
        assert [row["train/global_step"] for row in theirs if "eval/loss" in row] == [3, 6]
        assert recorded.step_metrics["*"] == "train/global_step"  # Hugging Face's, for its names
        assert {name: recorded.step_metrics[name] for name in names} == dict.fromkeys(names, "step")
        assert "eval/loss" not in recorded.step_metrics  # HF's eval chart is left on its own axis
        assert [row["step"] for row in ours if "train_step/loss" in row] == [2, 4, 6]
        assert recorded.exit_code == 0

    @pytest.mark.parametrize("first", ["hugging_face", "speedtronic"])
    def test_report_to_mlflow_beside_an_mlflow_hook_in_one_run(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: str
    ) -> None:
        """Trainer(report_to="mlflow") and an MlflowHook inside the user's mlflow.start_run(), with
        either callback first: one run, FINISHED, with no hook failure (strict_hooks) and no failed
        Hugging Face batch; HF's params (hub_token its placeholder) and both tools' metrics in it."""
        import mlflow
        from transformers.integrations import MLflowCallback

        from speedtronic.integrations import MlflowHook

        store = f"sqlite:///{tmp_path / 'mlflow.db'}"
        monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
        monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "beside-hf")
        mlflow.set_tracking_uri(store)
        mlflow.set_experiment("beside-hf")
        try:
            with mlflow.start_run() as run:
                logger = MetricLogger(stream=io.StringIO(), hooks=[MlflowHook()], strict_hooks=True)
                trainer = Trainer(
                    model=TinyRegressor(),
                    args=TrainingArguments(
                        str(tmp_path / "out"),
                        max_steps=4,
                        logging_steps=2,
                        eval_strategy="steps",
                        eval_steps=2,
                        save_strategy="no",
                        learning_rate=0.05,
                        report_to="mlflow",
                        use_cpu=True,
                        disable_tqdm=True,
                    ),
                    train_dataset=dataset(32, seed=0),
                    eval_dataset=dataset(8, seed=1),
                    callbacks=[SpeedtronicCallback(logger)],
                )
                if first == "speedtronic":  # Hugging Face's callback after ours: its params land last
                    trainer.pop_callback(MLflowCallback)
                    trainer.add_callback(MLflowCallback)
                trainer.train()
                trainer.evaluate()
                logger.close()
                assert dict(logger.hook_errors) == {}
        finally:
            mlflow.set_tracking_uri(None)  # back to the default (MLFLOW_TRACKING_URI)
        client = mlflow.MlflowClient(store)
        experiment = client.get_experiment_by_name("beside-hf")
        (only,) = client.search_runs([experiment.experiment_id])
        assert (only.info.run_id, only.info.status) == (run.info.run_id, "FINISHED")
        assert (only.data.params["hub_token"], only.data.params["learning_rate"]) == ("<HUB_TOKEN>", "0.05")
        assert not [key for key in only.data.tags if key.startswith("changed.")]
        assert {"train_step/loss", "eval/eval_loss", "loss", "eval_loss"} <= only.data.metrics.keys()

    def test_train_and_evaluate_leave_the_tensorboard_file_complete(self, tmp_path: Path) -> None:
        """Right after trainer.train() and trainer.evaluate() return (the logger still open), the
        TensorboardHook's event file holds every point: the callback flushes the hooks."""
        from speedtronic.integrations import TensorboardHook
        from tests.helpers import tensorboard_scalars

        hook = TensorboardHook(tmp_path / "tb", flush_secs=3600)  # only a flush writes the file
        logger = MetricLogger(stream=io.StringIO(), hooks=[hook])
        trainer = train(tmp_path, logger)
        assert [step for step, _ in tensorboard_scalars(tmp_path / "tb")["train_step/loss"]] == [2, 4, 6]
        trainer.evaluate(metric_key_prefix="test")
        assert [step for step, _ in tensorboard_scalars(tmp_path / "tb")["eval/test_loss"]] == [6]
        assert len(tensorboard_scalars(tmp_path / "tb")["eval/eval_loss"]) == 2  # its own series
        logger.close()

    def test_the_cadence_is_logging_steps_with_every_steps_1(self, tmp_path: Path) -> None:
        """A logger left at every_steps=20 drops HF's logs at steps 2, 4, 6: the docs' reason for 1."""
        logger = MetricLogger(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO(), every_steps=20)
        train(tmp_path, logger)
        logger.close()
        assert not [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["event"] == "train_step"]

    def test_only_the_main_process_emits(self, tmp_path: Path, logger: MetricLogger) -> None:
        """Called with the state of a process other than world process zero, nothing is emitted."""
        callback = SpeedtronicCallback(logger)
        args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
        state, control = TrainerState(is_world_process_zero=False, global_step=2), TrainerControl()
        callback.on_train_begin(args, state, control, model=TinyRegressor())
        callback.on_log(args, state, control, logs={"loss": 1.0})
        callback.on_save(args, state, control)
        callback.on_train_end(args, state, control)
        logger.close()
        assert not (tmp_path / "metrics.jsonl").exists() or read_jsonl(tmp_path / "metrics.jsonl") == []

    def test_train_steps_say_where_their_time_went(self, tmp_path: Path, logger: MetricLogger) -> None:
        """Each logged train_step has step_time_s, data_wait_s and compute_s: the sleeping dataset's
        draws are data wait, the sleeping forward passes compute, and both fit in the step."""
        pause, accumulated = 0.005, 2
        train(
            tmp_path,
            logger,
            model=SlowRegressor(pause),
            train_dataset=SlowDataset(dataset(64, seed=0), pause),
            gradient_accumulation_steps=accumulated,
            eval_strategy="no",
            save_strategy="no",
        )
        logger.close()
        steps = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["event"] == "train_step"]
        assert [r["step"] for r in steps] == [2, 4, 6]
        for record in steps:
            assert record["data_wait_s"] >= 4 * accumulated * pause  # 4 items a microbatch
            assert record["compute_s"] >= accumulated * pause  # one forward a microbatch
            assert record["data_wait_s"] + record["compute_s"] <= record["step_time_s"]

    def test_evaluations_and_checkpoints_carry_their_time(self, tmp_path: Path, logger: MetricLogger) -> None:
        """eval has eval_s (Hugging Face's eval_runtime), checkpoint save_s: the time the Trainer spent
        saving, not the evaluation before it."""
        pause = 0.02
        train(tmp_path, logger, model=SlowRegressor(pause))
        logger.close()
        records = read_jsonl(tmp_path / "metrics.jsonl")
        evals = [r for r in records if r["event"] == "eval"]
        assert [r["eval_s"] for r in evals] == [r["eval_runtime"] for r in evals]
        assert all(r["eval_s"] >= 2 * pause for r in evals)  # 16 items, 8 a batch
        checkpoints = [r for r in records if r["event"] == "checkpoint"]
        assert len(checkpoints) == 2
        assert all(r["save_s"] > 0 for r in checkpoints)

    def test_health_splits_a_hugging_face_run(self, tmp_path: Path, logger: MetricLogger) -> None:
        """speedtronic.runs.health reads the timing keys of an adapter run: goodput, and the lost time
        split into data waiting, evaluation and checkpoints."""
        from speedtronic.runs.health import run_health

        pause = 0.005
        train(
            tmp_path,
            logger,
            model=SlowRegressor(pause),
            train_dataset=SlowDataset(dataset(64, seed=0), pause),
            logging_steps=1,
        )
        logger.close()
        assert_health_split(tmp_path / "metrics.jsonl", 6, pause)
        health = run_health(tmp_path / "metrics.jsonl")
        command = [sys.executable, "-m", "speedtronic", "summarize", str(tmp_path / "metrics.jsonl")]
        done = subprocess.run([*command, "--health", "--json"], capture_output=True, text=True, check=True)
        assert json.loads(done.stdout)[0]["health"]["goodput"] == pytest.approx(health.goodput)

    def test_a_logger_that_is_no_metric_logger_is_refused(self) -> None:
        """SpeedtronicCallback names what it expected."""
        with pytest.raises(TypeError, match=r"expected a MetricLogger, got 'metrics\.jsonl'"):
            SpeedtronicCallback("metrics.jsonl")  # type: ignore[arg-type]
