"""SpeedtronicTracker on a real ``accelerate.Accelerator``, beside Accelerate's own TensorBoard tracker:
a tiny regression model trained on the CPU, read back from the JSONL and with ``EventAccumulator``."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import pytest
import torch

accelerate = pytest.importorskip("accelerate")
pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from speedtronic.integrations.accelerate import SpeedtronicTracker  # noqa: E402  # after the skips
from speedtronic.profiling import MetricLogger  # noqa: E402
from tests.helpers import Journal, read_jsonl  # noqa: E402

CONFIG = {"lr": 0.05, "batch_size": 4, "model": "linear"}


def train(tmp_path: Path, tracker: SpeedtronicTracker) -> None:
    """Six optimizer steps, a training log every step and a validation log every third, as the
    Accelerate examples do, into TensorBoard and ``tracker``."""
    accelerator = accelerate.Accelerator(cpu=True, log_with=["tensorboard", tracker], project_dir=tmp_path)
    accelerator.init_trackers("tiny", config=CONFIG)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(24, 4, generator=generator)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0])
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=CONFIG["lr"])
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    for step, (inputs, targets) in enumerate(data, start=1):
        loss = torch.nn.functional.mse_loss(model(inputs).squeeze(-1), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        accelerator.log({"train_loss": loss.item(), "lr": CONFIG["lr"]}, step=step)
        if step % 3 == 0:
            accelerator.log({"valid_loss": loss.item() / 2, "epoch": 0}, step=step)
    accelerator.end_training()


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(log_dir))
    events.Reload()
    return {tag: [(s.step, s.value) for s in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


class TestSpeedtronicTracker:
    def test_beside_accelerates_tensorboard_tracker(self, tmp_path: Path) -> None:
        """Same steps, splits, config and end as Accelerate's TensorBoard tracker: train_loss at 1-6 in
        train_step records, valid_loss at 3 and 6 in eval records (split "valid"), the config as
        hyperparams, train_start first and train_end (completed, at 6) last."""
        tracker = SpeedtronicTracker(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO())
        train(tmp_path, tracker)
        assert tracker.tracker is not None
        assert tracker.tracker.closed  # end_training() closed the logger the tracker built

        board = scalars(tmp_path / "tiny")
        records = read_jsonl(tmp_path / "metrics.jsonl")
        assert [r["event"] for r in records][:2] == ["hyperparams", "train_start"]
        assert records[0]["config"] == CONFIG
        steps = [r for r in records if r["event"] == "train_step"]
        assert [(r["step"], r["train_loss"]) for r in steps] == [
            (step, pytest.approx(value)) for step, value in board["train_loss"]
        ]
        assert [r["step"] for r in steps] == [1, 2, 3, 4, 5, 6]
        evals = [r for r in records if r["event"] == "eval"]
        assert [(r["step"], r["split"], r["valid_loss"]) for r in evals] == [
            (step, "valid", pytest.approx(value)) for step, value in board["valid_loss"]
        ]
        assert [r["step"] for r in evals] == [3, 6]
        assert all(r["epoch"] == 0 for r in evals)
        end = records[-1]
        assert (end["event"], end["status"], end["step"]) == ("train_end", "completed", 6)
        assert end["final_loss"] == steps[-1]["train_loss"]

    def test_a_given_logger_is_flushed_not_closed(self, tmp_path: Path) -> None:
        """logger= is the user's: end_training() ends the span and flushes; the user closes it."""
        journal: list[str] = []
        logger = MetricLogger(stream=io.StringIO(), hooks=[Journal("hook", journal)])
        tracker = SpeedtronicTracker(logger)
        train(tmp_path, tracker)
        assert not logger.closed
        assert journal[-1] == "hook train_end"
        logger.close()
        assert journal[-1] == "hook close"

    def test_bad_arguments_are_refused(self) -> None:
        """A logger that is no MetricLogger, or logger= with MetricLogger's arguments: a TypeError."""
        with pytest.raises(TypeError, match="expected a MetricLogger"):
            SpeedtronicTracker(object())  # type: ignore[arg-type]
        logger = MetricLogger(stream=io.StringIO())
        with pytest.raises(TypeError, match="not both"):
            SpeedtronicTracker(logger, json_file="x.jsonl")
        logger.close()

    def test_a_call_without_a_step_has_no_step(self, tmp_path: Path) -> None:
        """accelerator.log(values) without step=: the train_step has no step key."""
        tracker = SpeedtronicTracker(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO())
        accelerator = accelerate.Accelerator(cpu=True, log_with=[tracker])
        accelerator.init_trackers("tiny")
        accelerator.log({"loss": 0.5})
        accelerator.end_training()
        records: list[dict[str, Any]] = read_jsonl(tmp_path / "metrics.jsonl")
        step = next(r for r in records if r["event"] == "train_step")
        assert step["loss"] == 0.5
        assert "step" not in step


