"""The hook contract and its dispatch: ``DispatchHooks``, the chain's final stage."""

from __future__ import annotations

import inspect
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, cast

import structlog
from structlog.typing import EventDict, WrappedLogger

from speedtronic.errors import MAX_WARNING_BYTES, HookError, HookFailureWarning, reported, warn_at_caller
from speedtronic.record import NOTE_KEY, free_name, is_own_record
from speedtronic.record.safe_text import safe_str
from speedtronic.record.secrets import ExceptionText, redact_exception

__all__ = [
    "KEPT_TAIL",
    "REDACT_MARGIN",
    "Callback",
    "DispatchHooks",
    "HookFailures",
    "OnError",
    "as_callback",
    "close_hook",
    "flush_hook",
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
    if isinstance(hook, str):
        raise TypeError(
            f"hook {hook!r} is a name, not a hook: build it with "
            f"speedtronic.hooks.build_hook({hook!r}, ...), or pass a hook object"
        )
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
    """Whether a hook's callable declares a parameter ``level`` that can be passed by keyword."""
    try:
        parameters = inspect.signature(target, follow_wrapped=False).parameters
    except (TypeError, ValueError):
        parameters = MappingProxyType({})
    level = parameters.get("level")
    return level is not None and level.kind in _BY_KEYWORD


_BY_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def close_hook(hook: object) -> None:
    """Call ``hook.close()`` when the hook has one."""
    close = getattr(hook, "close", None)
    if callable(close):
        close()


def flush_hook(hook: object, timeout: float | None = None) -> bool:
    """Call ``hook.flush(timeout)`` when the hook has one, so what it took so far is on disk (or
    sent); ``False`` when it ran past ``timeout`` (it raised ``TimeoutError``, or returned
    ``False``). Other errors are the caller's to report."""
    flush = getattr(hook, "flush", None)
    if not callable(flush):
        return True
    try:
        return flush(timeout) is not False
    except TimeoutError:
        return False


OnError = Callable[[object, Exception, "str | None"], None]
"""Receives a hook's failure: ``(hook, error, during)``, ``during`` the event whose delivery failed, or
``None`` for the hook's ``close()`` (``HookFailures``, a logger's ``FailurePolicy.hook_failed``)."""

Report = Callable[[dict[str, Any]], None]
"""Receives a ``hook_error`` record's fields (``hook``, ``phase``, ``during``, ``error``, ``failures``,
and ``traceback`` on the first failure)."""


class HookFailures:
    """Counts and reports hook failures: the one place that decides what a failure does.

    Call it as ``failures(hook, error, during)``: ``during`` is the event whose delivery failed, or
    ``None`` for a failure of the hook's ``close()`` (phase ``close``; an event may be named anything,
    ``"close"`` included, so the phase is never read from a name). Every failure is counted under the
    hook's name (``counts``; two hooks of one name become ``name`` and ``name#2``). The 1st, 2nd, 4th, 8th...
    failure of a hook is reported: to ``report`` (a ``hook_error`` record's fields; the first with the
    traceback) and as a ``HookFailureWarning``. With ``strict=True`` the failure is raised as
    ``HookError`` instead of warned. With ``redact`` (a text-to-text function, ``redact_text``), the
    exception is redacted as a whole before any of it leaves (``redact_exception``: its message, its
    ``args``, notes, causes and contexts and its printed traceback), its texts cut by ``_hidden``.
    Thread-safe.
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
        self._redact = redact
        self._counts: dict[str, int] = {}
        self._names: dict[int, tuple[object, str]] = {}
        self._lock = threading.RLock()  # re-entered by a signal handler's emit on this thread

    @property
    def counts(self) -> Mapping[str, int]:
        """Failures per hook name; a live, read-only view."""
        return MappingProxyType(self._counts)

    def __call__(self, hook: object, error: Exception, during: str | None) -> None:
        with self._lock:
            name = self._name_of(hook)
            failures = self._counts[name] = self._counts.get(name, 0) + 1
        if not reported(failures) and not self._strict:
            return  # counted only: no text built or redacted (a 10 MB message would take seconds)
        shown = redact_exception(error, text=self._hidden) if self._redact is not None else None
        text = shown.line if shown is not None else self._hidden(f"{type(error).__name__}: {safe_str(error)}")
        if reported(failures):
            fields: dict[str, Any] = {
                "hook": name,
                "phase": "close" if during is None else "on_event",
                "during": "close" if during is None else during,
                "error": text,
                "failures": failures,
            }
            if failures == 1:
                fields["traceback"] = (
                    shown.printed if shown is not None else self._hidden(_format_traceback(error))
                )
            if self._report is not None:
                self._report(fields)
            if not self._strict:
                warn_at_caller(
                    f"speedtronic hook {name!r} failed ({failures} so far) {_when(during)}: {text}",
                    HookFailureWarning,
                )
        if self._strict:
            self._raise(name, error, during, text, shown)

    def _raise(
        self, name: str, error: Exception, during: str | None, text: str, shown: ExceptionText | None
    ) -> None:
        """Raise ``HookError`` for a strict logger, from ``error`` only when nothing in its whole
        (``redact_exception``: message, notes, causes, contexts, printed traceback) needed hiding: a
        chained exception prints its own message (and its causes') again, unredacted. Otherwise its
        redacted traceback is the ``HookError``'s message's end."""
        message = f"hook {name!r} failed {_when(during)}: {text}"
        if shown is None or not shown.hidden:
            raise HookError(message) from error
        raise HookError(f"{message}\n{shown.printed}") from None  # the chained error would print the secret

    def _hidden(self, text: str) -> str:
        """``text`` redacted, and cut to what a warning or a record keeps first: its start and end.
        A long text is redacted in two windows, each ``2 * REDACT_MARGIN`` characters wider than what is
        kept of it; of each, at least the ``REDACT_MARGIN`` characters at its cut edge are dropped after
        redaction, so a secret crossing that edge (one shorter than the margin: every credential
        ``redact_text`` knows) is redacted whole or not kept at all. So a 10 MB message costs what
        a 50 kB one does."""
        if len(text) <= MAX_WARNING_BYTES + KEPT_TAIL + 4 * REDACT_MARGIN:
            return self._redact(text) if self._redact is not None else text
        head, tail = text[: MAX_WARNING_BYTES + 2 * REDACT_MARGIN], text[-(KEPT_TAIL + 2 * REDACT_MARGIN) :]
        if self._redact is not None:
            head, tail = self._redact(head), self._redact(tail)
        head = head[: min(MAX_WARNING_BYTES, len(head) - REDACT_MARGIN)]
        tail = tail[max(len(tail) - KEPT_TAIL, REDACT_MARGIN) :]
        return f"{head} <truncated: {len(text) - MAX_WARNING_BYTES - KEPT_TAIL:,} chars> {tail}"

    def _name_of(self, hook: object) -> str:
        known = self._names.get(id(hook))
        if known is not None and known[0] is hook:
            return known[1]
        base = hook_name(hook)
        name = free_name({name for _, name in self._names.values()}, base)
        self._names[id(hook)] = (hook, name)
        return name


REDACT_MARGIN = 4096
"""Characters redacted past each cut of a long failure text, then dropped (``HookFailures``)."""
KEPT_TAIL = 200
"""Characters kept from a long failure text's end (``HookFailures``)."""


def _when(during: str | None) -> str:
    return "during 'close'" if during is None else f"during {during!r}"


def _format_traceback(error: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(type(error), error, error.__traceback__))
    except Exception:
        return f"<traceback of {type(error).__qualname__} could not be formatted>"


class DispatchHooks:
    """Calls each hook with ``(event, payload)``, isolating their failures; never changes the event dict.

    Each hook gets a payload of its own (the event dict less ``"event"``, a fresh shallow copy), so one
    hook's mutation can't reach another hook or a later stage; a hook that declares ``level`` also gets
    the record's level. ``hooks`` may be any sequence; a list the caller keeps changing
    (``MetricLogger.hooks``) is read at each event, so a hook added later gets the events after it.
    How to call each hook is decided once per hook (``as_callback``, ``takes_level``). The logger's
    own records (``is_own_record``) are not delivered: a hook failing on its own failure report would
    report itself.

    A hook's ``Exception`` goes to ``on_error(hook, error, event)`` (default: a ``HookFailures`` of this
    stage's own, whose counts are ``errors``) and the remaining hooks still run. ``BaseException``
    propagates.

    ``consume=True`` (the default) makes this a final stage: after the hooks it raises
    ``structlog.DropEvent``, as ``structlog.testing.LogCapture`` does, so put it last. With
    ``consume=False`` it returns the event dict unchanged, to sit mid-chain (say, before your own
    renderer).
    """

    __slots__ = ("_calls", "_consume", "_hooks", "_on_error", "_stopped", "errors")

    def __init__(
        self,
        hooks: Iterable[Any],
        *,
        on_error: OnError | None = None,
        consume: bool = True,
    ) -> None:
        self._hooks = hooks if isinstance(hooks, list) else list(hooks)
        self._calls: dict[int, tuple[object, Callable[..., Any], bool]] = {}
        for hook in self._hooks:
            self._call_of(hook)
        failures = HookFailures()
        self.errors: Mapping[str, int] = failures.counts
        """Failures per hook name, when ``on_error`` is the default."""
        self._on_error = on_error if on_error is not None else failures
        self._consume = consume
        self._stopped = False

    def stop(self) -> None:
        """Call no hook from now on, also none left in an event being dispatched on another thread
        (the hook running there finishes): ``MetricLogger.close()`` calls it, so no hook is called
        after ``close()`` returns."""
        self._stopped = True

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        self.deliver(method_name, event_dict)
        if self._consume:
            raise structlog.DropEvent
        return event_dict

    def deliver(self, method_name: str, event_dict: EventDict) -> None:
        """Call the hooks with the event, as ``__call__`` does, without ending a chain: for a loop of
        your own that runs the stages (``MetricLogger``'s does), where ``DropEvent`` would only be
        raised to be caught."""
        if not self._hooks or (NOTE_KEY in event_dict and is_own_record(event_dict)):
            return
        event = event_dict.get("event")
        event = event if type(event) is str else safe_str(event)
        noted = NOTE_KEY in event_dict  # the start of the record's note (``event_fields``): not passed on
        calls = self._calls
        for hook in tuple(self._hooks):
            if self._stopped:
                break
            payload = dict(event_dict)  # each hook its own copy, without the event's name
            payload.pop("event", None)
            if noted:
                del payload[NOTE_KEY]
            known = calls.get(id(hook))
            if known is None or known[0] is not hook:
                known = self._call_of(hook)
            _, target, with_level = known
            try:
                if with_level:
                    target(event, payload, level=method_name)
                else:
                    target(event, payload)
            except Exception as error:
                self._on_error(hook, error, event)

    def _call_of(self, hook: object) -> tuple[object, Callable[..., Any], bool]:
        """The hook, its callable, and whether that takes ``level``: decided once per hook."""
        known = self._calls.get(id(hook))
        if known is not None and known[0] is hook:
            return known
        if len(self._calls) > 4 * len(self._hooks) + 64:  # hooks replaced many times: forget the old
            self._calls.clear()
        target = as_callback(hook)
        known = self._calls[id(hook)] = (hook, target, takes_level(target))
        return known
