"""``run_alerts``: the alerts a recorded run would have raised, re-derived by the same rule objects
the logger runs live: a backtest for thresholds."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from speedtronic.alerts import ALERT, CheckAlerts, Rule
from speedtronic.runs.reader import RankChoice, Record, Skipped, read_records

__all__ = ["RunAlerts", "run_alerts"]

_RANK_KEYS = ("rank", "world_size")


class RunAlerts:
    """Rules over records read back: one ``CheckAlerts`` per rank and segment, made by ``rules``.
    ``check`` returns the alert payloads a record raises (none for the logger's own records and the
    ``alert`` records already in the run)."""

    __slots__ = ("_rules", "_stages")

    def __init__(self, rules: Callable[[], Iterable[Rule]]) -> None:
        self._rules = rules
        self._stages: dict[tuple[int, int], CheckAlerts] = {}

    def check(self, record: Record) -> list[dict[str, Any]]:
        if record.own or record.event == ALERT:
            return []
        where = (record.rank, record.segment)
        stage = self._stages.get(where)
        if stage is None:
            stage = self._stages[where] = CheckAlerts(self._rules())
        fields = {"event": record.event, **record.hook_payload}
        payloads = []
        for alert in stage.check(fields):
            payload = alert.payload()
            payload.update((key, fields[key]) for key in _RANK_KEYS if key in fields)
            payloads.append(payload)
        return payloads


def run_alerts(
    path: str | os.PathLike[str],
    rules: Callable[[], Iterable[Rule]],
    *,
    rank: RankChoice = "all",
    skipped: Skipped | None = None,
) -> Iterator[tuple[Record, dict[str, Any]]]:
    """Each alert ``rules`` raise over the run at ``path``, in file order (see the module)."""
    derive = RunAlerts(rules)
    for record in read_records(path, skipped, rank=rank):
        for payload in derive.check(record):
            yield record, payload
