"""The config's keys and the values each one takes; errors name the file, the key and what was expected.

``SCHEMA`` mirrors ``speedtronic.runtime.default_config()``: a nested mapping of sections whose leaves
are ``Value`` checks. ``validate`` walks one config layer (a file, the command line) against it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

__all__ = ["SCHEMA", "ConfigError", "Section", "Value", "validate"]


class ConfigError(ValueError):
    """A config that can't run: ``"<file>: <key>: expected ..., got ..."``."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.source, self.key, self.problem = source, key, problem
        super().__init__(": ".join(part for part in (source, key, problem) if part))


@dataclass(frozen=True)
class Value:
    """A leaf of the schema: what it expects, in words, and the check."""

    expected: str
    check: Callable[[Any], bool]
    items: Mapping[str, Value] | None = None
    """For a list of mappings: the keys each item may have (besides checking ``check`` on the list)."""


Section: TypeAlias = "Mapping[str, Section | Value]"


def _integer(minimum: int) -> Value:
    return Value(f"an integer >= {minimum}", lambda v: type(v) is int and v >= minimum)


def _number(expected: str, accept: Callable[[float], bool]) -> Value:
    return Value(expected, lambda v: type(v) in (int, float) and accept(v))


def _optional(value: Value) -> Value:
    return Value(f"{value.expected} or null", lambda v: v is None or value.check(v))


def _choice(*options: str) -> Value:
    shown = ", ".join(repr(option) for option in options)
    return Value(f"one of {shown}", lambda v: v in options)


_STRING = Value("a string", lambda v: isinstance(v, str))
_PATH = Value("a path", lambda v: isinstance(v, str) and v != "")
_BOOL = Value("true or false", lambda v: type(v) is bool)
_POSITIVE = _number("a number > 0", lambda v: v > 0)
_HOOKS = Value(
    "a list of hooks, each a mapping with a 'type' and the hook's arguments",
    lambda v: isinstance(v, list),
    items={"type": Value("a hook type name or 'package.module:factory'", _PATH.check)},
)

SCHEMA: Section = {
    "run_dir": _PATH,
    "model": {"hidden": _integer(1)},
    "data": {
        "vocab_size": _integer(2),
        "seq_len": _integer(1),
        "noise": _number("a number from 0 to 1", lambda v: 0 <= v <= 1),
    },
    "train": {
        "steps": _integer(0),
        "lr": _POSITIVE,
        "warmup_steps": _integer(0),
        "batch_size": _integer(1),
        "grad_accum": _integer(1),
        "max_grad_norm": _optional(_POSITIVE),
        "precision": _choice("fp32", "bf16"),
        "device": Value("'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'", lambda v: isinstance(v, str) and v != ""),
        "checkpoint_every": _integer(0),
        "compile": Value("true, false or a torch.compile backend name", lambda v: isinstance(v, (bool, str))),
        "seed": _integer(0),
        "resume": _BOOL,
        "outer_every": _integer(0),
        "outer_lr": _POSITIVE,
        "outer_momentum": _number("a number from 0 to less than 1", lambda v: 0 <= v < 1),
    },
    "logging": {
        "level": Value(
            "one of DEBUG, INFO, WARNING, ERROR, CRITICAL",
            lambda v: isinstance(v, str) and v.upper() in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
        ),
        "file": _optional(_PATH),
        "json_file": _optional(_PATH),
        "every_steps": _integer(1),
        "hooks": _HOOKS,
        "validate": _BOOL,
        "strict_hooks": _BOOL,
        "lead_rank": _optional(_integer(0)),
    },
}
"""Every key a config may have."""


def validate(layer: Any, section: Section, source: str, prefix: str = "") -> None:
    """Raise ``ConfigError`` for the first unknown key or wrong value in ``layer``; else return."""
    if not isinstance(layer, Mapping):
        where = prefix.rstrip(".") or "top level"
        raise ConfigError(source, where, f"expected a mapping, got {_shown(layer)}")
    for key, value in layer.items():
        name = f"{prefix}{key}"
        spec = section.get(key) if isinstance(key, str) else None
        if spec is None:
            known = ", ".join(sorted(section))
            raise ConfigError(source, name, f"unknown key; known keys here: {known}")
        if isinstance(spec, Value):
            if not spec.check(value):
                raise ConfigError(source, name, f"expected {spec.expected}, got {_shown(value)}")
            if spec.items is not None:
                for index, item in enumerate(value):
                    _validate_item(item, spec.items, source, f"{name}[{index}]")
        else:
            validate(value, spec, source, f"{name}.")


def _validate_item(item: Any, required: Mapping[str, Value], source: str, name: str) -> None:
    """A list item: a mapping holding every key of ``required`` (checked); other keys pass through."""
    if not isinstance(item, Mapping):
        raise ConfigError(source, name, f"expected a mapping with {', '.join(required)}, got {_shown(item)}")
    for key, spec in required.items():
        if key not in item:
            raise ConfigError(source, f"{name}.{key}", f"missing; expected {spec.expected}")
        if not spec.check(item[key]):
            raise ConfigError(source, f"{name}.{key}", f"expected {spec.expected}, got {_shown(item[key])}")
    for key in item:
        if not isinstance(key, str):
            raise ConfigError(source, f"{name}.{key!r}", "expected a string key (a keyword argument)")


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} ({type(value).__name__})" if not isinstance(value, (dict, list)) else text
