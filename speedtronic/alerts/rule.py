"""What an alert is (``Alert``), what a rule is (``Rule``), and ``RuleSet``: rules with their cooldown."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from speedtronic.errors import LoggingFailureWarning

__all__ = ["DEFAULT_COOLDOWN", "SEVERITIES", "Alert", "Rule", "RuleSet", "as_names", "check_rule"]

DEFAULT_COOLDOWN = 100
"""Steps a rule stays quiet on a key after alerting on it, unless the rule says otherwise."""

SEVERITIES = ("warning", "error")
"""An alert's severities; each is also the level (structlog method name) of its ``alert`` record."""

Severity = Literal["warning", "error"]


@dataclass(frozen=True)
class Alert:
    """One alert: which rule fired, on which key and step, the value and the threshold it crossed, one
    human line, and the rule's figures (``window``, ``mean``, ``std``, ``median``...).

    ``payload()`` is the ``alert`` record's payload (``speedtronic.events.AlertPayload``)."""

    rule: str
    severity: Severity
    key: str | None
    step: int | None
    value: float | None
    threshold: float | None
    message: str
    figures: Mapping[str, Any] = field(default_factory=dict)
    """Optional payload keys after the fixed ones, in order."""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"Alert(severity={self.severity!r}): expected one of {', '.join(SEVERITIES)}")
        if not isinstance(self.rule, str) or not self.rule:
            raise ValueError(f"Alert(rule={self.rule!r}): expected the rule's name")

    def payload(self) -> dict[str, Any]:
        """The ``alert`` record's payload: the fixed keys in order, then the figures."""
        return {
            "rule": self.rule,
            "severity": self.severity,
            "key": self.key,
            "step": self.step,
            "value": self.value,
            "threshold": self.threshold,
            "message": self.message,
            **self.figures,
        }


@runtime_checkable
class Rule(Protocol):
    """A rule: ``name`` (the ``rule`` of its alerts) and ``check``, a record in, its alerts out.

    ``cooldown`` (steps), when a rule has it, replaces ``DEFAULT_COOLDOWN`` for that rule. ``events``
    (event names), when a rule has it and it is not ``None``, says which records the rule reads: a
    ``RuleSet`` calls the rule on those events' records only (the built-in rules have it)."""

    name: str

    def check(self, record: Mapping[str, Any]) -> Iterable[Alert]: ...


_Indexed = tuple[tuple[int, Callable[[Mapping[str, Any]], Iterable[Alert]]], ...]
_NONE: tuple[Alert, ...] = ()


