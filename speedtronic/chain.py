"""``build_chain``: the one place a ``MetricLogger``'s chain is assembled, and the ``Chain`` it returns.

The stages and their order are listed in ``docs/processors.md``; ``Chain.processors`` lists them for a
stock structlog chain."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FunctionType, MethodType
from typing import TYPE_CHECKING, Any, TypeVar, cast

import structlog
from structlog.typing import EventDict, Processor

from speedtronic.distributed import RankInfo
from speedtronic.hooks.dispatch import DispatchHooks
from speedtronic.processors import (
    DEFAULT_MAX_LINE_BYTES,
    AddElapsed,
    AddMemory,
    AddRank,
    AddTimestamp,
    CadenceFilter,
    ConvertValues,
    JSONLRenderer,
    Redact,
    RenameReserved,
    TextRenderer,
    WriteLines,
)
from speedtronic.record.secrets import redact_text
from speedtronic.record.text import DEFAULT_FLOAT_DIGITS

if TYPE_CHECKING:  # imported where used: only a chain with rules needs them
    from speedtronic.alerts import CheckAlerts, Rule, RuleSet

__all__ = ["Chain", "build_chain", "build_processors"]

_T = TypeVar("_T")
_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Chain:
    """A ``MetricLogger``'s stages by name, as ``build_chain`` assembles them; ``processors`` lists
    them in order."""

    cadence: CadenceFilter
    enrichment: tuple[Processor, ...]
    """speedtronic's own stages after the cadence: conversion, redaction, enrichment, timestamp."""
    extra: tuple[Processor, ...]
    """The user's processors, after the enrichment and before the outputs."""
    text: WriteLines | None
    json: WriteLines | None
    dispatch: DispatchHooks
    reserved: RenameReserved = field(default_factory=RenameReserved)
    """The payload's reserved keys renamed, as the event dict is made (``RenameReserved.event_dict``)."""
    redact_text: Callable[[str], str] | None = None
    """What hides secrets in a failure's text (``speedtronic.record.secrets.redact_text``), when the
    chain redacts."""
    alerts: CheckAlerts | None = None
    """The rules, when the chain has any: each alert is an ``alert`` record, written and delivered
    right after the record that raised it."""
    _to_outputs: tuple[Processor, ...] = field(init=False, repr=False, compare=False)
    _logger: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        stages: tuple[Processor, ...] = (*self.enrichment, *self.extra, *self.outputs)
        after = tuple(map(_direct_call, stages))  # each called straight at every event
        object.__setattr__(self, "_to_outputs", after)
        object.__setattr__(self, "_logger", structlog.ReturnLogger())

    @property
    def outputs(self) -> tuple[WriteLines, ...]:
        """The text line's output and the JSONL record's, those that are configured, in that order."""
        return tuple(output for output in (self.text, self.json) if output is not None)

    @property
    def processors(self) -> list[Processor]:
        """Every stage, in order: a list for any structlog chain."""
        alerts = [self.alerts] if self.alerts is not None else []
        return [
            self.cadence,
            self.reserved,
            *self.enrichment,
            *self.extra,
            *self.outputs,
            *alerts,
            self.dispatch,
        ]

    def admits(self, event: object, payload: Mapping[Any, Any]) -> bool:
        """Whether ``event`` with ``payload`` passes the cadence stage (``CadenceFilter.admits``)."""
        return self.cadence.admits(event, payload)

    def run(self, method_name: str, event: object, payload: Mapping[Any, Any]) -> None:
        """Run an event that passed the cadence (``admits``) through every later stage: its event
        dict made by ``reserved``, then the enrichment, your processors, the outputs, the alert rules
        and the hooks."""
        passed = self._through(self._to_outputs, method_name, self.reserved.event_dict(event, payload))
        if passed is None:
            return
        if self.alerts is None:
            self.dispatch.deliver(method_name, passed)  # the last stage, without its DropEvent
            return
        alerts = self.alerts.check(passed)
        self.dispatch.deliver(method_name, passed)
        if not alerts:
            return
        from speedtronic.alerts import alert_fields

        for alert in alerts:  # each an alert record, through the same stages, to the same hooks
            fields = self._through(self._to_outputs, alert.severity, alert_fields(alert))
            if fields is not None:
                self.dispatch.deliver(alert.severity, fields)

    def run_own(self, method_name: str, event_dict: EventDict, outputs: Sequence[WriteLines]) -> bool:
        """Run a record of the logger's own through the stages to ``outputs`` only (never to a hook);
        whether it reached them (``False``: a stage before them dropped it)."""
        stages: tuple[Processor, ...] = (*self.enrichment, *self.extra, *outputs)
        return self._through(stages, method_name, event_dict) is not None

    def _through(
        self, stages: tuple[Processor, ...], method_name: str, event_dict: EventDict
    ) -> EventDict | None:
        """``event_dict`` after ``stages``, called in turn as structlog calls them; ``None`` when one
        dropped it (``structlog.DropEvent``: a stage of the user's)."""
        logger = self._logger
        try:
            for stage in stages:
                event_dict = stage(logger, method_name, event_dict)  # type: ignore[assignment]  # dicts
        except structlog.DropEvent:
            return None
        return event_dict


