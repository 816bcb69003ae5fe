"""``summarize_run`` over ``train_step`` records whose keys change from record to record: a key that
comes late, goes missing, is not a number at first, or shares a held-out split with another key is
summarised as if every record were read key by key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from speedtronic.runs.summary import RunSummary, summarize_run


def summarize(tmp_path: Path, *steps: dict[str, Any]) -> RunSummary:
    path = tmp_path / "metrics.jsonl"
    lines = [{"event": "train_step", "step": number, **payload} for number, payload in enumerate(steps, 1)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return summarize_run(path)


class TestChangingKeys:
    def test_a_rate_first_written_as_text_is_averaged_over_its_numbers(self, tmp_path: Path) -> None:
        """A rate that is text in early records is read from the first record where it is a number."""
        summary = summarize(
            tmp_path,
            {"loss": 3.0, "tokens_per_s": "warming up", "samples_per_s": 1.0},
            {"loss": 2.0, "tokens_per_s": 10.0, "samples_per_s": 3.0},
            {"loss": 1.0, "tokens_per_s": 20.0, "samples_per_s": 5.0},
        )
        assert list(summary.rates) == ["samples_per_s", "tokens_per_s"]  # the order first met as numbers
        assert (summary.rates["tokens_per_s"].mean, summary.rates["tokens_per_s"].last) == (15.0, 20.0)
        assert summary.rates["samples_per_s"].mean == 3.0

    def test_a_learning_rate_that_comes_late_is_read(self, tmp_path: Path) -> None:
        """A learning rate first logged at step 3 is the run's last learning rate."""
        summary = summarize(
            tmp_path,
            {"loss": 3.0},
            {"loss": 2.0},
            {"loss": 1.5, "lr": 0.1},
            {"loss": 1.0, "lr": 0.05},
        )
        assert summary.lrs == {"lr": 0.05}

    def test_a_missing_or_non_numeric_loss_keeps_the_last_one(self, tmp_path: Path) -> None:
        """A step without a loss, or with a text one, leaves the last and best loss as they were."""
        summary = summarize(
            tmp_path,
            {"loss": 3.0},
            {"loss": 1.0},
            {"grad_norm": 0.5},
            {"loss": "skipped"},
            {"loss": 2.0},
            {"grad_norm": 0.1},
        )
        assert (summary.loss_first, summary.loss_last, summary.loss_best, summary.loss_best_step) == (
            3.0, 2.0, 1.0, 2,
        )  # fmt: skip

    def test_a_second_loss_key_met_later_does_not_become_the_loss(self, tmp_path: Path) -> None:
        """The run's loss is the loss key met first, even when a preferred one appears later."""
        summary = summarize(
            tmp_path,
            {"train_loss": 3.0},
            {"train_loss": 2.0, "loss": 9.0},
            {"train_loss": 1.0, "loss": 8.0},
        )
        assert (summary.loss_key, summary.loss_last) == ("train_loss", 1.0)

    def test_two_keys_of_one_split_are_read_in_the_records_order(self, tmp_path: Path) -> None:
        """With ``eval_loss`` and ``eval/loss`` in one record, the later in the record is the last value."""
        summary = summarize(
            tmp_path,
            {"loss": 2.0, "eval_loss": 1.0, "eval/loss": 2.0},
            {"loss": 1.0, "eval/loss": 3.0, "eval_loss": 4.0},
        )
        assert (summary.eval_loss_last, summary.eval_loss_last_step) == (4.0, 2)

    def test_a_run_whose_keys_change_reads_the_same_in_pieces(self, tmp_path: Path, monkeypatch: Any) -> None:
        """A file read in many small pieces gives the summary one piece gives, keys changing or not."""
        steps = [
            {"loss": 5.0 - n * 0.01 if n % 7 else "NaN?", "lr": 0.1 / (1 + n),
             **({"tokens_per_s": 100.0 + n} if n % 3 else {"tokens_per_s": "n/a"})}
            for n in range(400)
        ]  # fmt: skip
        whole = summarize(tmp_path, *steps).as_dict()
        monkeypatch.setattr("speedtronic.runs.summary.PIECE_BYTES", 2000)
        assert summarize(tmp_path, *steps).as_dict() == whole
        assert whole["rates"]["tokens_per_s"]["last"] == 498.0
