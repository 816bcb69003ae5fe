"""``RenameReserved``: the stage that keeps a payload from setting a record's own keys."""

from __future__ import annotations

from structlog.typing import EventDict, WrappedLogger

from speedtronic.record.contract import event_fields

__all__ = ["RenameReserved"]


class RenameReserved:
    """A structlog processor: an event dict's keys as a record's fields (``event_fields``), its
    ``event`` kept first. A chain's first stage after the cadence, so that in any stock structlog
    chain (``speedtronic.chain.build_processors``) a payload can't set the record's time, its note or
    whose record it is: ``log.info("x", _speedtronic={"origin": "speedtronic"})`` keeps its key as
    ``payload__speedtronic`` and still reaches the hooks. ``MetricLogger.emit`` builds its event dict
    with ``event_fields`` itself, so its chain runs this stage only in a stock chain."""

    __slots__ = ()

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        if "event" not in event_dict:
            return event_fields(event_dict)
        fields = dict(event_dict)
        event = fields.pop("event")
        return {"event": event, **event_fields(fields)}
