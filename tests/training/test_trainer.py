from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from speedtronic.processors import ValidatePayloads
from speedtronic.processors.validate import payload_problems
from speedtronic.profiling import MetricLogger
from speedtronic.training.task import SuccessorTask, successor_model
from speedtronic.training.trainer import FitResult, Trainer, latest_checkpoint

from .recording import RecordingHook

BATCH, SEQ = 4, 8


class RawPayloads(MetricLogger):
    """A real MetricLogger that also keeps what the trainer handed to ``emit``, before any conversion."""

    def __init__(self, **kwargs: Any) -> None:
        self.text = io.StringIO()
        super().__init__(stream=self.text, processors=[ValidatePayloads(strict=True)], **kwargs)
        self.raw: list[tuple[str, dict[str, Any]]] = []

    def emit(self, event: str, payload: Any, *, level: str | None = None) -> bool:
        self.raw.append((event, dict(payload)))
        return super().emit(event, payload, level=level)


def make_trainer(
    tmp_path: Path, *, steps: int = 10, hidden: int = 16, every_steps: int = 1, seed: int = 0, **kwargs: Any
) -> tuple[Trainer, RecordingHook]:
    torch.manual_seed(seed)
    hook = RecordingHook()
    logger = RawPayloads(every_steps=every_steps, hooks=[hook])
    options: dict[str, Any] = {"device": "cpu", "checkpoint_dir": tmp_path / "ckpt"}
    options.update(kwargs)
    model = successor_model(16, hidden)
    trainer = Trainer(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-2),
        SuccessorTask(16, SEQ, BATCH, noise=0.0, seed=seed),
        steps=steps,
        logger=logger,
        **options,
    )
    return trainer, hook


def fit(trainer: Trainer) -> FitResult:
    try:
        return trainer.fit()
    finally:
        trainer.logger.close()


class TestEvents:
    def test_a_run_emits_the_training_events_in_order(self, tmp_path: Path) -> None:
        """start, shape profile, one train_step per step, checkpoints every N and at the end, end."""
        trainer, hook = make_trainer(tmp_path, steps=5, checkpoint_every=2)
        fit(trainer)
        journal = [(event, payload.get("step")) for event, payload in hook.events]
        assert journal == [
            ("train_start", None),
            ("shape_profile", None),
            ("ooo_backprop", None),
            ("train_step", 1),
            ("train_step", 2),
            ("checkpoint", 2),
            ("train_step", 3),
            ("train_step", 4),
            ("checkpoint", 4),
            ("train_step", 5),
            ("checkpoint", 5),
            ("train_end", 5),
        ]
        assert hook.closed == 1

    def test_every_payload_validates_against_its_typeddict(self, tmp_path: Path) -> None:
        """Every event, as emitted (tensors) and as hooks receive it (numbers), matches the catalog."""
        trainer, hook = make_trainer(
            tmp_path, steps=4, checkpoint_every=2, grad_accum=2, hidden=12, compile="no_such_backend"
        )
        fit(trainer)
        emitted = {event for event, _ in hook.events}
        assert emitted == {
            "train_start",
            "shape_profile",
            "shape_warning",
            "ooo_backprop",
            "compile",
            "train_step",
            "checkpoint",
            "train_end",
        }
        assert isinstance(trainer.logger, RawPayloads)
        for event, payload in [*trainer.logger.raw, *hook.events]:
            assert payload_problems(event, payload) == [], event

    def test_losses_reach_the_logger_as_detached_0d_tensors(self, tmp_path: Path) -> None:
        """loss and grad_norm are device tensors until the logger converts them for a logged step."""
        trainer, hook = make_trainer(tmp_path, steps=4, every_steps=2)
        fit(trainer)
        assert isinstance(trainer.logger, RawPayloads)
        steps = [payload for event, payload in trainer.logger.raw if event == "train_step"]
        assert len(steps) == 4
        for payload in steps:
            for key in ("loss", "grad_norm"):
                assert isinstance(payload[key], torch.Tensor)
                assert payload[key].ndim == 0
                assert not payload[key].requires_grad
        logged = hook.named("train_step")
        assert [p["step"] for p in logged] == [2, 4]
        assert all(type(p["loss"]) is float and type(p["grad_norm"]) is float for p in logged)

    def test_train_step_counts_microbatches_samples_and_tokens(self, tmp_path: Path) -> None:
        """With grad_accum=3, each step is 3 microbatches; counters and rates follow."""
        trainer, hook = make_trainer(tmp_path, steps=2, grad_accum=3)
        result = fit(trainer)
        first, second = hook.named("train_step")
        assert first["microbatches"] == second["microbatches"] == 3
        assert (first["samples"], first["tokens"]) == (3 * BATCH, 3 * BATCH * SEQ)
        assert (second["samples"], second["tokens"]) == (6 * BATCH, 6 * BATCH * SEQ)
        assert second["tokens_per_s"] == pytest.approx(second["samples_per_s"] * SEQ, rel=1e-3)
        assert second["samples_per_s"] > 0
        assert result.samples_per_s > 0
        assert hook.named("train_start")[0]["grad_accum"] == 3

    def test_start_reports_the_run(self, tmp_path: Path) -> None:
        """train_start carries steps, device, precision and the trainable parameter count."""
        trainer, hook = make_trainer(tmp_path, steps=1)
        fit(trainer)
        parameters = sum(p.numel() for p in trainer.model.parameters())
        assert hook.named("train_start") == [
            {
                "start_step": 0,
                "target_step": 1,
                "device": "cpu",
                "precision": "fp32",
                "grad_accum": 1,
                "parameters": parameters,
                "flops_per_token": 6 * parameters,
                "elapsed_s": hook.named("train_start")[0]["elapsed_s"],
                "timestamp": hook.named("train_start")[0]["timestamp"],
            }
        ]

    def test_lr_is_the_one_each_step_used(self, tmp_path: Path) -> None:
        """With a schedule, step N reports the LR before the schedule's N-th step."""
        trainer, hook = make_trainer(tmp_path, steps=3)
        trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.optimizer, lambda s: 1 / (s + 1))
        fit(trainer)
        assert [p["lr"] for p in hook.named("train_step")] == pytest.approx([1e-2, 5e-3, 1e-2 / 3])


