"""speedtronic's stages as structlog processors, usable in any structlog chain.

One module per stage's concern: ``cadence``, ``reserved``, ``convert``, ``redact``, ``enrich``,
``render``, ``output``, ``validate``. The values they work with are ``speedtronic.record``'s."""

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
