"""``CheckAlerts``: the chain stage that runs a ``RuleSet`` on each record, and ``derive_alerts``, the
same rules over records read back."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from structlog.typing import EventDict, WrappedLogger

from speedtronic.alerts.rule import Alert, Rule, RuleSet, as_rule_set
from speedtronic.events import Event
from speedtronic.record import NOTE_KEY, is_own_note

__all__ = ["ALERT", "AlertCount", "AlertWatch", "CheckAlerts", "alert_fields", "alert_step", "derive_alerts"]

ALERT: str = Event.ALERT.value
"""The event name of an alert's record (the catalog's ``Event.ALERT``, as a plain ``str``)."""

_RANK_KEYS = ("rank", "world_size")
_SEVERITY_ORDER = {"warning": 0, "error": 1}


def alert_fields(alert: Alert) -> dict[str, Any]:
    """The event dict of ``alert``'s record: ``event`` first, then its payload."""
    return {"event": ALERT, **alert.payload()}


def alert_step(payload: Mapping[str, Any]) -> int | None:
    """The whole-number ``step`` of an alert's payload (``3.0`` read back as 3), else ``None``."""
    value = payload.get("step")
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    return None


@dataclass
class AlertCount:
    """How often one rule fired (on one rank): first and last step, the worst severity, the last message.
    ``add`` takes an ``alert`` record's payload."""

    count: int = 0
    first_step: int | None = None
    last_step: int | None = None
    severity: str = "warning"
    last_message: str | None = None

    def add(self, payload: Mapping[str, Any]) -> None:
        self.count += 1
        step = alert_step(payload)
        if step is not None:
            self.first_step = step if self.first_step is None else self.first_step
            self.last_step = step
        self._worst(str(payload.get("severity", "warning")))
        message = payload.get("message")
        if isinstance(message, str):
            self.last_message = message

    def update(self, later: AlertCount) -> None:
        """Merge the count of the piece read after this one's."""
        self.count += later.count
        if self.first_step is None:
            self.first_step = later.first_step
        if later.last_step is not None:
            self.last_step = later.last_step
        self._worst(later.severity)
        if later.last_message is not None:
            self.last_message = later.last_message

    def _worst(self, severity: str) -> None:
        if _SEVERITY_ORDER.get(severity, 0) > _SEVERITY_ORDER.get(self.severity, 0):
            self.severity = severity


class CheckAlerts:
    """Runs ``rules`` (a ``RuleSet``, or rules made one) on each record; alerts' own records and the
    logger's own records are not checked. ``check`` returns the alerts; called as a processor, the
    stage hands each alert's fields to ``on_alert`` (when given) and returns the event dict as it is."""

    __slots__ = ("counts", "last", "on_alert", "raised", "rules")

    def __init__(
        self,
        rules: RuleSet | Iterable[Rule],
        *,
        on_alert: Callable[[dict[str, Any]], object] | None = None,
    ) -> None:
        self.rules = as_rule_set(rules)
        self.on_alert = on_alert
        self.raised = 0
        """Alerts raised so far (a trainer that stops on an alert watches it)."""
        self.last: Alert | None = None
        """The latest alert raised."""
        self.counts: dict[str, AlertCount] = {}
        """The alerts raised so far per rule, in the order each rule first fired (the closing summary of
        ``speedtronic train`` shows them)."""

    def check(self, record: Mapping[str, Any]) -> Sequence[Alert]:
        """The alerts ``record`` raises (none for an ``alert`` or the logger's own record)."""
        note = record.get(NOTE_KEY)  # a record has a note only when it has something to say
        if (note is not None and is_own_note(note)) or record.get("event") == ALERT:
            return ()
        alerts = self.rules.check(record)
        if alerts:  # rare: nothing here runs for a record that raises none
            self.raised += len(alerts)
            self.last = alerts[-1]
            for alert in alerts:
                self.counts.setdefault(alert.rule, AlertCount()).add(alert.payload())
        return alerts

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        alerts = self.check(event_dict)
        if alerts and self.on_alert is not None:
            for alert in alerts:
                self.on_alert(alert_fields(alert))
        return event_dict

    def __repr__(self) -> str:
        return f"CheckAlerts({self.rules!r})"


class AlertWatch:
    """Whether a chain's rules raised an alert since the last look: what a trainer that stops on an
    alert asks after each step (``fired()``: the newest alert since then, or ``None``). A chain
    without rules (``None``) never fires."""

    __slots__ = ("_check", "_seen")

    def __init__(self, check: CheckAlerts | None) -> None:
        self._check = check
        self._seen = check.raised if check is not None else 0

    def fired(self) -> Alert | None:
        check = self._check
        if check is None or check.raised == self._seen:
            return None
        self._seen = check.raised
        return check.last


def derive_alerts(
    records: Iterable[Mapping[str, Any]], rules: RuleSet | Iterable[Rule]
) -> Iterator[tuple[Mapping[str, Any], dict[str, Any]]]:
    """Each alert ``rules`` raise over ``records`` (read back, non-finite numbers put back), as
    ``(record that tripped it, alert payload)``: the payload the live ``alert`` record carried, with
    the tripping record's ``rank`` and ``world_size`` where it has them, as the logger adds them."""
    stage = CheckAlerts(rules)
    for record in records:
        for alert in stage.check(record):
            payload = alert.payload()
            for key in _RANK_KEYS:
                if key in record:
                    payload[key] = record[key]
            yield record, payload
