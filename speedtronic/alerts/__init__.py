"""Alerts: rules over the event stream that say when a run goes wrong, as records of the run.

A rule is a small object: a ``name`` and ``check(record)``, a record in, its ``Alert``s out, its
state kept in the rule (``speedtronic.alerts.rule``). Built in (``speedtronic.alerts.builtin``):
``NonFinite``, ``Spike``, ``ThroughputDrop``, ``Memory``, ``Threshold``. ``RuleSet`` runs rules with
their cooldown; ``CheckAlerts`` is the chain stage (``MetricLogger(alerts=...)``) and
``derive_alerts`` runs the same rules over a run read back. ``rules_from_config`` builds rules from
an ``alerts:`` section (``speedtronic.alerts.config``). ``docs/alerts.md`` describes them.
"""

from speedtronic.alerts.builtin import Memory, NonFinite, Spike, Threshold, ThroughputDrop
from speedtronic.alerts.config import (
    DEFAULT_ALERTS,
    ON_ALERT,
    RULES,
    AlertConfigError,
    alerts_section,
    default_rules,
    rules_from_config,
)
from speedtronic.alerts.rule import DEFAULT_COOLDOWN, SEVERITIES, Alert, Rule, RuleSet
from speedtronic.alerts.stage import ALERT, AlertWatch, CheckAlerts, alert_fields, derive_alerts

__all__ = [
    "ALERT",
    "DEFAULT_ALERTS",
    "DEFAULT_COOLDOWN",
    "ON_ALERT",
    "RULES",
    "SEVERITIES",
    "Alert",
    "AlertConfigError",
    "AlertWatch",
    "CheckAlerts",
    "Memory",
    "NonFinite",
    "Rule",
    "RuleSet",
    "Spike",
    "Threshold",
    "ThroughputDrop",
    "alert_fields",
    "alerts_section",
    "default_rules",
    "derive_alerts",
    "rules_from_config",
]