class RuleSet:
    """Rules run in order on each record, each alert kept unless its rule alerted on the same key less
    than the rule's cooldown (steps) ago. A rule that raises is counted in ``errors`` and warned about
    once (``LoggingFailureWarning``); the other rules still run.

    Which rules read which event is decided here, once: a record goes to the rules whose ``events``
    name its event and to those without ``events``, and to no other."""

    __slots__ = ("_at", "_cooldowns", "_every", "_last", "_reading", "errors", "rules")

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules: tuple[Rule, ...] = tuple(rules)
        for at, rule in enumerate(self.rules):
            try:
                check_rule(rule)
            except TypeError as error:
                raise TypeError(f"alerts[{at}]: {error}") from None
            except ValueError as error:
                raise ValueError(f"rule {rule.name!r}: {error}") from None
        cooldowns = [getattr(rule, "cooldown", DEFAULT_COOLDOWN) for rule in self.rules]
        events = [_events_of(rule) for rule in self.rules]
        indexed = tuple((at, rule.check) for at, rule in enumerate(self.rules))  # each check bound once
        self._every: _Indexed = tuple(pair for pair in indexed if events[pair[0]] is None)
        """The rules of a record whose event no rule names."""
        named = {event for chosen in events if chosen is not None for event in chosen}
        self._reading: dict[str, _Indexed] = {
            event: tuple(pair for pair in indexed if (chosen := events[pair[0]]) is None or event in chosen)
            for event in named
        }
        """The rules of each event some rule names, in rule order."""
        self._cooldowns = tuple(cooldowns)
        self._last: dict[tuple[int, str | None], int] = {}
        self._at = 0  # the last step seen: where an alert without a step happened
        self.errors: dict[str, int] = {}
        """Failures per rule name."""

    def check(self, record: Mapping[str, Any]) -> Sequence[Alert]:
        """The alerts ``record`` raises, after cooldown; in rule order (an empty tuple, shared, when
        none does: the usual case costs no allocation)."""
        step = record.get("step")
        if type(step) is int:
            self._at = step
        event = record.get("event")
        rules = self._reading.get(event, self._every) if isinstance(event, str) else self._every
        raised: list[Alert] | None = None
        for index, check in rules:
            try:
                found = check(record)
                if not found:
                    continue
                for alert in found:
                    if self._admits(index, alert):
                        raised = raised if raised is not None else []
                        raised.append(alert)
            except Exception as error:
                self._failed(self.rules[index], error)
        return raised if raised is not None else _NONE

    def _admits(self, index: int, alert: Alert) -> bool:
        at = alert.step if alert.step is not None else self._at
        key = (index, alert.key)
        last = self._last.get(key)
        if last is not None and 0 <= at - last < self._cooldowns[index]:
            return False
        self._last[key] = at
        return True

    def _failed(self, rule: Rule, error: Exception) -> None:
        name = rule.name
        self.errors[name] = self.errors.get(name, 0) + 1
        if self.errors[name] == 1:
            warnings.warn(
                f"speedtronic: alert rule {name!r} failed ({type(error).__name__}: {error}); "
                "its failures are counted in RuleSet.errors and the run goes on",
                LoggingFailureWarning,
                stacklevel=2,
            )

    def __repr__(self) -> str:
        return f"RuleSet([{', '.join(rule.name for rule in self.rules)}])"


def as_rule_set(alerts: RuleSet | Sequence[Rule] | Iterable[Rule]) -> RuleSet:
    """``alerts`` as a ``RuleSet`` (one given is used as it is: its state is the run's)."""
    return alerts if isinstance(alerts, RuleSet) else RuleSet(alerts)


def check_rule(rule: object) -> None:
    """Refuse what a ``RuleSet`` can't run: ``TypeError`` for an object with no ``name`` (str) or no
    ``check`` method, ``ValueError`` for a ``cooldown`` that is not an int >= 0 or ``events`` that
    are not event names. The message says what is wrong, not where the rule is."""
    if not callable(getattr(rule, "check", None)) or not hasattr(rule, "name"):
        raise TypeError(
            f"{rule!r} is not a rule: expected an object with a 'name' (str) and a check(record) method "
            "returning its alerts"
        )
    name = getattr(rule, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str (the 'rule' of its alerts), got {name!r}")
    cooldown = getattr(rule, "cooldown", DEFAULT_COOLDOWN)
    if type(cooldown) is not int or cooldown < 0:
        raise ValueError(f"cooldown must be an int >= 0 (steps), got {cooldown!r}")
    _events_of(rule)


def _events_of(rule: object) -> frozenset[str] | None:
    """The events ``rule`` reads (its ``events``), or ``None`` for every event."""
    events = getattr(rule, "events", None)
    if events is None:
        return None
    chosen = as_names(events)
    if not chosen or not all(isinstance(name, str) and name for name in chosen):
        raise ValueError(f"events must be event names or None, got {events!r}")
    return frozenset(chosen)


def as_names(names: object) -> tuple[Any, ...]:
    """A name or an iterable of names as a tuple; ``()`` for anything else (``5``), so the caller's
    error says what was expected instead of ``'int' object is not iterable``."""
    if isinstance(names, str):
        return (names,)
    return tuple(names) if isinstance(names, Iterable) else ()
