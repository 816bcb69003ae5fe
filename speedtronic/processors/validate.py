"""``ValidatePayloads``: a stage that checks each payload against the event catalog."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from structlog.typing import EventDict, WrappedLogger

from speedtronic.errors import EventPayloadError, EventPayloadWarning
from speedtronic.events import payload_problems

__all__ = ["ValidatePayloads"]


class ValidatePayloads:
    """A structlog processor that checks each event's payload against the catalog.

    A mismatch warns ``EventPayloadWarning`` (the event still passes), or with ``strict=True`` raises
    ``EventPayloadError``. Place it before ``ConvertValues`` or after: 0-d tensors are accepted where a
    number is expected, without reading them.
    """

    __slots__ = ("_strict",)

    def __init__(self, strict: bool = False) -> None:
        self._strict = strict

    def check(self, event: str, payload: Mapping[Any, Any]) -> None:
        """Warn or raise when ``payload`` does not match ``event``'s ``TypedDict``."""
        problems = payload_problems(event, payload)
        if not problems:
            return
        message = f"{event} payload does not match speedtronic.events: {'; '.join(problems)}"
        if self._strict:
            raise EventPayloadError(message)
        warnings.warn(message, EventPayloadWarning, stacklevel=3)

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        payload = {key: value for key, value in event_dict.items() if key != "event"}
        self.check(str(event_dict.get("event", "")), payload)
        return event_dict
