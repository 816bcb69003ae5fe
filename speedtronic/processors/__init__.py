"""speedtronic's stages as structlog processors, usable in any structlog chain.

Each is a callable ``(logger, method_name, event_dict) -> event_dict``, configured in ``__init__``.
A stage that filters raises ``structlog.DropEvent``; no stage depends on key order or deletes a key it
doesn't own. ``MetricLogger`` runs them in this order (see ``speedtronic.profiling``)::

    [CadenceFilter, asked by emit first] -> ConvertValues -> [Redact] -> AddElapsed -> AddMemory
      -> [AddRank] -> your processors -> WriteLines(TextRenderer) -> WriteLines(JSONLRenderer)
      -> DispatchHooks (final: consumes the event)

One module per concern: ``cadence``, ``enrich``, ``redact``, ``convert``, ``text`` and ``render``,
``output``, ``dispatch``.
"""

from speedtronic.events import EVENT_LEVELS, level_for
from speedtronic.processors.cadence import CadenceFilter, step_number
from speedtronic.processors.convert import ConvertValues
from speedtronic.processors.dispatch import DispatchHooks, HookFailures
from speedtronic.processors.enrich import AddElapsed, AddMemory, AddRank
from speedtronic.processors.output import WriteLines, WriteText
from speedtronic.processors.redact import (
    DEFAULT_SECRET_PATTERNS,
    REDACTED,
    Redact,
    is_secret_key,
    redact_text,
)
from speedtronic.processors.render import DEFAULT_MAX_LINE_BYTES, CapLine, JSONLRenderer, TextRenderer

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_SECRET_PATTERNS",
    "EVENT_LEVELS",
    "REDACTED",
    "AddElapsed",
    "AddMemory",
    "AddRank",
    "CadenceFilter",
    "CapLine",
    "ConvertValues",
    "DispatchHooks",
    "HookFailures",
    "JSONLRenderer",
    "Redact",
    "TextRenderer",
    "WriteLines",
    "WriteText",
    "is_secret_key",
    "level_for",
    "redact_text",
    "step_number",
]
