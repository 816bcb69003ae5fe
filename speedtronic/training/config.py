"""The config, defined once: typed sections whose fields carry their default, their check and their doc."""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from speedtronic.alerts import DEFAULT_ALERTS, ON_ALERT, RULES
from speedtronic.checks import is_seconds
from speedtronic.integrations.system import DEFAULT_INTERVAL_S
from speedtronic.levels import LEVELS
from speedtronic.record.secrets import redact_text

if TYPE_CHECKING:
    import yaml

__all__ = [
    "SCHEMA",
    "Config",
    "ConfigError",
    "DataConfig",
    "LoggingConfig",
    "ModelConfig",
    "Section",
    "TrainConfig",
    "Value",
    "default_values",
    "markdown_table",
    "validate",
    "yaml_loader",
    "yaml_problem",
]


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
_SECONDS = Value("a number of seconds > 0 and finite", is_seconds)  # SystemMonitor's own rule
_HOOKS = Value(
    "a list of hooks, each a mapping with a 'type' and the hook's arguments",
    lambda v: isinstance(v, list),
    items={"type": Value("a hook type name or 'package.module:factory'", _PATH.check)},
)
_ALERTS = Value(
    "a list of rules, each a mapping with a 'rule' and its options",
    lambda v: isinstance(v, list),
    items={"rule": Value(f"one of {', '.join(RULES)}, or 'package.module:factory'", _PATH.check)},
)
_LEVEL = Value(f"one of {', '.join(LEVELS)}", lambda v: isinstance(v, str) and v.upper() in LEVELS)


def _meta(value: Value, doc: str, shown: str | None = None) -> dict[str, Any]:
    """A key's check and one line of docs (``shown``: its default in words, for the docs)."""
    return {"value": value, "doc": doc, "shown": shown}


def _key(default: Any, value: Value, doc: str, *, shown: str | None = None) -> Any:
    """A config key with an immutable default, its check and its docs."""
    return field(default=default, metadata=_meta(value, doc, shown))


@dataclass
class ModelConfig:
    """``model:`` the reference model (embedding, one hidden layer, logits)."""

    hidden: int = _key(64, _integer(1), "hidden size; a multiple of 8 (16 for bf16) avoids a shape_warning")


@dataclass
class DataConfig:
    """``data:`` the synthetic task: learn each token's fixed successor."""

    vocab_size: int = _key(32, _integer(2), "tokens in the vocabulary")
    seq_len: int = _key(16, _integer(1), "tokens per sequence")
    noise: float = _key(
        0.2,
        _number("a number from 0 to 1", lambda v: 0 <= v <= 1),
        "share of targets replaced by random tokens (the loss floor rises with it)",
    )


@dataclass
class TrainConfig:
    """``train:`` the reference trainer."""

    steps: int = _key(200, _integer(0), "the absolute step to train up to (`--steps N`)")
    lr: float = _key(0.001, _POSITIVE, "peak learning rate (AdamW): linear warm-up, then cosine down to 10%")
    warmup_steps: int = _key(20, _integer(0), "steps of linear warm-up")
    schedule_steps: int | None = _key(
        None,
        _optional(_integer(1)),
        "where the cosine reaches its floor; null: `steps` when the run starts. A resumed run keeps "
        "the recorded value, so extending it with a larger `--steps` trains on at the floor",
    )
    batch_size: int = _key(32, _integer(1), "sequences per microbatch")
    grad_accum: int = _key(1, _integer(1), "microbatches per optimizer step")
    max_grad_norm: float | None = _key(
        1.0, _optional(_POSITIVE), "clip the gradient norm to this; null measures it without clipping"
    )
    precision: str = _key("fp32", _choice("fp32", "bf16"), "fp32, or bf16 autocast where the device has it")
    peak_flops: float | None = _key(
        None,
        _optional(_POSITIVE),
        "the device's peak FLOP/s at `precision`, recorded for MFU; null: the table's figure for a known GPU",
    )
    device: str = _key(
        "auto",
        Value("'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'", lambda v: isinstance(v, str) and v != ""),
        "auto: CUDA when present, else the CPU",
    )
    checkpoint_every: int = _key(
        100, _integer(0), "save `checkpoints/step_<N>.pt` every N steps and at the end; 0: never"
    )
    keep_checkpoints: int = _key(3, _integer(0), "keep the newest N checkpoints; 0: keep all")
    eval_every: int = _key(
        50, _integer(0), "evaluate on a held-out split every N steps and at the end (`eval`); 0: never"
    )
    eval_batches: int = _key(4, _integer(1), "batches in the held-out split (drawn once, own seed)")
    compile: bool | str = _key(
        False,
        Value("true, false or a torch.compile backend name", lambda v: isinstance(v, (bool, str))),
        "true (torch.compile, inductor) or a backend name; a failure falls back to eager",
    )
    seed: int = _key(0, _integer(0), "seeds the model, the data and every RNG")
    resume: bool = _key(False, _BOOL, "continue the run in `run_dir` from its latest checkpoint (`--resume`)")
    dist_timeout_s: float = _key(
        60,
        _POSITIVE,
        "torchrun jobs: seconds the ranks wait for each other to form the group, and to agree on the "
        "config and the checkpoint at start and resume, before failing with one line",
    )
    outer_every: int = _key(
        0, _integer(0), "DiLoCo: inner steps per outer step (torchrun jobs); 0: off (DDP when distributed)"
    )
    outer_lr: float = _key(0.7, _POSITIVE, "the outer optimizer's learning rate (DiLoCo paper: 0.7)")
    outer_momentum: float = _key(
        0.9,
        _number("a number from 0 to less than 1", lambda v: 0 <= v < 1),
        "the outer optimizer's Nesterov momentum (0: plain SGD)",
    )


