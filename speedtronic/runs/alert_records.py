"""The alerts a run recorded: its ``alert`` records, counted per rank and rule, for ``summarize`` and
``plot``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from speedtronic.alerts import AlertCount, alert_step
from speedtronic.events import Event
from speedtronic.record.text import quote
from speedtronic.runs.reader import Record

__all__ = ["AlertCount", "AlertMark", "RecordedAlerts", "alert_mark", "alert_rows"]

_MISSING = "-"


@dataclass
class RecordedAlerts:
    """The alerts of a run per (rank, rule), in the order each was first met."""

    counts: dict[tuple[int, str], AlertCount] = field(default_factory=dict)

    def add(self, record: Record) -> None:
        """Fold one ``alert`` record."""
        rule = str(record.payload.get("rule", "?"))
        key = (record.rank, rule)
        count = self.counts.get(key)
        if count is None:
            count = self.counts[key] = AlertCount()
        count.add(record.payload)

    def update(self, later: RecordedAlerts) -> None:
        """Merge the alerts of the piece read after this one's."""
        for key, count in later.counts.items():
            held = self.counts.get(key)
            if held is None:
                self.counts[key] = count
            else:
                held.update(count)

    @property
    def total(self) -> int:
        return sum(count.count for count in self.counts.values())

    @property
    def ranks(self) -> list[int]:
        """The ranks that recorded an alert, in order."""
        return sorted({rank for rank, _ in self.counts})

    def as_dict(self) -> list[dict[str, Any]]:
        """One object per rank and rule, fixed keys, ordered by rank then first met: ``--json``'s."""
        return [
            {
                "rank": rank,
                "rule": rule,
                "count": count.count,
                "first_step": count.first_step,
                "last_step": count.last_step,
                "severity": count.severity,
                "last_message": count.last_message,
            }
            for (rank, rule), count in sorted(self.counts.items(), key=lambda item: item[0][0])
        ]

    def text(self, rank: int | None = None) -> str:
        """``spike 3 (steps 120-450), non_finite 1 (step 800, error)``: every rank's, or ``rank``'s."""
        parts = []
        for (of_rank, rule), count in self.counts.items():
            if rank is not None and of_rank != rank:
                continue
            where = []
            if count.first_step is not None:
                first, last = count.first_step, count.last_step
                where.append(f"step {first:,}" if first == last else f"steps {first:,}-{last:,}")
            if count.severity != "warning":
                where.append(count.severity)
            shown = f" ({', '.join(where)})" if where else ""
            parts.append(f"{_shown(rule)} {count.count:,}{shown}")
        return ", ".join(parts)


def alert_rows(alerts: Sequence[RecordedAlerts]) -> list[tuple[str, list[str]]]:
    """``summarize``'s rows for the alerts of each run (a column each): none when no run has one; one
    row ``alerts`` when they all come from rank 0 (or a single process), else a row
    ``alerts rank <r>`` per rank that alerted."""
    if not any(one.counts for one in alerts):
        return []
    ranks = sorted({rank for one in alerts for rank in one.ranks})
    if ranks == [0]:  # a single process's run, or rank 0's alone
        return [("alerts", [one.text() or _MISSING for one in alerts])]
    return [(f"alerts rank {rank}", [one.text(rank) or _MISSING for one in alerts]) for rank in ranks]


@dataclass(frozen=True)
class AlertMark:
    """Where the plot marks an alert: at ``x`` (its step, or its time), with its rule, severity, key,
    rank and the run's label."""

    x: float
    rule: str
    severity: str
    key: str | None
    rank: int
    run: str


def alert_mark(record: Record, run: str, at: float | None = None) -> AlertMark | None:
    """The mark of an ``alert`` record: at ``at`` when given (its time on an ``elapsed_s`` axis), else
    at its step; ``None`` for another event, or an alert without a whole-number step to place it."""
    if record.event != Event.ALERT:
        return None
    payload = record.payload
    if at is None:
        step = alert_step(payload)
        if step is None:
            return None
        at = float(step)
    key = payload.get("key")
    return AlertMark(
        at,
        str(payload.get("rule", "?")),
        str(payload.get("severity", "warning")),
        key if isinstance(key, str) else None,
        record.rank,
        run,
    )


def _shown(text: str) -> str:
    """A rule's name as a table shows it: quoted with controls escaped unless every character prints."""
    return text if text.isprintable() else quote(text)
