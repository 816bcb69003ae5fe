"""``train_end`` says how a ``fit()`` ended: completed, interrupted or failed (with the error)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from speedtronic.processors import ValidatePayloads  # noqa: E402  # after the torch skip
from speedtronic.processors.validate import payload_problems  # noqa: E402  # after the torch skip
from speedtronic.profiling import MetricLogger  # noqa: E402
from speedtronic.training.task import SuccessorTask, successor_model  # noqa: E402
from speedtronic.training.trainer import Trainer  # noqa: E402
from tests.helpers import read_jsonl  # noqa: E402


def batches(stop_after: int, error: BaseException) -> Iterator[Any]:
    """The successor task's batches, then ``error`` raised while drawing the next one."""
    for index, batch in enumerate(SuccessorTask(16, 8, 4, noise=0.0, seed=0)):
        if index == stop_after:
            raise error
        yield batch


def fit(tmp_path: Path, data: Any, steps: int = 5) -> list[dict[str, Any]]:
    """Fit on ``data`` with a JSONL file and a text log (``tmp_path/text``); the records the JSONL
    holds once the logger is closed."""
    model = successor_model(16, 16)
    text = (tmp_path / "text").open("w")
    logger = MetricLogger(
        stream=text, json_file=tmp_path / "m.jsonl", every_steps=1, processors=[ValidatePayloads(strict=True)]
    )
    trainer = Trainer(
        model, torch.optim.AdamW(model.parameters()), data, steps=steps, logger=logger, device="cpu"
    )
    try:
        trainer.fit()
    finally:
        logger.close()
        text.close()
    return read_jsonl(tmp_path / "m.jsonl")


def last_line(tmp_path: Path) -> str:
    return (tmp_path / "text").read_text().splitlines()[-1]


def test_a_finished_fit_ends_completed(tmp_path: Path) -> None:
    """train_end status=completed, without an error, at the target step."""
    end = fit(tmp_path, SuccessorTask(16, 8, 4, noise=0.0, seed=0))[-1]
    assert (end["event"], end["status"], end["step"]) == ("train_end", "completed", 5)
    assert " | INFO | train_end " in last_line(tmp_path)
    assert "error" not in end


def test_a_failing_fit_ends_failed_with_the_error_on_one_line(tmp_path: Path) -> None:
    """The error is re-raised, and train_end (level error) carries status=failed, the step reached,
    the steps run and the error's type and first line."""
    with pytest.raises(RuntimeError, match="peer closed"):
        fit(tmp_path, batches(3, RuntimeError("peer closed the connection\n  at gloo/pair.cc:598")))
    records = read_jsonl(tmp_path / "m.jsonl")
    end = records[-1]
    assert [r["event"] for r in records].count("train_end") == 1
    assert (end["event"], end["status"]) == ("train_end", "failed")
    assert " | ERROR | train_end " in last_line(tmp_path)
    assert end["error"] == "RuntimeError: peer closed the connection"
    assert (end["step"], end["steps_run"]) == (3, 3)
    assert end["final_loss"] == [r for r in records if r["event"] == "train_step"][-1]["loss"]
    assert payload_problems("train_end", end) == []


def test_an_interrupted_fit_ends_interrupted(tmp_path: Path) -> None:
    """Ctrl-C: train_end status=interrupted (level warning); the KeyboardInterrupt goes on."""
    with pytest.raises(KeyboardInterrupt):
        fit(tmp_path, batches(2, KeyboardInterrupt()))
    end = read_jsonl(tmp_path / "m.jsonl")[-1]
    assert (end["event"], end["status"], end["error"]) == ("train_end", "interrupted", "KeyboardInterrupt")
    assert " | WARNING | train_end " in last_line(tmp_path)
    assert end["step"] == 2