class TestResult:
    def test_fit_returns_steps_time_and_final_loss(self, tmp_path: Path) -> None:
        """The result has the absolute step, the time taken and the last step's loss, as train_end does."""
        trainer, hook = make_trainer(tmp_path, steps=6)
        result = fit(trainer)
        (end,) = hook.named("train_end")
        last = hook.named("train_step")[-1]
        assert (result.step, result.start_step, result.steps_run) == (6, 0, 6)
        assert result.final_loss == end["final_loss"] == last["loss"]
        assert 0 < result.duration_s == end["duration_s"]

    def test_the_model_learns(self, tmp_path: Path) -> None:
        """On the noiseless task the loss falls well below its start within 30 steps."""
        trainer, hook = make_trainer(tmp_path, steps=30, hidden=32)
        result = fit(trainer)
        losses = [p["loss"] for p in hook.named("train_step")]
        assert losses[0] > math.log(16) * 0.9
        assert result.final_loss is not None
        assert result.final_loss < losses[0] / 3


class TestCheckpoints:
    def test_resume_continues_from_the_latest_checkpoint(self, tmp_path: Path) -> None:
        """A new trainer with resume=True goes on from the latest checkpoint's step, weights and counters."""
        first, first_hook = make_trainer(tmp_path, steps=12, checkpoint_every=5)
        fit(first)
        assert latest_checkpoint(tmp_path / "ckpt") == tmp_path / "ckpt" / "step_00000012.pt"

        second, hook = make_trainer(tmp_path, steps=15, checkpoint_every=5, resume=True)
        calls: list[int] = []
        second.after_optimizer_step.append(lambda trainer: calls.append(trainer.step))
        result = fit(second)
        assert hook.named("train_start")[0]["start_step"] == 12
        assert [p["step"] for p in hook.named("train_step")] == calls == [13, 14, 15]
        assert hook.named("train_step")[0]["samples"] == 13 * BATCH
        assert (result.start_step, result.steps_run, result.step) == (12, 3, 15)
        assert [p["step"] for p in hook.named("checkpoint")] == [15]
        # The trained weights came back: the loss goes on from where it was, not from a fresh model's.
        losses = [p["loss"] for p in first_hook.named("train_step")]
        resumed = hook.named("train_step")[0]["loss"]
        assert abs(resumed - losses[-1]) < abs(resumed - losses[0]) / 2

    def test_load_checkpoint_restores_weights_and_optimizer(self, tmp_path: Path) -> None:
        """Weights, optimizer state and step come back exactly."""
        first, _ = make_trainer(tmp_path, steps=3, checkpoint_every=3)
        fit(first)
        second, _ = make_trainer(tmp_path, steps=3, seed=5)
        second.load_checkpoint(tmp_path / "ckpt" / "step_00000003.pt")
        second.logger.close()
        for key, value in first.model.state_dict().items():
            assert torch.equal(second.model.state_dict()[key], value)
        assert second.optimizer.state_dict()["state"][0]["step"] == 3
        assert (second.step, second.samples) == (3, 3 * BATCH)

    def test_a_resumed_run_at_its_target_trains_nothing(self, tmp_path: Path) -> None:
        """Resuming at the target emits start and end and runs no step; final_loss is None."""
        fit(make_trainer(tmp_path, steps=2, checkpoint_every=2)[0])
        trainer, hook = make_trainer(tmp_path, steps=2, checkpoint_every=2, resume=True)
        result = fit(trainer)
        assert (result.steps_run, result.final_loss) == (0, None)
        events = [event for event, _ in hook.events]
        assert events == ["train_start", "shape_profile", "ooo_backprop", "train_end"]

    def test_a_feature_that_is_off_is_a_debug_line(self, tmp_path: Path) -> None:
        """ooo_backprop enabled=False stays out of the INFO text log; hooks still get it."""
        trainer, hook = make_trainer(tmp_path, steps=1)
        fit(trainer)
        assert isinstance(trainer.logger, RawPayloads)
        text = trainer.logger.text.getvalue()
        assert "train_start" in text
        assert "ooo_backprop" not in text
        assert "ooo_backprop" in [event for event, _ in hook.events]

    def test_resume_without_a_checkpoint_starts_at_zero(self, tmp_path: Path) -> None:
        """resume=True with an empty checkpoint directory trains from step 0."""
        trainer, _hook = make_trainer(tmp_path, steps=2, resume=True)
        assert fit(trainer).start_step == 0

    def test_no_partial_checkpoint_files_remain(self, tmp_path: Path) -> None:
        """Checkpoints are written atomically: only step_<N>.pt files are left."""
        fit(make_trainer(tmp_path, steps=4, checkpoint_every=2)[0])
        names = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
        assert names == ["step_00000002.pt", "step_00000004.pt"]


