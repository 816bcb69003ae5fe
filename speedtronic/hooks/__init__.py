"""The hook protocol: how code outside the logger receives events.

A hook is any object with ``on_event(event, payload)`` (a :class:`TrainingHook`) or any callable with
that signature. Hooks are checked when they are registered, not at step 10,000: a hook that can't be
called as ``(event, payload)`` is refused with a ``TypeError`` naming it. A hook may also have
``close()``, which the logger calls once when it closes.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, SupportsIndex, TypeVar, cast, overload, runtime_checkable

__all__ = [
    "CallbackList",
    "Hook",
    "HookList",
    "TrainingHook",
    "as_callback",
    "close_hook",
    "hook_name",
    "on_event",
    "resolve_targets",
    "target_of",
]

Callback = Callable[[str, dict[str, Any]], None]


@runtime_checkable
class TrainingHook(Protocol):
    """Receives every event the logger delivers; ``payload`` is the hook's own copy."""

    def on_event(self, event: str, payload: dict[str, Any]) -> None: ...


Hook = TrainingHook | Callback
"""What the logger accepts as a hook: a ``TrainingHook`` or a plain ``(event, payload)`` callable."""


def hook_name(hook: object) -> str:
    """A readable name for reports: a function's qualified name, else the hook's class name."""
    name = getattr(hook, "__qualname__", None)
    return name if isinstance(name, str) else type(hook).__qualname__


def target_of(hook: Any) -> Any:
    """What calling ``hook`` means: its ``on_event`` when that is callable, else the hook itself.

    The one rule every caller uses (``HookList.targets``, ``CallbackList``). ``as_callback`` adds the
    signature check, once, when a hook is registered.
    """
    method = getattr(hook, "on_event", None)
    return method if callable(method) else hook


def as_callback(hook: object) -> Callback:
    """Return the ``(event, payload)`` callable for ``hook``, or raise ``TypeError`` naming it."""
    target = target_of(hook)
    if not callable(target):
        raise TypeError(
            f"hook {hook_name(hook)!r} is neither a TrainingHook (an object with "
            "on_event(event, payload)) nor a callable(event, payload)"
        )
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # builtins without a signature: accept, they fail loudly later
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


def close_hook(hook: object) -> None:
    """Call ``hook.close()`` when the hook has one."""
    close = getattr(hook, "close", None)
    if callable(close):
        close()


_changing = threading.RLock()
"""Held while a ``HookList`` changes and rebuilds its ``targets`` (changes are rare; one lock for all)."""


def _new_lock_in_child() -> None:
    global _changing
    _changing = threading.RLock()  # a fork may have copied it held by a thread that is gone


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def resolve_targets(hooks: Iterable[Any]) -> tuple[tuple[Any, Callback], ...]:
    """``(hook, target_of(hook))`` for each hook, in order: what a logger calls per event."""
    return tuple((hook, cast(Callback, target_of(hook))) for hook in hooks)


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _changes(method: _Method) -> _Method:
    """``method`` of a ``HookList``, run under the lock, with ``targets`` rebuilt after it (also
    after a failure part-way: a ``sort`` whose comparison fails may leave the list reordered)."""

    @functools.wraps(method)
    def changed(self: HookList, *args: Any, **kwargs: Any) -> Any:
        with _changing:
            try:
                return method(self, *args, **kwargs)
            finally:
                self.targets = resolve_targets(self)

    return cast(_Method, changed)


class HookList(list[Any]):
    """A list of hooks that checks each hook as it is added (append, insert, extend, assignment).

    ``targets`` is ``(hook, callable)`` for each hook, in order, resolved by ``target_of`` whenever
    the list changes (every list method, under a lock, so two threads changing it at once leave it
    right): what a logger calls per event, without resolving each hook's ``on_event`` again. A hook
    whose ``on_event`` attribute is replaced after it was added keeps being called through the one
    it had, until the list changes.
    """

    targets: tuple[tuple[Any, Callback], ...] = ()

    @_changes
    def __init__(self, hooks: Iterable[Any] = ()) -> None:
        super().__init__(_checked(hooks))

    def __getstate__(self) -> None:
        return None  # ``targets`` is rebuilt from the hooks when a copy or an unpickled list is filled

    @_changes
    def append(self, hook: Any) -> None:
        as_callback(hook)
        super().append(hook)

    @_changes
    def insert(self, index: SupportsIndex, hook: Any) -> None:
        as_callback(hook)
        super().insert(index, hook)

    @_changes
    def extend(self, hooks: Iterable[Any]) -> None:
        super().extend(_checked(hooks))

    def __iadd__(self, hooks: Iterable[Any]) -> HookList:  # type: ignore[misc]  # list's returns Self
        self.extend(hooks)
        return self

    @overload
    def __setitem__(self, index: SupportsIndex, hook: Any) -> None: ...
    @overload
    def __setitem__(self, index: slice, hook: Iterable[Any]) -> None: ...
    @_changes
    def __setitem__(self, index: SupportsIndex | slice, hook: Any) -> None:
        if isinstance(index, slice):
            super().__setitem__(index, _checked(hook))
        else:
            as_callback(hook)
            super().__setitem__(index, hook)

    # The list methods that change it but add no hook: the list's own, under _changes.
    __imul__ = _changes(list.__imul__)
    __delitem__ = _changes(list.__delitem__)
    pop = _changes(list.pop)
    remove = _changes(list.remove)
    clear = _changes(list.clear)
    sort = _changes(list.sort)
    reverse = _changes(list.reverse)


def _checked(hooks: Iterable[Any]) -> list[Any]:
    hooks = list(hooks)
    for hook in hooks:
        as_callback(hook)
    return hooks


class CallbackList:
    """Fans ``on_event`` out to several hooks in order; is itself a ``TrainingHook``.

    Every callback is called even when an earlier one raises; the first failure is re-raised
    afterwards, so the logger that owns this list counts it. ``close()`` closes each callback.
    """

    def __init__(self, callbacks: Iterable[Any] | None = None) -> None:
        self.callbacks = HookList(callbacks or ())

    def append(self, callback: Any) -> None:
        self.callbacks.append(callback)

    def __len__(self) -> int:
        return len(self.callbacks)

    def __iter__(self) -> Any:
        return iter(self.callbacks)

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self._each(lambda cb: target_of(cb)(event, dict(payload)))

    def close(self) -> None:
        self._each(close_hook)

    def _each(self, action: Callable[[Any], None]) -> None:
        first: Exception | None = None
        for callback in list(self.callbacks):
            try:
                action(callback)
            except Exception as exc:
                first = first or exc
        if first is not None:
            raise first


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
