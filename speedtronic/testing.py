"""Helpers for testing hooks and processors, and for asserting what a ``MetricLogger`` delivered."""

from __future__ import annotations

import contextlib
import io
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import structlog
from structlog.typing import Processor, WrappedLogger

from speedtronic.profiling import MetricLogger

__all__ = [
    "RecordingHook",
    "capture_events",
    "run_hook",
    "run_processor",
]


class RecordingHook:
    """A hook that journals every call, so a test can assert the whole sequence (and its order).

    ``calls`` is the journal of ``(event, payload)``; ``events`` the event names; ``closes`` how many
    times ``close()`` was called (a logger must close each hook exactly once).
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.closes = 0
        self._lock = threading.Lock()

    def on_event(self, event: str, payload: Mapping[Any, Any]) -> None:
        with self._lock:
            self.calls.append((event, dict(payload)))

    def close(self) -> None:
        with self._lock:
            self.closes += 1

    @property
    def events(self) -> list[str]:
        """The event names received, in order."""
        return [event for event, _ in self.calls]

    def payloads(self, event: str) -> list[dict[str, Any]]:
        """The payloads received for ``event``, in order."""
        return [payload for name, payload in self.calls if name == event]

    def __repr__(self) -> str:
        return f"<RecordingHook calls={len(self.calls)} closes={self.closes}>"


class _Capture:
    """The hook behind ``capture_events``: appends ``{"event": ..., **payload}`` to a list."""

    __slots__ = ("_events", "_lock")

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self._events = events
        self._lock = threading.Lock()

    def on_event(self, event: str, payload: Mapping[Any, Any]) -> None:
        with self._lock:
            self._events.append({"event": event, **payload})


@contextlib.contextmanager
def capture_events(logger: MetricLogger) -> Iterator[list[dict[str, Any]]]:
    """Collect what ``logger`` delivers to its hooks while the block runs.

    Yields a list that fills with ``{"event": name, **payload}`` dicts: exactly what hooks receive,
    after the cadence, with ``elapsed_s`` (and ``memory_bytes``) added and tensors converted. The
    capturing hook is appended to ``logger.hooks`` and removed on exit; several captures may be
    active on one logger at once. Leaving the block waits for the logger's hook thread
    (``logger.flush()``), so the list is complete afterwards; inside the block, call
    ``logger.flush()`` before reading it, or use a logger with ``background_hooks=False``.
    """
    events: list[dict[str, Any]] = []
    hook = _Capture(events)
    logger.hooks.append(hook)
    try:
        yield events
    finally:
        if not logger.closed:
            logger.flush()
        logger.hooks.remove(hook)  # _Capture compares by identity


def run_hook(
    hook: Any, events: Iterable[tuple[str, Mapping[Any, Any]]], *, every_steps: int = 1
) -> list[dict[str, Any]]:
    """Deliver ``events`` to ``hook`` through a real, silent ``MetricLogger``, then close it.

    The hook sees what it would see in a run (cadence, ``elapsed_s``, converted tensors, then
    ``close()``), and its failures raise ``speedtronic.HookError`` instead of being counted
    (``strict_hooks=True``). Returns the events as delivered, like ``capture_events``.
    """
    with MetricLogger(stream=io.StringIO(), every_steps=every_steps, strict_hooks=True) as logger:
        logger.hooks.append(hook)
        with capture_events(logger) as delivered:
            for event, payload in events:
                logger.emit(event, payload)
    return delivered


def run_processor(
    processor: Processor,
    event_dict: Mapping[str, Any] | None = None,
    *,
    method_name: str = "info",
    logger: WrappedLogger = None,
) -> Any:
    """Call one structlog processor as a chain would, on a copy of ``event_dict``.

    Returns what the processor returns (the event dict of a middle stage, a renderer's ``str`` or
    ``bytes``), or ``None`` when it drops the event (``structlog.DropEvent``).
    """
    try:
        return processor(logger, method_name, dict(event_dict or {}))
    except structlog.DropEvent:
        return None
