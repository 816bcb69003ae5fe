"""``summarize_run``: one pass over a run, in constant memory, into a ``RunSummary``.

What counts as trouble comes from ``speedtronic.processors.EVENT_LEVELS``, the same table that sets
the text log's levels, so a new warning event is summarised without a change here. Throughput rates
are the numeric ``train_step`` keys ending in ``_per_s`` (``speedtronic.runs.RATE_SUFFIX``).

A resumed run is summarised as one run over its segments (``speedtronic.runs.reader``): ``elapsed``
adds up the segments, ``steps`` counts each step once however many segments recorded it (a step run
again after a restart replaces the earlier record, so the last loss is the latest one's), and
``finished`` is about the last segment.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from speedtronic.events import level_for
from speedtronic.record import non_finite_text
from speedtronic.runs.reader import (
    RankChoice,
    Record,
    RunClock,
    Skipped,
    as_number,
    rate_keys,
    read_records,
    run_files,
)

__all__ = ["RateStats", "RunSummary", "format_summaries", "summarize_run"]


_STEP_BITS = 1 << 27
"""Steps remembered one bit each (16 MiB at most) to count a step recorded twice once."""


@dataclass
class RateStats:
    """Mean and last value of one throughput rate; non-finite values are left out of both."""

    total: float = 0.0
    count: int = 0
    last: float = math.nan

    def add(self, value: float) -> None:
        if math.isfinite(value):
            self.total += value
            self.count += 1
            self.last = value

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan


@dataclass
class RunSummary:
    """What one run did, built record by record with ``add``."""

    run: str
    files: list[str] = field(default_factory=list)
    records: int = 0
    events: Counter[str] = field(default_factory=Counter)
    step_min: int | None = None
    step_max: int | None = None
    target_step: int | None = None
    loss_first: float | None = None
    loss_last: float | None = None
    loss_best: float | None = None
    loss_best_step: int | None = None
    non_finite_losses: int = 0
    eval_loss_last: float | None = None
    """The last ``eval`` record's ``loss`` (records of a ``split="test"`` are left out)."""
    eval_loss_last_step: int | None = None
    eval_loss_best: float | None = None
    eval_loss_best_step: int | None = None
    rates: dict[str, RateStats] = field(default_factory=dict)
    elapsed_s: float | None = None
    """Seconds over every segment of the run."""
    segments: int = 0
    """``train_start`` records: 1 for a run never resumed."""
    steps_recorded: int = 0
    """Distinct steps with a ``train_step`` record (a step recorded again after a restart counts once)."""
    checkpoints: int = 0
    last_checkpoint: dict[str, Any] | None = None
    finished: bool = False
    final_loss: float | None = None
    status: str | None = None
    """The last ``train_end``'s ``status`` (``completed``/``interrupted``/``failed``); ``None`` before it."""
    error: str | None = None
    """The last ``train_end``'s ``error``: why it failed or was interrupted."""
    warnings: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    hook_failures: dict[str, int] = field(default_factory=dict)
    undelivered: int = 0
    """Events that never reached the hooks (background delivery timed out at close)."""
    skipped: Skipped = field(default_factory=Skipped)
    _clock: RunClock = field(default_factory=RunClock, repr=False)
    _seen: bytearray = field(default_factory=bytearray, repr=False)
    """One bit per step: whether a ``train_step`` of it was seen."""

    def add(self, record: Record) -> None:
        """Fold one record into the summary."""
        event, payload = record.event, record.payload
        self.records += 1
        self.events[event] += 1
        self._clock.add(record)
        self.elapsed_s = self._clock.total
        if event == "train_step":
            self._add_step(payload)
        elif event == "train_start":
            self.segments += 1
            self.finished = False
            self.status = self.error = None
            target = payload.get("target_step")
            self.target_step = target if type(target) is int else self.target_step
        elif event == "eval":
            self._add_eval(payload)
        elif event == "checkpoint":
            self.checkpoints += 1
            self.last_checkpoint = {"step": payload.get("step"), "path": payload.get("path")}
        elif event == "train_end":
            self.finished = True
            status, error = payload.get("status"), payload.get("error")
            self.status = status if isinstance(status, str) else None
            self.error = error if isinstance(error, str) else None
            final = as_number(payload.get("final_loss"))
            self.final_loss = final if final is not None else self.final_loss
        elif event == "hook_error" and record.own:  # a user event of that name is not a hook failure
            self._add_hook_error(payload)
        else:
            level = level_for(event)
            if level == "warning":
                self.warnings[event] += 1
            elif level == "error":
                self.errors[event] += 1

    def _add_step(self, payload: dict[str, Any]) -> None:
        step = payload.get("step")
        if type(step) is int:
            if self.step_min is None or step < self.step_min:
                self.step_min = step
            if self.step_max is None or step > self.step_max:
                self.step_max = step
            self._count_step(step)
        else:
            step = None
        loss = as_number(payload.get("loss"))
        if loss is not None:
            if self.loss_first is None:
                self.loss_first = loss
            self.loss_last = loss
            if not math.isfinite(loss):
                self.non_finite_losses += 1
            elif self.loss_best is None or loss < self.loss_best:
                self.loss_best, self.loss_best_step = loss, step
        for key in rate_keys(payload):
            rate = self.rates.get(key)
            if rate is None:  # not setdefault(key, RateStats()): that builds one per record
                rate = self.rates[key] = RateStats()
            rate.add(payload[key])

    def _add_eval(self, payload: dict[str, Any]) -> None:
        loss, step = as_number(payload.get("loss")), payload.get("step")
        if loss is None or payload.get("split") == "test":
            return
        step = step if type(step) is int else None
        self.eval_loss_last, self.eval_loss_last_step = loss, step
        if math.isfinite(loss) and (self.eval_loss_best is None or loss < self.eval_loss_best):
            self.eval_loss_best, self.eval_loss_best_step = loss, step

    def _count_step(self, step: int) -> None:
        if not 0 <= step < _STEP_BITS:  # a step number off the scale is counted, not remembered
            self.steps_recorded += 1
            return
        byte, bit = divmod(step, 8)
        if byte >= len(self._seen):
            self._seen.extend(bytes(byte + 1 - len(self._seen)))
        if not self._seen[byte] >> bit & 1:
            self._seen[byte] |= 1 << bit
            self.steps_recorded += 1

    def _add_hook_error(self, payload: dict[str, Any]) -> None:
        # The logger reports a hook's 1st, 2nd, 4th... failure and a final total: the largest count
        # seen is the number of failures. phase="drain" counts events the hook thread never delivered.
        if payload.get("phase") == "drain":
            undelivered = payload.get("undelivered")
            self.undelivered += undelivered if type(undelivered) is int else 0
            return
        hook, failures = str(payload.get("hook", "?")), payload.get("failures")
        count = failures if type(failures) is int else 1
        self.hook_failures[hook] = max(self.hook_failures.get(hook, 0), count)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``; non-finite floats are ``"NaN"``/``"Infinity"`` as in the JSONL."""
        return {
            "run": self.run,
            "files": self.files,
            "records": self.records,
            "events": dict(self.events),
            "steps": {
                "min": self.step_min, "max": self.step_max, "target": self.target_step,
                "recorded": self.steps_recorded,
            },
            "segments": self.segments,
            "loss": {
                "first": _json_float(self.loss_first),
                "last": _json_float(self.loss_last),
                "best": _json_float(self.loss_best),
                "best_step": self.loss_best_step,
                "non_finite": self.non_finite_losses,
            },
            "eval_loss": {
                "last": _json_float(self.eval_loss_last),
                "last_step": self.eval_loss_last_step,
                "best": _json_float(self.eval_loss_best),
                "best_step": self.eval_loss_best_step,
            },
            "rates": {
                key: {"mean": _json_float(rate.mean), "last": _json_float(rate.last)}
                for key, rate in self.rates.items()
            },
            "elapsed_s": self.elapsed_s,
            "checkpoints": {"count": self.checkpoints, "last": self.last_checkpoint},
            "finished": self.finished,
            "status": self.status,
            "error": self.error,
            "final_loss": _json_float(self.final_loss),
            "warnings": dict(self.warnings),
            "errors": dict(self.errors),
            "hook_failures": self.hook_failures,
            "undelivered": self.undelivered,
            "skipped": self.skipped.as_dict(),
        }


def _json_float(value: float | None) -> float | str | None:
    return value if value is None or math.isfinite(value) else non_finite_text(value)


def summarize_run(
    path: str | os.PathLike[str], *, rank: RankChoice = "first", name: str | None = None
) -> RunSummary:
    """Summarise the run at ``path`` (a JSONL file or run directory) in one streaming pass.

    Raises ``speedtronic.runs.RunError`` for a path that can't be read; bad lines are counted in
    ``RunSummary.skipped``.
    """
    summary = RunSummary(name if name is not None else str(path))
    summary.files = [str(file) for file in run_files(path)]
    for record in read_records(path, summary.skipped, rank=rank):
        summary.add(record)
    return summary


# -- the table ---------------------------------------------------------------------------------

_MISSING = "-"


def format_summaries(summaries: Sequence[RunSummary]) -> str:
    """A plain-text table: one row per fact, one column per run."""
    rows: list[tuple[str, list[str]]] = [("run", [s.run for s in summaries])]
    rows.append(("records", [f"{s.records:,}" for s in summaries]))
    for event in _union(s.events for s in summaries):
        rows.append((f"  {event}", [_count(s.events.get(event)) for s in summaries]))
    rows.append(("steps", [_steps(s) for s in summaries]))
    for label, attr in (("loss first", "loss_first"), ("loss last", "loss_last")):
        rows.append((label, [_number(getattr(s, attr)) for s in summaries]))
    rows.append(("loss best", [_best(s) for s in summaries]))
    if any(s.non_finite_losses for s in summaries):
        rows.append(("loss non-finite", [_count(s.non_finite_losses) for s in summaries]))
    if any(s.eval_loss_last is not None for s in summaries):
        rows.append(("eval loss last", [_at(s.eval_loss_last, s.eval_loss_last_step) for s in summaries]))
        rows.append(("eval loss best", [_at(s.eval_loss_best, s.eval_loss_best_step) for s in summaries]))
    for key in _union(s.rates for s in summaries):
        rows.append((f"{key} mean", [_number(_rate(s, key, "mean")) for s in summaries]))
        rows.append((f"{key} last", [_number(_rate(s, key, "last")) for s in summaries]))
    rows.append(("elapsed", [_duration(s.elapsed_s) for s in summaries]))
    if any(s.segments > 1 for s in summaries):
        rows.append(("segments", [_segments(s) for s in summaries]))
    rows.append(("checkpoints", [_checkpoints(s) for s in summaries]))
    rows.append(("finished", [_finished(s) for s in summaries]))
    rows.append(("warnings", [_counts(s.warnings) for s in summaries]))
    rows.append(("errors", [_counts(s.errors) for s in summaries]))
    rows.append(("hook failures", [_counts(s.hook_failures) for s in summaries]))
    if any(s.undelivered for s in summaries):
        rows.append(("undelivered", [_count(s.undelivered) for s in summaries]))
    rows.append(("skipped", [_skipped(s.skipped) for s in summaries]))
    label_width = max(len(label) for label, _ in rows)
    widths = [max(len(cells[i]) for _, cells in rows) for i in range(len(summaries))]
    lines = []
    for label, cells in rows:
        padded = "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))
        lines.append(f"{label.ljust(label_width)}  {padded}".rstrip())
    return "\n".join(lines)


def _union(mappings: Iterable[Any]) -> list[str]:
    keys: dict[str, None] = {}
    for mapping in mappings:
        keys.update(dict.fromkeys(mapping))
    return list(keys)


def _count(value: int | None) -> str:
    return f"{value:,}" if value else _MISSING


def _number(value: float | None) -> str:
    if value is None:
        return _MISSING
    if math.isnan(value):
        return "NaN"
    if abs(value) >= 1e4 and math.isfinite(value):
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _rate(summary: RunSummary, key: str, which: str) -> float | None:
    rate = summary.rates.get(key)
    if rate is None or not rate.count:
        return None
    return rate.mean if which == "mean" else rate.last


def _steps(summary: RunSummary) -> str:
    if summary.step_min is None or summary.step_max is None:
        return _MISSING
    text = f"{summary.step_min:,}-{summary.step_max:,}"
    return f"{text} of {summary.target_step:,}" if summary.target_step is not None else text


def _segments(summary: RunSummary) -> str:
    restarts = summary.segments - 1
    return f"{summary.segments} ({restarts} restart{'s' if restarts != 1 else ''})" if restarts > 0 else "1"


def _best(summary: RunSummary) -> str:
    return _at(summary.loss_best, summary.loss_best_step)


def _at(value: float | None, step: int | None) -> str:
    if value is None:
        return _MISSING
    at = f" @ step {step:,}" if step is not None else ""
    return f"{_number(value)}{at}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return _MISSING
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def _checkpoints(summary: RunSummary) -> str:
    if not summary.checkpoints:
        return _MISSING
    last = summary.last_checkpoint or {}
    step = last.get("step")
    at = f" (last at step {step:,})" if type(step) is int else ""
    return f"{summary.checkpoints:,}{at}"


def _finished(summary: RunSummary) -> str:
    if not summary.finished:
        return "no train_end"
    if summary.status in ("failed", "interrupted"):
        return f"{summary.status}: {summary.error}" if summary.error else summary.status
    if summary.status is not None:
        loss = f", final loss {_number(summary.final_loss)}" if summary.final_loss is not None else ""
        return f"{summary.status}{loss}"
    return f"yes, final loss {_number(summary.final_loss)}" if summary.final_loss is not None else "yes"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {count:,}" for name, count in counts.items()) or _MISSING


def _skipped(skipped: Skipped) -> str:
    parts = [f"{skipped.total_lines:,} line(s)"] if skipped.lines else []
    ranks = skipped.left_out_ranks
    if len(ranks) == 1 and not skipped.other_rank_files:
        parts.append(f"{skipped.other_ranks[ranks[0]]:,} of rank {ranks[0]}")
    elif ranks:
        parts.append(f"{len(ranks):,} other ranks")
    return ", ".join(parts) or _MISSING
