"""Alerts: rules over the event stream that say when a run goes wrong, as records of the run.

``rule`` (``Alert``, ``Rule``, ``RuleSet``), ``builtin`` (the built-in rules), ``stage`` (``CheckAlerts``,
``derive_alerts``), ``config`` (rules from an ``alerts:`` section). ``docs/alerts.md`` describes them."""

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
from speedtronic.alerts.rule import DEFAULT_COOLDOWN, SEVERITIES, Alert, Rule, RuleSet, check_rule
from speedtronic.alerts.stage import (
    ALERT,
    AlertCount,
    AlertWatch,
    CheckAlerts,
    alert_fields,
    alert_step,
    derive_alerts,
)

__all__ = [
    "ALERT",
    "DEFAULT_ALERTS",
    "DEFAULT_COOLDOWN",
    "ON_ALERT",
    "RULES",
    "SEVERITIES",
    "Alert",
    "AlertConfigError",
    "AlertCount",
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
    "alert_step",
    "alerts_section",
    "check_rule",
    "default_rules",
    "derive_alerts",
    "rules_from_config",
]
