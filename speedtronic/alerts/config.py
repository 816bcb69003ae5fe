"""Rules from configuration: the ``alerts:`` section of a ``speedtronic train`` config or an
``--alerts`` file, checked once where it enters (``docs/alerts.md`` shows the format)."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from speedtronic.alerts.builtin import Memory, NonFinite, Spike, Threshold, ThroughputDrop
from speedtronic.alerts.rule import Rule, check_rule

__all__ = [
    "DEFAULT_ALERTS",
    "ON_ALERT",
    "RULES",
    "AlertConfigError",
    "alerts_section",
    "default_rules",
    "rules_from_config",
]

RULES: Mapping[str, Callable[..., Rule]] = {
    "memory": Memory,
    "non_finite": NonFinite,
    "spike": Spike,
    "threshold": Threshold,
    "throughput_drop": ThroughputDrop,
}
"""The built-in rules by the name a config gives them."""

DEFAULT_ALERTS: tuple[Mapping[str, Any], ...] = ({"rule": "non_finite"}, {"rule": "spike"})
"""The rules ``speedtronic train`` and the framework adapters run unless told otherwise."""

ON_ALERT = ("log", "stop")
"""What a trainer does on an alert: ``log`` (the alert records only) or ``stop`` (a clean stop)."""


class AlertConfigError(ValueError):
    """An ``alerts:`` entry that can't be built: ``"<source>: alerts[<i>]: <problem>"`` (``source``,
    ``key`` and ``problem`` apart, as ``speedtronic.training.config.ConfigError`` has them)."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.source, self.key, self.problem = source, key, problem
        super().__init__(": ".join(part for part in (source, key, problem) if part))


def default_rules() -> list[Rule]:
    """New rules for ``DEFAULT_ALERTS``: non-finite onset and spike, with their defaults."""
    return rules_from_config(DEFAULT_ALERTS)


def rules_from_config(entries: Any, source: str = "alerts") -> list[Rule]:
    """New rules for the entries of an ``alerts:`` list; ``AlertConfigError`` names the first that
    is wrong (an unknown rule lists the built-in ones, an unknown key the rule's keys)."""
    if not isinstance(entries, list | tuple):
        raise AlertConfigError(source, "alerts", f"expected a list of rules, got {entries!r}")
    rules: list[Rule] = []
    for index, entry in enumerate(entries):
        where = f"alerts[{index}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("rule"), str):
            problem = f"expected a mapping with a 'rule' (one of {', '.join(RULES)}), got {entry!r}"
            raise AlertConfigError(source, where, problem)
        name = entry["rule"]
        factory = _factory(name, source, where)
        options = {key: value for key, value in entry.items() if key != "rule"}
        known = _parameters(factory)
        unknown = [
            key for key in options if not isinstance(key, str) or (known is not None and key not in known)
        ]
        if unknown:
            listed = ", ".join(sorted(known or ()))
            raise AlertConfigError(source, where, f"{name}: unknown key {unknown[0]!r}; its keys: {listed}")
        try:
            rule = factory(**options)
            check_rule(rule)  # what a factory made runs in a RuleSet: refused here, not at the first record
        except (TypeError, ValueError) as error:
            raise AlertConfigError(source, where, f"{name}: {error}") from None
        except Exception as error:  # a factory of the user's failing its own way: its type says how
            raise AlertConfigError(source, where, f"{name}: {type(error).__name__}: {error}") from error
        rules.append(rule)
    return rules


def alerts_section(data: Any, source: str) -> tuple[list[Rule], str]:
    """The rules and the ``on_alert`` of a mapping holding an ``alerts:`` list (an ``--alerts`` file);
    ``AlertConfigError`` for any other key, a missing ``alerts:`` or an unknown ``on_alert``."""
    if not isinstance(data, Mapping) or "alerts" not in data:
        raise AlertConfigError(source, "", "expected a mapping with an 'alerts:' list of rules")
    other = [key for key in data if key not in ("alerts", "on_alert")]
    if other:
        raise AlertConfigError(source, str(other[0]), "unknown key; known keys: alerts, on_alert")
    on_alert = data.get("on_alert", "log")
    if on_alert not in ON_ALERT:
        raise AlertConfigError(source, "on_alert", f"expected one of {', '.join(ON_ALERT)}, got {on_alert!r}")
    return rules_from_config(data["alerts"], source), on_alert


def _factory(name: str, source: str, where: str) -> Callable[..., Rule]:
    if name in RULES:
        return RULES[name]
    module_name, colon, attribute = name.partition(":")
    if not colon:
        problem = f"unknown rule {name!r}; rules: {', '.join(RULES)} (or 'package.module:factory')"
        raise AlertConfigError(source, where, problem)
    try:
        found: Any = importlib.import_module(module_name.strip())
        for part in attribute.strip().split("."):
            found = getattr(found, part)
    except Exception as error:  # ImportError, AttributeError, or the module's own (a SyntaxError)
        raise AlertConfigError(
            source, where, f"rule {name!r} can't be imported: {_described(error)}"
        ) from None
    if not callable(found):
        raise AlertConfigError(source, where, f"rule {name!r} is not a class or factory")
    return found  # type: ignore[no-any-return]  # a callable the user named


def _described(error: Exception) -> str:
    """An import's failure in words: an ``ImportError``'s or ``AttributeError``'s message says it all;
    another (the module's own ``SyntaxError``, ``NameError``...) is named by its type."""
    return (
        str(error) if isinstance(error, ImportError | AttributeError) else f"{type(error).__name__}: {error}"
    )


def _parameters(factory: Callable[..., Any]) -> set[str] | None:
    """The keyword arguments ``factory`` takes; ``None`` when it takes any (``**options``) or has no
    signature."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
