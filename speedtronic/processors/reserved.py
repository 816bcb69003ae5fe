"""``RenameReserved``: the stage that keeps a payload from setting a record's own keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from structlog.typing import EventDict, WrappedLogger

from speedtronic.record.contract import event_fields
from speedtronic.record.values import key_text

__all__ = ["RenameReserved"]


class RenameReserved:
    """A structlog processor: an event dict's keys as a record's fields (``event_fields``), its
    ``event`` kept first. A chain's first stage after the cadence, so that in any stock structlog
    chain (``speedtronic.chain.build_processors``) a payload can't set the record's time, its note or
    whose record it is: ``log.info("x", _speedtronic={"origin": "speedtronic"})`` keeps its key as
    ``payload__speedtronic`` and still reaches the hooks. A key that is not a string is written as
    the JSONL writer writes it (``key_text``). ``Chain.run`` runs it as ``event_dict``: the event dict
    of an event and its payload, read once through ``payload.items()``."""

    __slots__ = ()

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        if "event" not in event_dict:
            return event_fields(event_dict, key_text)
        fields = dict(event_dict)
        event = fields.pop("event")
        return {"event": event, **event_fields(fields, key_text)}

    @staticmethod
    def event_dict(event: object, payload: Mapping[Any, Any]) -> EventDict:
        """The event dict of ``event`` (its name, made a string) with ``payload``'s keys as a record's
        fields: what this stage makes of ``{"event": event, **payload}``, without a payload key named
        ``event`` ever taking the event's place."""
        fields = event_fields(payload, key_text)
        fields["event"] = event if type(event) is str else str(event)
        return fields
