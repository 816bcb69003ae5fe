"""The reference trainer's evaluation, and how summarize and plot show it."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from speedtronic.profiling import MetricLogger  # noqa: E402  # after the torch skip
from speedtronic.runs.plot import plot_runs  # noqa: E402
from speedtronic.runs.summary import summarize_run  # noqa: E402
from speedtronic.training.task import SuccessorTask  # noqa: E402
from tests.training.test_trainer import SEQ, fit, make_trainer  # noqa: E402


def losses(hook: object, event: str) -> list[tuple[int, float]]:
    return [(p["step"], p["loss"]) for p in hook.named(event)]  # type: ignore[attr-defined]


class TestTrainerEvaluates:
    def test_eval_every_n_steps_and_at_the_end(self, tmp_path: Path) -> None:
        """eval_every=2 over 5 steps: eval at 2, 4 and 5, each a finite held-out loss with perplexity."""
        held_out = SuccessorTask(16, SEQ, 4, noise=0.0, seed=7).held_out(2)
        trainer, hook = make_trainer(tmp_path, steps=5, eval_data=held_out, eval_every=2)
        fit(trainer)
        evals = hook.named("eval")
        assert [p["step"] for p in evals] == [2, 4, 5]
        assert all(math.isfinite(p["loss"]) for p in evals)
        assert [p["perplexity"] for p in evals] == pytest.approx([math.exp(p["loss"]) for p in evals])

    def test_evaluation_changes_no_training_step(self, tmp_path: Path) -> None:
        """The same seed with and without evaluation: the training losses are identical."""
        held_out = SuccessorTask(16, SEQ, 4, noise=0.0, seed=7).held_out(2)
        plain, plain_hook = make_trainer(tmp_path / "a", steps=4)
        fit(plain)
        evaluated, eval_hook = make_trainer(tmp_path / "b", steps=4, eval_data=held_out, eval_every=1)
        fit(evaluated)
        assert losses(eval_hook, "train_step") == losses(plain_hook, "train_step")

    def test_the_held_out_split_is_fixed_and_apart_from_training(self) -> None:
        """held_out gives the same batches each time, and drawing it doesn't move the training stream."""
        task = SuccessorTask(16, SEQ, 4, noise=0.0, seed=3)
        twin = SuccessorTask(16, SEQ, 4, noise=0.0, seed=3)
        first, again = task.held_out(2), task.held_out(2)
        assert all(torch.equal(a[0], b[0]) for a, b in zip(first, again, strict=True))
        assert torch.equal(next(iter(task))[0], next(iter(twin))[0])


@pytest.fixture
def run_with_eval(tmp_path: Path) -> Path:
    path = tmp_path / "metrics.jsonl"
    with MetricLogger(stream=io.StringIO(), json_file=path) as logger:
        for step, loss in ((1, 2.0), (2, 1.5), (3, 1.2), (4, 1.0)):
            logger.emit("train_step", {"step": step, "loss": loss})
            if step % 2 == 0:
                logger.emit("eval", {"step": step, "loss": loss + (0.9 if step == 4 else 0.1)})
        logger.emit("eval", {"step": 4, "loss": 0.1, "split": "test"})
    return path


def test_summarize_shows_the_last_and_best_eval_loss(run_with_eval: Path) -> None:
    """Last and best held-out loss with their steps; a test split's record is not among them."""
    summary = summarize_run(run_with_eval)
    assert (summary.eval_loss_last, summary.eval_loss_last_step) == (1.9, 4)
    assert (summary.eval_loss_best, summary.eval_loss_best_step) == (1.6, 2)


def test_plot_draws_eval_beside_train_step(run_with_eval: Path, tmp_path: Path) -> None:
    """train_step's loss and each split's eval loss as series of one panel, the test split apart from
    the held-out one; with_eval=False leaves eval out."""
    pytest.importorskip("matplotlib")
    result = plot_runs([run_with_eval], tmp_path / "p.png", keys=["loss"], labels=["run"])
    assert [(s.event, s.split, list(s.x)) for s in result.series] == [
        ("train_step", None, [1, 2, 3, 4]),
        ("eval", "eval", [2, 4]),
        ("eval", "test", [4]),
    ]
    alone = plot_runs([run_with_eval], tmp_path / "q.png", keys=["loss"], with_eval=False)
    assert [s.event for s in alone.series] == ["train_step"]