@dataclass(frozen=True)
class _Stages:
    """A chain's stages that write nothing, built and checked before any file is opened
    (``_prepare``); ``chain`` assembles them with the outputs' writers and the hooks."""

    cadence: CadenceFilter
    enrichment: tuple[Processor, ...]
    extra: tuple[Processor, ...]
    text_renderer: TextRenderer
    json_renderer: JSONLRenderer
    text_level: int
    redact_text: Callable[[str], str] | None
    """What hides secrets in a failure's text (``redact_text``), when the chain redacts."""
    alerts: CheckAlerts | None = None

    def chain(
        self,
        *,
        text: Callable[[str], object] | None = None,
        json: Callable[[bytes], object] | None = None,
        hooks: Sequence[Any] = (),
        on_hook_error: Callable[[object, Exception, str | None], None] | None = None,
    ) -> Chain:
        """The chain, writing to ``text`` and ``json`` (each left out when ``None``) and calling
        ``hooks`` (a list read at each event; failures go to ``on_hook_error``)."""
        return Chain(
            cadence=self.cadence,
            enrichment=self.enrichment,
            extra=self.extra,
            text=WriteLines(text, self.text_renderer, self.text_level) if text is not None else None,
            json=WriteLines(json, self.json_renderer) if json is not None else None,
            dispatch=DispatchHooks(hooks, on_error=on_hook_error),
            alerts=self.alerts,
            redact_text=self.redact_text,
        )


def _prepare(
    *,
    every_steps: int = 1,
    redact: bool | Iterable[str] = True,
    device: Any = None,
    rank: RankInfo | None = None,
    clock: Callable[[], float] = time.time,
    processors: Iterable[Processor] = (),
    text_level: int = logging.INFO,
    max_line_bytes: int | None = DEFAULT_MAX_LINE_BYTES,
    float_digits: int | None = DEFAULT_FLOAT_DIGITS,
    local_time: bool = False,
    alerts: RuleSet | Iterable[Rule] | None = None,
    caller: str = "build_chain",
) -> _Stages:
    """The stages for these options, each option checked by the stage it configures; an error names
    ``caller`` and says what was expected. ``rank`` adds ``rank``/``world_size`` when the job has more
    than one process. ``alerts`` (rules, or a ``RuleSet``) adds the ``CheckAlerts`` stage. ``MetricLogger``
    calls it before it opens a file, and assembles the chain once they are open."""
    cadence = _checked(caller, lambda: CadenceFilter(every_steps))
    enrichment: list[Processor] = [ConvertValues()]
    if redact is not False:
        enrichment.append(_checked(caller, lambda: Redact() if redact is True else Redact(redact)))
    if alerts is not None:
        from speedtronic.alerts import CheckAlerts
    check = _checked(caller, lambda: CheckAlerts(alerts)) if alerts is not None else None
    if check is not None and not check.rules.rules:
        check = None  # alerts=[]: no rule, no stage
    allocator = check is not None and any(getattr(r, "reads_allocator", False) for r in check.rules.rules)
    try:
        enrichment += [AddElapsed(), AddMemory(device, allocator=allocator)]
    except Exception as error:  # torch refused the device
        raise ValueError(f"{caller}(device={device!r}): {type(error).__name__}: {error}") from None
    if rank is not None and rank.distributed:
        enrichment.append(AddRank(rank.rank, rank.world_size))
    enrichment.append(AddTimestamp(clock))
    extra = tuple(processors)
    for processor in extra:
        if not callable(processor):
            raise TypeError(f"{caller}(processors=...): {processor!r} is not a structlog processor")
    text_renderer = _checked(
        caller,
        lambda: TextRenderer(
            clock, float_digits=float_digits, max_line_bytes=max_line_bytes, local_time=local_time
        ),
    )
    json_renderer = _checked(
        caller, lambda: JSONLRenderer(clock, as_bytes=True, max_line_bytes=max_line_bytes)
    )
    hide = redact_text if redact is not False else None
    return _Stages(cadence, tuple(enrichment), extra, text_renderer, json_renderer, text_level, hide, check)


def build_chain(
    *,
    text: Callable[[str], object] | None = None,
    json: Callable[[bytes], object] | None = None,
    hooks: Sequence[Any] = (),
    on_hook_error: Callable[[object, Exception, str | None], None] | None = None,
    **options: Any,
) -> Chain:
    """A ``MetricLogger``'s chain, for these options (``MetricLogger``'s, from ``every_steps`` to
    ``local_time``, and ``text_level``), each checked by the stage it configures.

    ``text`` and ``json`` receive each rendered line (a ``str`` at or above ``text_level``, and
    ``bytes``); either may be left out. ``hooks`` (a list read at each event) get every kept event.
    """
    return _prepare(**options).chain(text=text, json=json, hooks=hooks, on_hook_error=on_hook_error)


def build_processors(**options: Any) -> list[Processor]:
    """``build_chain(**options).processors``: a ``MetricLogger``'s stages as a list, for your own
    structlog chain (``structlog.wrap_logger(structlog.ReturnLogger(), processors=build_processors(
    text=print))``)."""
    options.setdefault("caller", "build_processors")
    return build_chain(**options).processors


def _direct_call(stage: _F) -> _F:
    """What calling ``stage`` runs, taken once: an instance's own ``__call__`` method when its class
    defines one in Python (called straight, that skips the instance-call lookup: about 50 ns a stage
    and event), else ``stage`` itself (a function, a builtin)."""
    call = inspect.getattr_static(type(stage), "__call__", None)  # a staticmethod stays one
    return cast(_F, MethodType(call, stage)) if isinstance(call, FunctionType) else stage


def _checked(caller: str, build: Callable[[], _T]) -> _T:
    """``build()``, its argument error prefixed with ``caller`` (the stage names the argument)."""
    try:
        return build()
    except (TypeError, ValueError) as error:
        raise type(error)(f"{caller}: {error}") from None
