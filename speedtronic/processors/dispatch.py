"""``DispatchHooks``: the chain's final stage, calling each hook with ``(event, payload)``.

A hook is an object with ``on_event(event, payload)`` or a callable with that signature. Each is
checked when it is registered (``as_callback``), not at step 10,000. A hook's ``Exception`` is a value:
``HookFailures`` counts it per hook, reports it (the first with its traceback, then the 2nd, 4th,
8th... with a count) and the other hooks still run; ``BaseException`` (``KeyboardInterrupt``,
``SystemExit``) propagates.
"""

from __future__ import annotations

import inspect
import itertools
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, cast

import structlog
from structlog.typing import EventDict, WrappedLogger

from speedtronic.errors import HookError, HookFailureWarning, warn_at_caller
from speedtronic.processors.convert import safe_str

__all__ = [
    "Callback",
    "DispatchHooks",
    "HookFailures",
    "as_callback",
    "close_hook",
    "hook_name",
    "takes_level",
    "target_of",
]

Callback = Callable[[str, dict[str, Any]], None]


def hook_name(hook: object) -> str:
    """A readable name for reports: a function's qualified name, else the hook's class name."""
    name = getattr(hook, "__qualname__", None)
    return name if isinstance(name, str) else type(hook).__qualname__


def target_of(hook: Any) -> Any:
    """What calling ``hook`` means: its ``on_event`` when that is callable, else the hook itself."""
    method = getattr(hook, "on_event", None)
    return method if callable(method) else hook


def as_callback(hook: object) -> Callback:
    """The ``(event, payload)`` callable of ``hook``, or a ``TypeError`` naming the hook and the problem.

    The signature is the callable's own (``follow_wrapped=False``): a wrapper such as
    ``speedtronic.hooks.on_event(f)`` is checked as the wrapper, not as the function it wraps.
    """
    target = target_of(hook)
    if not callable(target):
        raise TypeError(
            f"hook {hook_name(hook)!r} is neither a TrainingHook (an object with "
            "on_event(event, payload)) nor a callable(event, payload)"
        )
    try:
        signature = inspect.signature(target, follow_wrapped=False)
    except (TypeError, ValueError):  # builtins without a signature: accepted, they fail loudly later
        return cast(Callback, target)
    try:
        signature.bind("event", {})
    except TypeError as exc:
        shown = hook_name(hook) if target is hook else f"{hook_name(hook)}.on_event"
        raise TypeError(
            f"hook {shown!r} can't be called as (event, payload): {exc}; "
            "wrap a function with another signature in speedtronic.hooks.on_event(...)"
        ) from None
    return cast(Callback, target)


def takes_level(target: Callable[..., Any]) -> bool:
    """Whether ``target`` accepts a keyword argument ``level`` (then it is called with the record's level)."""
    try:
        parameter = inspect.signature(target, follow_wrapped=False).parameters.get("level")
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY
    )


def close_hook(hook: object) -> None:
    """Call ``hook.close()`` when the hook has one."""
    close = getattr(hook, "close", None)
    if callable(close):
        close()


Report = Callable[[dict[str, Any]], None]
"""Receives a ``hook_error`` record's fields (``hook``, ``phase``, ``during``, ``error``, ``failures``,
and ``traceback`` on the first failure)."""


