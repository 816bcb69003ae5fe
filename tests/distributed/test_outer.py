"""The outer loop in one process (one worker, no process group): decisions, math, skips, failures."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pytest

from speedtronic.distributed import RankInfo, is_lead
from speedtronic.processors import ValidatePayloads
from speedtronic.processors.validate import payload_problems
from speedtronic.profiling import MetricLogger
from tests.training.recording import RecordingHook

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from speedtronic.training.outer import IDLE, IN_FLIGHT, OVERFLOW, OuterLoop, skip_reason  # noqa: E402
from speedtronic.training.trainer import Trainer  # noqa: E402

INNER_LR = 0.1
EVERY = 2


def make_loop(steps: int, **outer: Any) -> tuple[Trainer, OuterLoop, RecordingHook]:
    """A one-weight model whose gradient is always 1: each inner SGD step lowers it by INNER_LR."""
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1, bias=False)
    hook = RecordingHook()
    logger = MetricLogger(
        stream=io.StringIO(), hooks=[hook], background_hooks=False, processors=[ValidatePayloads(strict=True)]
    )
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=INNER_LR),
        [(torch.ones(1, 1), torch.zeros(1, 1))],
        steps=steps,
        loss_fn=lambda outputs, targets: outputs.sum(),
        logger=logger,
        device="cpu",
        max_grad_norm=None,
    )
    return trainer, OuterLoop(trainer, EVERY, **outer), hook


def run(trainer: Trainer, loop: OuterLoop) -> None:
    try:
        trainer.fit()
    finally:
        loop.close()
        trainer.logger.close()


def sync_before_each_boundary(trainer: Trainer, loop: OuterLoop) -> None:
    """One step before each boundary, wait for the exchange: every boundary uploads."""
    trainer.after_optimizer_step.append(lambda t: loop.wait() if (t.step + 1) % EVERY == 0 else None)


class TestSkipReason:
    def test_agreed_states(self) -> None:
        """All idle uploads; a running exchange anywhere skips as in_flight; a queued one as overflow."""
        reasons = [skip_reason(state) for state in (IDLE, IN_FLIGHT, OVERFLOW)]
        assert reasons == [None, "in_flight", "overflow"]


class TestOuterMath:
    def test_nesterov_against_a_hand_computation(self) -> None:
        """Three outer steps of SGD(lr 0.7, Nesterov momentum 0.9) on the delta, computed by hand."""
        trainer, loop, hook = make_loop(steps=3 * EVERY)
        start = trainer.model.weight.item()
        sync_before_each_boundary(trainer, loop)
        run(trainer, loop)

        delta = EVERY * INNER_LR  # every phase lowers the weight by this, whatever it starts from
        expected, momentum = start, 0.0
        for _ in range(3):
            momentum = 0.9 * momentum + delta
            expected -= 0.7 * (delta + 0.9 * momentum)
        assert trainer.model.weight.item() == pytest.approx(expected, rel=1e-6)
        outer = hook.named("outer_step")
        assert [(p["outer_step"], p["step"], p["lag"]) for p in outer] == [(1, 2, 0), (2, 4, 1), (3, 6, 1)]
        assert [(p["candidates"], p["included"]) for p in outer] == [(1, 1)] * 3

    def test_momentum_zero_is_plain_sgd(self) -> None:
        """outer_momentum 0: each outer step moves the weight by lr times the delta."""
        trainer, loop, _ = make_loop(steps=2 * EVERY, lr=0.5, momentum=0.0)
        start = trainer.model.weight.item()
        sync_before_each_boundary(trainer, loop)
        run(trainer, loop)
        assert trainer.model.weight.item() == pytest.approx(start - 2 * 0.5 * EVERY * INNER_LR, rel=1e-6)

    def test_bad_arguments(self) -> None:
        """every < 1, lr <= 0 or momentum outside [0, 1) are refused."""
        trainer, loop, _ = make_loop(steps=1)
        loop.close()
        for kwargs in ({"every": 0}, {"every": 1, "lr": 0}, {"every": 1, "momentum": 1.0}):
            with pytest.raises(ValueError, match="need every >= 1"):
                OuterLoop(trainer, **kwargs)
        trainer.logger.close()


class TestPipeline:
    def test_in_flight_exchange_skips_the_next_delta(self) -> None:
        """An exchange still running at the next boundary skips that delta (in_flight); the one after
        uploads, and its delta covers the skipped phase too."""
        trainer, loop, hook = make_loop(steps=3 * EVERY)
        entered, release = threading.Event(), threading.Event()

        def blocking(tensor: Any) -> None:
            entered.set()
            release.wait()

        loop.reduce = blocking

        def gate(t: Trainer) -> None:
            if t.step == EVERY:
                entered.wait()  # the first exchange is running: the next boundary finds it in flight
            elif t.step == 2 * EVERY:
                release.set()
                loop.wait()

        trainer.after_optimizer_step.append(gate)
        run(trainer, loop)
        outer_events = [
            (event, payload["local_step"], payload.get("reason"))
            for event, payload in hook.events
            if event in ("delta_upload_queued", "delta_upload_skipped")
        ]
        assert outer_events == [
            ("delta_upload_queued", 2, None),
            ("delta_upload_skipped", 4, "in_flight"),
            ("delta_upload_queued", 6, None),
        ]
        assert [p["lag"] for p in hook.named("outer_step")] == [0, 1]
        for event, payload in hook.events:
            assert payload_problems(event, payload) == [], event

    def test_a_failed_exchange_costs_its_outer_step_only(self) -> None:
        """An exchange that raises is reported; training goes on and the next exchange applies."""
        trainer, loop, hook = make_loop(steps=3 * EVERY)
        calls = []

        def flaky(tensor: Any) -> None:
            calls.append(1)
            if len(calls) == 2:
                raise RuntimeError("injected exchange failure")

        loop.reduce = flaky
        sync_before_each_boundary(trainer, loop)
        run(trainer, loop)
        (failed,) = hook.named("delta_upload_failed")
        assert (failed["local_step"], failed["error"]) == (4, "RuntimeError: injected exchange failure")
        outer = [(p["outer_step"], p["step"], p["lag"]) for p in hook.named("outer_step")]
        assert outer == [(1, 2, 0), (2, 6, 0)]
        assert hook.named("train_end")[0]["step"] == 3 * EVERY

    def test_a_non_finite_delta_is_left_out(self) -> None:
        """A rank whose delta is NaN contributes nothing; with no delta left, the exchange fails."""
        trainer, loop, hook = make_loop(steps=EVERY)
        trainer.after_optimizer_step.insert(0, lambda t: t.model.weight.data.fill_(float("nan")))
        run(trainer, loop)
        (failed,) = hook.named("delta_upload_failed")
        assert failed["error"] == "RuntimeError: no rank had a finite delta"
        assert hook.named("outer_step") == []


class TestLeadRank:
    def test_is_lead(self) -> None:
        """The lead rank, or every rank when lead_rank is None."""
        assert is_lead(RankInfo(0, 2))
        assert not is_lead(RankInfo(1, 2))
        assert is_lead(RankInfo(1, 2), None)
        assert is_lead(RankInfo(1, 2), 1)

    def test_build_logger_builds_hooks_on_the_lead_rank_only(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Rank 1 of a launcher's job constructs no hook (a WandbHook would create a second run)."""
        from speedtronic.runtime import build_logger

        built = tmp_path / "built"
        config = {
            "run_dir": str(tmp_path / "run"),
            "logging": {"hooks": [{"type": "tests.distributed.test_outer:CountingHook", "path": str(built)}]},
        }
        for rank in ("1", "0"):
            monkeypatch.setenv("RANK", rank)
            monkeypatch.setenv("WORLD_SIZE", "2")
            with build_logger(config) as logger:
                assert logger.rank == RankInfo(int(rank), 2, 0, "env:RANK")
                assert logger.is_lead == (rank == "0")
        assert built.read_text() == "built\n"


class CountingHook(RecordingHook):
    """Appends a line to ``path`` when constructed."""

    def __init__(self, path: str) -> None:
        super().__init__()
        with open(path, "a", encoding="utf-8") as file:
            file.write("built\n")
