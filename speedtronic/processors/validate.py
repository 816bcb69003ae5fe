"""``ValidatePayloads``: a stage that checks each payload against the event catalog, and
``payload_problems``, the check itself (each payload ``TypedDict`` of ``speedtronic.events`` read once
into a predicate per key)."""

from __future__ import annotations

import types
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from structlog.typing import EventDict, WrappedLogger

from speedtronic.errors import EventPayloadError, EventPayloadWarning
from speedtronic.events import PAYLOADS, DeviceScalar

__all__ = ["ValidatePayloads", "payload_problems"]


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


# -- the check ------------------------------------------------------------------------------------


Check = Callable[[Any], bool]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_float(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_device_scalar(value: Any) -> bool:
    return callable(getattr(value, "item", None)) and getattr(value, "ndim", None) == 0


def _check_for(annotation: Any) -> Check:
    """A predicate for one annotation, decided once; shapes it can't check cheaply always pass."""
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        parts = [_check_for(arg) for arg in get_args(annotation)]
        return lambda value: any(part(value) for part in parts)
    if origin is list:
        item = _check_for(get_args(annotation)[0])
        return lambda value: isinstance(value, list) and all(item(element) for element in value)
    if origin is Literal:
        allowed = get_args(annotation)
        return lambda value: value in allowed
    simple: dict[Any, Check] = {
        int: _is_int,
        float: _is_float,
        bool: lambda value: isinstance(value, bool),
        str: lambda value: isinstance(value, str),
        type(None): lambda value: value is None,
        DeviceScalar: _is_device_scalar,
    }
    if annotation in simple:
        return simple[annotation]
    if isinstance(annotation, type):
        return lambda value: isinstance(value, annotation)
    return lambda value: True


def _describe(annotation: Any) -> str:
    if annotation is DeviceScalar:
        return "a 0-d tensor"
    if get_origin(annotation) is Union or get_origin(annotation) is types.UnionType:
        return " or ".join(_describe(arg) for arg in get_args(annotation))
    if annotation is type(None):
        return "None"
    return annotation.__name__ if isinstance(annotation, type) else str(annotation)


class _Schema:
    __slots__ = ("checks", "required")

    def __init__(self, payload_type: type[Mapping[str, Any]]) -> None:
        hints = get_type_hints(payload_type)
        self.required: frozenset[str] = payload_type.__required_keys__  # type: ignore[attr-defined]  # TypedDict
        self.checks = {key: (_check_for(hint), _describe(hint)) for key, hint in hints.items()}


_SCHEMAS = {str(event): _Schema(payload_type) for event, payload_type in PAYLOADS.items()}


def payload_problems(event: str, payload: Mapping[Any, Any]) -> list[str]:
    """What is wrong with ``payload`` for ``event``: missing required keys, values of the wrong type.

    An empty list when it matches; also for events outside the catalog, which are never checked.
    """
    schema = _SCHEMAS.get(str(event))
    if schema is None:
        return []
    problems = [f"missing required key {key!r}" for key in sorted(schema.required - payload.keys())]
    for key, value in payload.items():
        checked = schema.checks.get(key)
        if checked is not None and not checked[0](value):
            problems.append(f"{key}: expected {checked[1]}, got {type(value).__name__} {value!r}")
    return problems