class TestCompile:
    def test_a_failing_compile_falls_back_to_eager_and_says_why(self, tmp_path: Path) -> None:
        """An unknown backend: compile reports enabled=False with the reason, training still completes."""
        trainer, hook = make_trainer(tmp_path, steps=3, compile="no_such_backend")
        result = fit(trainer)
        (event,) = hook.named("compile")
        assert event["enabled"] is False
        assert event["backend"] == "no_such_backend"
        assert "InvalidBackend" in event["reason"]
        assert "no_such_backend" in event["reason"]
        assert result.step == 3
        assert result.final_loss is not None
        assert math.isfinite(result.final_loss)

    def test_a_working_compile_trains_compiled(self, tmp_path: Path) -> None:
        """The eager backend (dynamo tracing, no C++ toolchain) compiles: enabled=True with its time."""
        trainer, hook = make_trainer(tmp_path, steps=2, compile="eager")
        fit(trainer)
        (event,) = hook.named("compile")
        assert event["enabled"] is True
        assert event["backend"] == "eager"
        assert event["compile_s"] > 0
        assert trainer._forward is not trainer.model

    def test_no_compile_event_unless_asked(self, tmp_path: Path) -> None:
        """compile=False: no compile event."""
        trainer, hook = make_trainer(tmp_path, steps=1)
        fit(trainer)
        assert hook.named("compile") == []


