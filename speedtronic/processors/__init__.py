"""speedtronic's stages as structlog processors, usable in any structlog chain.

Each is a callable ``(logger, method_name, event_dict) -> event_dict``, configured in ``__init__``.
A stage that filters raises ``structlog.DropEvent``; no stage depends on key order or deletes a key it
doesn't own. ``speedtronic.profiling.build_processors`` puts them in ``MetricLogger``'s order (listed,
and checked by a test, in ``docs/processors.md``).

One module per concern: ``cadence``, ``convert``, ``redact``, ``enrich``, ``text`` and ``render``,
``output``. ``DispatchHooks`` and ``HookFailures`` belong to the hook contract
(``speedtronic.hooks.dispatch``); they are importable here too, where the chain's stages are listed.
"""

from typing import Any

from speedtronic.events import EVENT_LEVELS, level_for
from speedtronic.processors.cadence import CadenceFilter, step_number
from speedtronic.processors.convert import ConvertValues
from speedtronic.processors.enrich import AddElapsed, AddMemory, AddRank, AddTimestamp
from speedtronic.processors.output import WriteLines
from speedtronic.processors.redact import REDACTED, Redact, is_secret_key, redact_text
from speedtronic.processors.render import DEFAULT_MAX_LINE_BYTES, CapLine, JSONLRenderer, TextRenderer

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "EVENT_LEVELS",
    "REDACTED",
    "AddElapsed",
    "AddMemory",
    "AddRank",
    "AddTimestamp",
    "CadenceFilter",
    "CapLine",
    "ConvertValues",
    "DispatchHooks",
    "HookFailures",
    "JSONLRenderer",
    "Redact",
    "TextRenderer",
    "WriteLines",
    "is_secret_key",
    "level_for",
    "redact_text",
    "step_number",
]


def __getattr__(name: str) -> Any:
    """``DispatchHooks`` and ``HookFailures``, from the hook contract where they live (imported on
    first use: ``speedtronic.hooks`` builds on this package, not the other way round)."""
    if name in ("DispatchHooks", "HookFailures"):
        from speedtronic.hooks import dispatch

        return getattr(dispatch, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
