"""``speedtronic summarize`` shows how a run ended: train_end's status, and the error of a failed run."""

from __future__ import annotations

import json
from pathlib import Path

from speedtronic.runs.summary import format_summaries, summarize_run
from tests.runs.test_summary import table


def write(path: Path, *records: dict[str, object]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


START = {"event": "train_start", "start_step": 0, "target_step": 10}


def end(
    step: int, steps_run: int, final_loss: float, status: str, error: str | None = None
) -> dict[str, object]:
    """A ``train_end`` record as the trainer writes it (``error`` only when there is one)."""
    record: dict[str, object] = {
        "event": "train_end",
        "step": step,
        "steps_run": steps_run,
        "duration_s": 1.0,
        "final_loss": final_loss,
        "status": status,
    }
    return record if error is None else {**record, "error": error}


def test_a_failed_run_shows_its_status_and_error(tmp_path: Path) -> None:
    """status failed: the finished row names it and the error; --json carries both."""
    path = write(
        tmp_path / "m.jsonl",
        START,
        end(4, 4, 0.5, "failed", "DistBackendError: Connection closed by peer"),
    )
    summary = summarize_run(path)
    assert table(format_summaries([summary]))["finished"] == [
        "failed: DistBackendError: Connection closed by peer"
    ]
    facts = summary.as_dict()
    assert (facts["status"], facts["error"]) == ("failed", "DistBackendError: Connection closed by peer")


def test_a_completed_run_shows_completed_and_its_loss(tmp_path: Path) -> None:
    """status completed: the finished row says so, with the final loss."""
    path = write(tmp_path / "m.jsonl", START, end(10, 10, 0.25, "completed"))
    assert table(format_summaries([summarize_run(path)]))["finished"] == ["completed, final loss 0.25"]


def test_a_resumed_segment_forgets_the_failure_before_it(tmp_path: Path) -> None:
    """A run that failed, then was resumed and completed, reads as completed."""
    failed = end(4, 4, 0.5, "failed", "RuntimeError: boom")
    done = end(10, 6, 0.25, "completed")
    summary = summarize_run(write(tmp_path / "m.jsonl", START, failed, START, done))
    assert (summary.status, summary.error) == ("completed", None)


def test_control_characters_never_reach_the_terminal(tmp_path: Path) -> None:
    """Escape sequences and newlines in event names, hook names and the error are shown escaped, as
    the text log writes them: no ESC or BEL byte in the table, one line per row."""
    path = write(tmp_path / "m.jsonl", START, {"event": "evil\x1b[31m_warning"}, {
        "event": "hook_error", "hook": "H\x1b]0;pwned\x07", "failures": 1,
        "_speedtronic": {"origin": "speedtronic"},
    }, {
        "event": "train_end", "status": "failed", "error": "boom\nfinished completed\x1b]0;title\x07",
    })  # fmt: skip
    text = format_summaries([summarize_run(path)])
    assert "\x1b" not in text
    assert "\x07" not in text
    rows = table(text)
    assert rows["finished"] == ['failed: "boom\\nfinished completed\\x1b]0;title\\x07"']
    assert rows['"evil\\x1b[31m_warning"'] == ["1"]
    assert rows["hook failures"] == ['"H\\x1b]0;pwned\\x07" 1']
    assert len(text.splitlines()) == len(rows)


def test_numbers_of_four_digits_and_more_are_grouped_alike(tmp_path: Path) -> None:
    """Rates of 9,639 and 11,199 read alike in the table, grouped as the counts are."""
    path = write(tmp_path / "m.jsonl", START, *(
        {"event": "train_step", "step": step, "loss": 0.5, "samples_per_s": rate, "tokens_per_s": 11199.0}
        for step, rate in ((1, 9639.0), (2, 9639.0))
    ))  # fmt: skip
    rows = table(format_summaries([summarize_run(path)]))
    assert (rows["samples_per_s mean"], rows["tokens_per_s last"]) == (["9,639"], ["11,199"])
