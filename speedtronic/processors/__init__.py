"""speedtronic's stages as structlog processors, usable in any structlog chain.

Each is a callable ``(logger, method_name, event_dict) -> event_dict``, configured in ``__init__``.
A stage that filters raises ``structlog.DropEvent``; no stage depends on key order or deletes a key it
doesn't own. ``speedtronic.chain.build_chain`` puts them in ``MetricLogger``'s order (listed, and
checked by a test, in ``docs/processors.md``).

One module per stage's concern: ``cadence``, ``reserved``, ``convert``, ``redact``, ``enrich``,
``render``, ``output``, ``validate``. What they compute with (value conversion, secrets, text quoting,
the record contract) is the record floor below them, ``speedtronic.record``.
The chain's final stage, ``DispatchHooks``, belongs to the hook contract: ``speedtronic.hooks``.
"""

from speedtronic.processors.cadence import CadenceFilter, step_number
from speedtronic.processors.convert import ConvertValues
from speedtronic.processors.enrich import AddElapsed, AddMemory, AddRank, AddTimestamp
from speedtronic.processors.output import WriteLines
from speedtronic.processors.redact import REDACTED, Redact, is_secret_key, redact_text
from speedtronic.processors.render import DEFAULT_MAX_LINE_BYTES, CapLine, JSONLRenderer, TextRenderer
from speedtronic.processors.reserved import RenameReserved
from speedtronic.processors.validate import ValidatePayloads

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "REDACTED",
    "AddElapsed",
    "AddMemory",
    "AddRank",
    "AddTimestamp",
    "CadenceFilter",
    "CapLine",
    "ConvertValues",
    "JSONLRenderer",
    "Redact",
    "RenameReserved",
    "TextRenderer",
    "ValidatePayloads",
    "WriteLines",
    "is_secret_key",
    "redact_text",
    "step_number",
]
