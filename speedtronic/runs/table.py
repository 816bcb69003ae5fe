"""``format_summaries``: run summaries side by side as a plain-text table, one row per fact."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from speedtronic.record.text import quote
from speedtronic.runs.alert_records import alert_rows
from speedtronic.runs.fold import RateStats, RunSummary, SeriesStats
from speedtronic.runs.reader import (
    Skipped,
)

__all__ = ["format_summaries", "ranks_text"]

# -- the table ---------------------------------------------------------------------------------

_MISSING = "-"


def format_summaries(summaries: Sequence[RunSummary]) -> str:
    """A plain-text table: one row per fact, one column per run."""
    rows: list[tuple[str, list[str]]] = [("run", [_shown(s.run) for s in summaries])]
    rows.append(("records", [f"{s.records:,}" for s in summaries]))
    for event in _union(s.events for s in summaries):
        rows.append((f"  {_shown(event)}", [_count(s.events.get(event)) for s in summaries]))
    rows.append(("steps", [_steps(s) for s in summaries]))
    for label, attr in (("loss first", "loss_first"), ("loss last", "loss_last")):
        rows.append((label, [_number(getattr(s, attr)) for s in summaries]))
    rows.append(("loss best", [_best(s) for s in summaries]))
    if any(s.loss_key not in (None, "loss") for s in summaries):
        rows.append(("loss key", [_shown(s.loss_key) if s.loss_key else _MISSING for s in summaries]))
    if any(s.non_finite_losses for s in summaries):
        rows.append(("loss non-finite", [_count(s.non_finite_losses) for s in summaries]))
    for split in _union(s.evals for s in summaries):  # each split its own rows: val and test never mix
        stats = [s.evals.get(split) for s in summaries]
        rows.append((f"{_shown(split)} loss last", [_at(*_last(one)) for one in stats]))
        rows.append((f"{_shown(split)} loss best", [_at(*_best_of(one)) for one in stats]))
    for key in _union(s.lrs for s in summaries):
        rows.append((f"{_shown(key)} last", [_number(s.lrs.get(key)) for s in summaries]))
    for key in _union(s.end_rates for s in summaries):
        if not any(key in s.rates for s in summaries):
            rows.append((f"{_shown(key)} (train_end)", [_number(s.end_rates.get(key)) for s in summaries]))
    for key in _union(s.rates for s in summaries):
        rows.append((f"{_shown(key)} mean", [_number(_rate(s, key, "mean")) for s in summaries]))
        rows.append((f"{_shown(key)} last", [_number(_rate(s, key, "last")) for s in summaries]))
    for key in _union(s.peaks for s in summaries):
        rows.append((f"{_shown(key)} peak", [_bytes(s.peaks.get(key)) for s in summaries]))
    for key in _union(s.utilisation for s in summaries):
        rows.append((f"{_shown(key)} mean", [_percent(_rate_of(s.utilisation, key)) for s in summaries]))
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
    rows.extend(alert_rows([s.alerts for s in summaries]))
    rows.append(("skipped", [_skipped(s.skipped) for s in summaries]))
    label_width = max(len(label) for label, _ in rows)
    widths = [max(len(cells[i]) for _, cells in rows) for i in range(len(summaries))]
    lines = []
    for label, cells in rows:
        padded = "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))
        lines.append(f"{label.ljust(label_width)}  {padded}".rstrip())
    return "\n".join(lines)


def _shown(text: str) -> str:
    """``text`` as the table shows it: as it is when every character is printable, else as the text
    log writes it (quoted, controls escaped), so a value can't drive the terminal or add a row."""
    return text if text.isprintable() else quote(text)


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
    if abs(value) >= 1000 and math.isfinite(value):  # as counts are written: 9,639 beside 11,199
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _rate_of(stats: dict[str, RateStats], key: str) -> float | None:
    one = stats.get(key)
    return one.mean if one is not None and one.count else None


def _bytes(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return _number(value)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:,.1f} {unit}"
    return f"{value:,.0f} B"


def _percent(value: float | None) -> str:
    return f"{value:.1f}%" if value is not None and math.isfinite(value) else _number(value)


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


def _last(stats: SeriesStats | None) -> tuple[float | None, int | None]:
    return (stats.last, stats.last_step) if stats is not None else (None, None)


def _best_of(stats: SeriesStats | None) -> tuple[float | None, int | None]:
    return (stats.best, stats.best_step) if stats is not None else (None, None)


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
    outcomes: dict[str, list[int]] = {}  # how each rank ended, in words, the ranks that ended so
    for rank, end in sorted(summary.ends.items()):
        outcomes.setdefault(_ended(end, None), []).append(rank)
    if len(outcomes) > 1:  # ranks that ended differently: each way, its ranks, the worst first
        ways = sorted(outcomes.items(), key=lambda item: item[0].startswith(("completed", "yes")))
        return "; ".join(f"{way} ({ranks_text(ranks)})" for way, ranks in ways)
    if not summary.finished:
        return "no train_end"
    return _ended((summary.status, summary.error), summary.final_loss)


def _ended(end: tuple[str | None, str | None] | None, final_loss: float | None) -> str:
    """How a segment ended, in words: ``no train_end``, ``failed: <error>``, ``completed, final loss
    1.2`` (``final_loss``: the run's, shown when all its ranks ended alike)."""
    if end is None:
        return "no train_end"
    status, error = end
    if status in ("failed", "interrupted"):
        return f"{status}: {_shown(error)}" if error else status
    loss = f", final loss {_number(final_loss)}" if final_loss is not None else ""
    return f"{_shown(status)}{loss}" if status is not None else f"yes{loss}"


def ranks_text(ranks: list[int], most: int = 8) -> str:
    """Sorted ranks in words: ``rank 0``, ``ranks 0, 1``, ``ranks 0-3``, ``ranks 0, 2, 5-7``; past
    ``most`` ranges, ``...``."""
    spans: list[list[int]] = []
    for rank in ranks:
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    shown = [
        f"{low}-{high}" if high > low + 1 else ", ".join(map(str, range(low, high + 1)))
        for low, high in spans
    ]
    return (
        f"rank{'s' if len(ranks) > 1 else ''} "
        + ", ".join(shown[:most])
        + (", ..." if len(shown) > most else "")
    )


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{_shown(name)} {count:,}" for name, count in counts.items()) or _MISSING


def _skipped(skipped: Skipped) -> str:
    parts = [f"{skipped.total_lines:,} line(s)"] if skipped.lines else []
    ranks = skipped.left_out_ranks
    if len(ranks) == 1 and not skipped.other_rank_files:
        parts.append(f"{skipped.other_ranks[ranks[0]]:,} of rank {ranks[0]}")
    elif ranks:
        parts.append(f"{len(ranks):,} other ranks")
    return ", ".join(parts) or _MISSING