class HookFailures:
    """Counts and reports hook failures: the one place that decides what a failure does.

    Call it as ``failures(hook, error, during)``. Every failure is counted under the hook's name
    (``counts``; two hooks of one name become ``name`` and ``name#2``). The 1st, 2nd, 4th, 8th...
    failure of a hook is reported: to ``report`` (a ``hook_error`` record's fields; the first with the
    traceback) and as a ``HookFailureWarning``. With ``strict=True`` the failure is raised as
    ``HookError`` instead of warned. ``redact`` (a text-to-text function) is applied to the error and
    traceback text before either leaves. Thread-safe.
    """

    def __init__(
        self,
        report: Report | None = None,
        *,
        strict: bool = False,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self._report = report
        self._strict = strict
        self._redact = redact or (lambda text: text)
        self._counts: dict[str, int] = {}
        self._names: dict[int, tuple[object, str]] = {}
        self._lock = threading.Lock()

    @property
    def counts(self) -> Mapping[str, int]:
        """Failures per hook name; a live, read-only view."""
        return MappingProxyType(self._counts)

    def __call__(self, hook: object, error: Exception, during: str) -> None:
        with self._lock:
            name = self._name_of(hook)
            failures = self._counts[name] = self._counts.get(name, 0) + 1
        text = self._redact(f"{type(error).__name__}: {safe_str(error)}")
        if failures & (failures - 1) == 0:  # the 1st, 2nd, 4th, 8th...
            fields: dict[str, Any] = {
                "hook": name,
                "phase": "close" if during == "close" else "on_event",
                "during": during,
                "error": text,
                "failures": failures,
            }
            if failures == 1:
                fields["traceback"] = self._redact(_format_traceback(error))
            if self._report is not None:
                self._report(fields)
            if not self._strict:
                warn_at_caller(
                    f"speedtronic hook {name!r} failed ({failures} so far) during {during!r}: {text}",
                    HookFailureWarning,
                )
        if self._strict:
            raise HookError(f"hook {name!r} failed during {during!r}: {text}") from error

    def _name_of(self, hook: object) -> str:
        known = self._names.get(id(hook))
        if known is not None and known[0] is hook:
            return known[1]
        base = hook_name(hook)
        taken = {name for _, name in self._names.values()}
        name = next(
            n for n in (base if i == 1 else f"{base}#{i}" for i in itertools.count(1)) if n not in taken
        )
        self._names[id(hook)] = (hook, name)
        return name


def _format_traceback(error: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(type(error), error, error.__traceback__))
    except Exception:
        return f"<traceback of {type(error).__qualname__} could not be formatted>"


class DispatchHooks:
    """Calls each hook with ``(event, payload)``, isolating their failures; never changes the event dict.

    A hook whose callable accepts a keyword ``level`` gets ``level=`` the chain's method name, the
    record's level (``"debug"`` ... ``"critical"``).

    Each hook gets a payload of its own (the event dict less ``"event"``, a fresh shallow copy), so one
    hook's mutation can't reach another hook or a later stage. ``hooks`` may be any sequence; a list the
    caller keeps changing (``MetricLogger.hooks``) is read at each event, so a hook added later gets the
    events after it. Each hook is checked when this stage is created; a list changed later is checked
    by its owner (``speedtronic.hooks.HookList``).

    A hook's ``Exception`` goes to ``on_error(hook, error, event)`` (default: a ``HookFailures`` of this
    stage's own, whose counts are ``errors``) and the remaining hooks still run. ``BaseException``
    propagates.

    ``consume=True`` (the default) makes this a final stage: after the hooks it raises
    ``structlog.DropEvent``, as ``structlog.testing.LogCapture`` does, so put it last. With
    ``consume=False`` it returns the event dict unchanged, to sit mid-chain (say, before your own
    renderer).
    """

    __slots__ = ("_consume", "_hooks", "_levelled", "_on_error", "errors")

    def __init__(
        self,
        hooks: Iterable[Any],
        *,
        on_error: Callable[[object, Exception, str], None] | None = None,
        consume: bool = True,
    ) -> None:
        self._hooks = hooks if isinstance(hooks, list) else list(hooks)
        for hook in self._hooks:
            as_callback(hook)
        failures = HookFailures()
        self.errors: Mapping[str, int] = failures.counts
        """Failures per hook name, when ``on_error`` is the default."""
        self._on_error = on_error if on_error is not None else failures
        self._consume = consume
        self._levelled: dict[int, tuple[object, bool]] = {}  # id(hook) -> (hook, takes_level)

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        event = event_dict.get("event")
        event = event if type(event) is str else safe_str(event)
        for hook in tuple(self._hooks):
            payload = {key: value for key, value in event_dict.items() if key != "event"}
            known = self._levelled.get(id(hook))
            if known is None or known[0] is not hook:
                known = self._levelled[id(hook)] = (hook, takes_level(target_of(hook)))
            try:
                if known[1]:
                    target_of(hook)(event, payload, level=method_name)
                else:
                    target_of(hook)(event, payload)
            except Exception as error:
                self._on_error(hook, error, event)
        if self._consume:
            raise structlog.DropEvent
        return event_dict
