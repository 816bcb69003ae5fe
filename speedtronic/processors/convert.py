"""``ConvertValues``: the stage that turns tensors and numpy values into Python numbers and lists
(the conversion itself is ``speedtronic.record.values``)."""

from __future__ import annotations

from structlog.typing import EventDict, WrappedLogger

from speedtronic.record.values import (
    CYCLE,
    MAX_DEPTH,
    MAX_ELEMENTS,
    MAX_REPEATS,
    PLAIN_NUMBERS,
    PLAIN_TYPES,
    Converted,
    Truncated,
    convert_fields,
    is_plain,
    json_safe_record,
    key_text,
    to_python,
    truncate,
    unique_key,
)

__all__ = [
    "CYCLE",
    "MAX_DEPTH",
    "MAX_ELEMENTS",
    "MAX_REPEATS",
    "PLAIN_NUMBERS",
    "PLAIN_TYPES",
    "ConvertValues",
    "Converted",
    "Truncated",
    "is_plain",
    "json_safe_record",
    "key_text",
    "to_python",
    "truncate",
    "unique_key",
]


class ConvertValues:
    """Turns 0-d tensors and numpy scalars into Python numbers, n-d ones into lists (at any depth).

    This is the only stage that reads device values, and it runs after the cadence: a skipped step
    never calls ``.item()``, so it never forces a device sync. Containers are walked once per event
    (shared ones are converted once, cycles become ``"<cycle>"``), nesting deeper than ``MAX_DEPTH``
    becomes a marker.
    """

    __slots__ = ()

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        if PLAIN_TYPES.issuperset(map(type, event_dict.values())):  # the common case, tested at C speed
            return event_dict
        convert_fields(event_dict)
        return event_dict