def test_emit_metrics_is_public_for_an_adapter_of_your_own() -> None:
    """speedtronic.integrations.emit_metrics routes as the adapters do: valid_loss to an eval record
    (split valid), the rest to a train_step after TrainSpan's train_start."""
    from speedtronic.integrations import TrainSpan, emit_metrics
    from speedtronic.testing import capture_events

    span = TrainSpan()
    with MetricLogger(stream=io.StringIO()) as logger, capture_events(logger) as events:
        emit_metrics(logger, 1, {"loss": 0.5}, span)
        emit_metrics(logger, 1, {"valid_loss": 0.25, "epoch": 0}, span)
        span.end(logger, "completed")
    assert [(e["event"], e.get("split")) for e in events] == [
        ("train_start", None),
        ("train_step", None),
        ("eval", "valid"),
        ("train_end", None),
    ]


def test_emit_metrics_adds_measured_timing_without_routing_it() -> None:
    """emit_metrics(timing=...): the keys land on the record after the metrics, eval_s stays on the
    test split's eval record (no eval record of its own), and a metric logged under the same name
    wins."""
    from speedtronic.integrations import emit_metrics
    from speedtronic.testing import capture_events

    with MetricLogger(stream=io.StringIO()) as logger, capture_events(logger) as events:
        emit_metrics(logger, 2, {"loss": 0.5}, timing={"step_time_s": 0.25, "data_wait_s": 0.125})
        emit_metrics(logger, 2, {"test_loss": 0.75}, timing={"eval_s": 1.5})
        emit_metrics(logger, 3, {"loss": 0.5, "step_time_s": 9.0}, timing={"step_time_s": 0.25})
    assert [(e["event"], e.get("split")) for e in events] == [
        ("train_step", None),
        ("eval", "test"),
        ("train_step", None),
    ]
    assert list(events[0])[:5] == ["event", "step", "loss", "step_time_s", "data_wait_s"]
    assert events[1]["eval_s"] == 1.5
    assert events[2]["step_time_s"] == 9.0


def test_a_loop_that_logs_its_own_timing_keys_has_health(tmp_path: Path) -> None:
    """Accelerate exposes no step boundaries to a tracker: a loop that times itself and logs
    step_time_s, data_wait_s and compute_s with accelerator.log gets goodput from
    speedtronic.runs.health, the keys kept under their names."""
    from speedtronic.runs.health import run_health

    tracker = SpeedtronicTracker(json_file=tmp_path / "metrics.jsonl", stream=io.StringIO())
    accelerator = accelerate.Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("tiny")
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(24, 4, generator=torch.Generator().manual_seed(0))
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(-1)), batch_size=4)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    batches = iter(data)
    for step in range(1, len(data) + 1):
        began = time.perf_counter()
        inputs, targets = next(batches)
        drawn = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(inputs).squeeze(-1), targets)
        accelerator.backward(loss)
        computed = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad()
        timing = {"step_time_s": time.perf_counter() - began, "data_wait_s": drawn - began}
        accelerator.log({"loss": loss.item(), **timing, "compute_s": computed - drawn}, step=step)
    accelerator.end_training()
    steps = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["event"] == "train_step"]
    assert all({"step_time_s", "data_wait_s", "compute_s"} <= r.keys() for r in steps)
    health = run_health(tmp_path / "metrics.jsonl")
    assert health.goodput is not None
    assert 0 < health.goodput < 1
    assert health.steps == 6
