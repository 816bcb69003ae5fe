"""The hook protocol: how code outside the logger receives events.

``dispatch`` (the contract and ``DispatchHooks``, the chain's final stage), ``background`` (hooks on a
worker thread), ``registry`` (hook types by name, from entry points)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, SupportsIndex, overload, runtime_checkable

from speedtronic.hooks.background import BackgroundHooks, background
from speedtronic.hooks.dispatch import (
    Callback,
    DispatchHooks,
    HookFailures,
    OnError,
    as_callback,
    close_hook,
    hook_name,
    target_of,
)
from speedtronic.hooks.registry import ENTRY_POINT_GROUP, HookConfigError, build_hook, hook_type, hook_types

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackgroundHooks",
    "CallbackList",
    "DispatchHooks",
    "Hook",
    "HookConfigError",
    "HookFailures",
    "HookList",
    "OnError",
    "TrainingHook",
    "as_callback",
    "background",
    "build_hook",
    "close_hook",
    "hook_name",
    "hook_type",
    "hook_types",
    "on_event",
    "target_of",
]


@runtime_checkable
class TrainingHook(Protocol):
    """Receives every event the logger delivers; ``payload`` is the hook's own copy."""

    def on_event(self, event: str, payload: dict[str, Any]) -> None: ...


Hook = TrainingHook | Callback
"""What the logger accepts as a hook: a ``TrainingHook`` or a plain ``(event, payload)`` callable."""


class HookList(list[Any]):
    """A list of hooks that checks each hook as it is added (append, insert, extend, ``+=``, assignment).

    A hook that can't be called as ``(event, payload)`` is refused with a ``TypeError`` naming it, so
    the mistake shows where the hook is registered. ``MetricLogger.hooks`` is one: the logger reads it
    at each event, so a hook added or removed takes effect from the next event.

    ``on_error`` (the logger's ``FailurePolicy.hook_failed``) receives the failures of the hooks a
    ``BackgroundHooks`` added here (``background(hook)``) runs on its worker, unless it was given an
    ``on_error`` of its own: a hook's failure is counted by its logger wherever the hook runs.
    """

    def __init__(self, hooks: Iterable[Any] = (), *, on_error: OnError | None = None) -> None:
        self._on_error = on_error
        super().__init__(self._checked(hooks))

    def append(self, hook: Any) -> None:
        super().append(self._check(hook))

    def insert(self, index: SupportsIndex, hook: Any) -> None:
        super().insert(index, self._check(hook))

    def extend(self, hooks: Iterable[Any]) -> None:
        super().extend(self._checked(hooks))

    def __iadd__(self, hooks: Iterable[Any]) -> HookList:  # type: ignore[misc]  # list's returns Self
        self.extend(hooks)
        return self

    @overload
    def __setitem__(self, index: SupportsIndex, hook: Any) -> None: ...
    @overload
    def __setitem__(self, index: slice, hook: Iterable[Any]) -> None: ...
    def __setitem__(self, index: SupportsIndex | slice, hook: Any) -> None:
        if isinstance(index, slice):
            super().__setitem__(index, self._checked(hook))
        else:
            super().__setitem__(index, self._check(hook))

    def _check(self, hook: Any) -> Any:
        as_callback(hook)
        if self._on_error is not None and isinstance(hook, BackgroundHooks):
            hook.report_to(self._on_error)
        return hook

    def _checked(self, hooks: Iterable[Any]) -> list[Any]:
        return [self._check(hook) for hook in _checked(hooks)]


def _checked(hooks: Iterable[Any]) -> list[Any]:
    hooks = list(hooks)
    for hook in hooks:
        as_callback(hook)
    return hooks


class CallbackList:
    """Fans ``on_event`` out to several hooks in order; is itself a ``TrainingHook``.

    Every callback is called (through ``DispatchHooks``, so each gets its own payload, and its
    ``level`` if it takes one) even when an earlier one raises; the first failure is re-raised
    afterwards, so the logger that owns this list counts it. ``close()`` closes each callback.
    """

    def __init__(self, callbacks: Iterable[Any] | None = None) -> None:
        self.callbacks = HookList(callbacks or ())
        self._failed: list[Exception] = []
        self._dispatch = DispatchHooks(self.callbacks, on_error=self._fail, consume=False)

    def append(self, callback: Any) -> None:
        self.callbacks.append(callback)

    def __len__(self) -> int:
        return len(self.callbacks)

    def __iter__(self) -> Any:
        return iter(self.callbacks)

    def on_event(self, event: str, payload: dict[str, Any], *, level: str = "info") -> None:
        self._dispatch(None, level, {**payload, "event": event})
        self._raise_first()

    def close(self) -> None:
        for callback in list(self.callbacks):
            try:
                close_hook(callback)
            except Exception as error:
                self._fail(callback, error, None)
        self._raise_first()

    def _fail(self, callback: object, error: Exception, during: str | None) -> None:
        self._failed.append(error)

    def _raise_first(self) -> None:
        failed, self._failed = self._failed, []
        if failed:
            raise failed[0]


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def on_event(callback: Callable[..., Any]) -> Callback:
    """Adapt a function with another signature to ``(event, payload)``; usable as a decorator.

    How to call it is decided once, here, from its signature:

    - ``f(event, payload)`` (two positional parameters, or ``*args``): called as is;
    - ``f(payload)`` (one positional parameter): called with the payload only;
    - ``f()``: called with nothing;
    - keyword style, ``f(event, *, step, loss, **rest)`` or ``f(*, step, loss)``: payload keys become
      keyword arguments (only the ones it names, unless it has ``**rest``); an event whose payload lacks
      a required keyword is not passed to it, so such a function subscribes to events of that shape.
    """
    params = list(inspect.signature(callback).parameters.values())
    every_positional = [p for p in params if p.kind in _POSITIONAL]  # f(event, payload=None) is two
    positional = [p for p in every_positional if p.default is p.empty]
    keyword_only = [p for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    var_positional = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    var_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)

    if keyword_only or var_keyword:
        wrapper = _keyword_style(callback, positional, keyword_only, var_keyword)
    elif len(every_positional) >= 2 or var_positional:

        def wrapper(event: str, payload: dict[str, Any]) -> None:
            callback(event, payload)
    elif len(every_positional) == 1:

        def wrapper(event: str, payload: dict[str, Any]) -> None:
            callback(payload)
    else:

        def wrapper(event: str, payload: dict[str, Any]) -> None:
            callback()

    return functools.wraps(callback)(wrapper)


def _keyword_style(
    callback: Callable[..., Any],
    positional: list[inspect.Parameter],
    keyword_only: list[inspect.Parameter],
    var_keyword: bool,
) -> Callback:
    if len(positional) > 1:
        raise TypeError(
            f"on_event({hook_name(callback)!r}): keyword style takes at most one positional "
            f"parameter (the event), got {[p.name for p in positional]}"
        )
    passes_event = bool(positional)
    reserved = {p.name for p in positional}
    required = frozenset(p.name for p in keyword_only if p.default is p.empty)
    accepted = None if var_keyword else frozenset(p.name for p in keyword_only)

    def keywords(payload: Mapping[Any, Any]) -> dict[str, Any]:
        return {
            key: value
            for key, value in payload.items()
            if type(key) is str and key not in reserved and (accepted is None or key in accepted)
        }

    def wrapper(event: str, payload: dict[str, Any]) -> None:
        if not required <= payload.keys():
            return
        if passes_event:
            callback(event, **keywords(payload))
        else:
            callback(**keywords(payload))

    return wrapper