class TestPrecisionAndShapes:
    def test_bf16_autocast_trains_on_cpu(self, tmp_path: Path) -> None:
        """precision='bf16' trains under autocast and is reported; alignment doubles for 2-byte values."""
        trainer, hook = make_trainer(tmp_path, steps=3, precision="bf16")
        result = fit(trainer)
        assert hook.named("train_start")[0]["precision"] == "bf16"
        assert hook.named("shape_profile")[0]["alignment"] == 16
        assert result.final_loss is not None
        assert math.isfinite(result.final_loss)

    def test_misaligned_sizes_warn(self, tmp_path: Path) -> None:
        """A hidden size of 12 on a CPU at fp32 (alignment 8): one shape_warning per layer size using it."""
        trainer, hook = make_trainer(tmp_path, steps=1, hidden=12)
        fit(trainer)
        assert hook.named("shape_profile")[0] | {"elapsed_s": 0, "timestamp": ""} == {
            "device": "cpu",
            "precision": "fp32",
            "alignment": 8,
            "warnings": 4,
            "elapsed_s": 0,
            "timestamp": "",
        }
        warnings = [(p["field"], p["value"], p["suggested"]) for p in hook.named("shape_warning")]
        assert warnings == [
            ("0.embedding_dim", 12, 16),
            ("1.in_features", 12, 16),
            ("1.out_features", 12, 16),
            ("3.in_features", 12, 16),
        ]

    def test_aligned_sizes_do_not_warn(self, tmp_path: Path) -> None:
        """The sizes 16 and 32 are multiples of 8: a profile with 0 warnings, no shape_warning."""
        trainer, hook = make_trainer(tmp_path, steps=1, hidden=32)
        fit(trainer)
        assert hook.named("shape_profile")[0]["warnings"] == 0
        assert hook.named("shape_warning") == []


class TestData:
    def test_a_finite_iterable_is_iterated_again(self, tmp_path: Path) -> None:
        """A list of 2 batches serves 5 steps."""
        trainer, _ = make_trainer(tmp_path, steps=5)
        trainer.data = [next(iter(SuccessorTask(16, SEQ, BATCH, 0.0, seed=0))) for _ in range(2)]
        assert fit(trainer).step == 5

    def test_an_exhausted_iterator_is_an_error_naming_the_step(self, tmp_path: Path) -> None:
        """An iterator of 2 batches can't serve step 3: ValueError naming it."""
        trainer, _ = make_trainer(tmp_path, steps=5)
        batches = iter(SuccessorTask(16, SEQ, BATCH, 0.0, seed=0))
        trainer.data = iter([next(batches), next(batches)])
        with pytest.raises(ValueError, match="no batch at step 3"):
            fit(trainer)


class TestArguments:
    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"precision": "fp16"}, "precision must be one of fp32, bf16, got 'fp16'"),
            ({"grad_accum": 0}, "grad_accum >= 1"),
            ({"checkpoint_every": 5, "checkpoint_dir": None}, "checkpoint_every needs a checkpoint_dir"),
        ],
    )
    def test_bad_arguments_fail_at_construction(
        self, tmp_path: Path, options: dict[str, Any], message: str
    ) -> None:
        """Wrong settings are refused before training, with the setting named."""
        with pytest.raises(ValueError, match=message):
            make_trainer(tmp_path, **options)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
class TestCuda:
    def test_trains_on_the_gpu_and_reports_its_memory(self, tmp_path: Path) -> None:
        """device='auto' picks CUDA; train_step reports memory_bytes; bf16 works there."""
        trainer, hook = make_trainer(tmp_path, steps=3, device="auto", precision="bf16")
        result = fit(trainer)
        assert trainer.device.type == "cuda"
        assert hook.named("train_start")[0]["device"] == f"cuda:{torch.cuda.current_device()}"
        assert all(p["memory_bytes"] > 0 for p in hook.named("train_step"))
        assert hook.named("shape_profile")[0]["alignment"] == 8
        assert result.final_loss is not None
        assert math.isfinite(result.final_loss)