@dataclass
class LoggingConfig:
    """``logging:`` the ``MetricLogger`` and its hooks."""

    level: str = _key("INFO", _LEVEL, "threshold of the text log only; JSONL and hooks get every event")
    file: str | None = _key(None, _optional(_PATH), "text log to this file instead of stdout")
    json_file: str | None = _key(
        "{run_dir}/metrics.jsonl", _optional(_PATH), "one JSON object per event; null: no JSONL"
    )
    every_steps: int = _key(20, _integer(1), "log a train_step only when step % every_steps == 0")
    hooks: list[dict[str, Any]] = field(
        default_factory=list,
        metadata=_meta(
            _HOOKS,
            "hooks called for every logged event, each a type and its factory's arguments",
            shown="tensorboard when installed",
        ),
    )
    validate: bool = _key(False, _BOOL, "check every payload against speedtronic.events (for tests)")
    strict_hooks: bool = _key(False, _BOOL, "a failing hook raises speedtronic.HookError instead of warning")
    lead_rank: int | None = _key(
        0, _optional(_integer(0)), "under torchrun: the rank with the text log and hooks; null: every rank"
    )
    system_interval_s: float | None = _key(
        DEFAULT_INTERVAL_S,
        _optional(_SECONDS),
        "seconds between two `system` events (CPU, memory: psutil; GPUs: speedtronic[system]); null: none",
    )


@dataclass
class Config:
    """A whole config. ``{run_dir}`` in a logging path or a hook's argument stands for the run directory."""

    run_dir: str | None = _key(
        None,
        _optional(_PATH),
        "where the run's files go (`--run-dir`); null: a fresh one",
        shown="a fresh `runs/<YYYYmmdd-HHMMSS>`",
    )
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    alerts: list[dict[str, Any]] = field(
        default_factory=lambda: [dict(entry) for entry in DEFAULT_ALERTS],
        metadata=_meta(
            _ALERTS,
            "rules run on every logged record, each an `alert` record when it fires (docs/alerts.md); "
            "`[]`: none",
            shown="`non_finite`, `spike`",
        ),
    )
    on_alert: str = _key(
        "log",
        _choice(*ON_ALERT),
        "log: alerts are records only; stop: the trainer stops cleanly at the step that alerted "
        "(checkpoint, `train_end` status `stopped`, exit code 3)",
    )


def default_values() -> dict[str, Any]:
    """``Config()``'s defaults as plain data (``logging.hooks`` empty: the runtime adds TensorBoard)."""
    return asdict(Config())


def _schema(cls: type[Any]) -> dict[str, Any]:
    section: dict[str, Any] = {}
    for item in fields(cls):
        if item.metadata:
            section[item.name] = item.metadata["value"]
        else:
            assert is_dataclass(item.default_factory)  # a section: its default is its class
            section[item.name] = _schema(item.default_factory)
    return section


SCHEMA: Section = _schema(Config)
"""Every key a config may have, and its check: derived from ``Config``."""


# A test keeps docs/configuration.md's table and examples/config.yaml equal to the schema.
def markdown_table() -> str:
    """The reference table of ``docs/configuration.md``: one row per key, derived from ``Config``."""
    rows = ["| key | default | accepts | meaning |", "| --- | --- | --- | --- |"]

    def walk(cls: type[Any], prefix: str) -> None:
        for item in fields(cls):
            if not item.metadata:
                walk(item.default_factory, f"{prefix}{item.name}.")  # type: ignore[arg-type]  # a section
                continue
            meta = item.metadata
            default = meta["shown"] or f"`{_yaml(_default_of(item))}`"
            rows.append(f"| `{prefix}{item.name}` | {default} | {meta['value'].expected} | {meta['doc']} |")

    walk(Config, "")
    return "\n".join(rows)


def _default_of(item: Any) -> Any:
    return item.default_factory() if item.default is MISSING else item.default


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


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
            close = difflib.get_close_matches(str(key), list(section), n=1)
            guess = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(source, name, f"unknown key; {guess}known keys here: {known}")
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
        problem = f"expected a mapping with {', '.join(required)}, got {_shown(item)}"
        if isinstance(item, str) and len(required) == 1:  # `hooks: [tensorboard]`: the key was left out
            problem += f"; write {{{next(iter(required))}: {item}}}"
        raise ConfigError(source, name, problem)
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
    text = redact_text(repr(value))  # a wrong value may hold a key: {type: wandb, api_key: ...}
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} ({type(value).__name__})" if not isinstance(value, (dict, list)) else text


_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
"""A float written with an exponent: ``1e-3``, ``5E4``, ``1.0e3``, ``.5e-2``."""


@functools.cache
def yaml_loader() -> type[yaml.SafeLoader]:
    """PyYAML's ``SafeLoader``, reading ``1e-3`` as the number YAML 1.2 says it is.

    PyYAML follows YAML 1.1, whose floats need a dot and a signed exponent (``1.0e-3``): ``lr: 1e-3``,
    as ML configs write learning rates, would load as the string ``'1e-3'``.
    """
    import yaml

    class ConfigLoader(yaml.SafeLoader):
        """``SafeLoader`` with exponent floats (its own resolver table: ``SafeLoader`` is unchanged)."""

    ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789."))
    return ConfigLoader


def yaml_problem(error: Exception) -> tuple[str, str]:
    """``(where, problem)`` of PyYAML's ``error``: ``("line 4, column 1", "invalid YAML: expected ','
    or ']', but got '<stream end>'")``, where its message spans lines and says the place last."""
    mark = getattr(error, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(error, "problem", None) or str(error)
    return where, f"invalid YAML: {problem}"
