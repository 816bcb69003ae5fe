"""Helpers for testing hooks and processors, and for asserting what a ``MetricLogger`` delivered.

Everything here works on one object you pass in: there is no global state, so tests can run in
parallel. The pytest plugin (``speedtronic.pytest_plugin``, installed with the package) wraps these
in fixtures.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from structlog.typing import Processor, WrappedLogger

from speedtronic.profiling import MetricLogger

__all__ = [
    "RecordingHook",
    "WandbOfflineRun",
    "capture_events",
    "read_wandb_run",
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


@dataclass
class WandbOfflineRun:
    """What an offline W&B run recorded, read back from its ``.wandb`` transaction log."""

    history: list[dict[str, Any]] = field(default_factory=list)
    """Each ``run.log`` row in order, with W&B's ``_step``; nested keys joined with ``/``."""
    step_metrics: dict[str, str] = field(default_factory=dict)
    """``define_metric`` calls: metric name or glob -> its x-axis (``""`` when it has none)."""
    exit_code: int | None = None
    """The exit code the run was finished with; ``None`` while it was never finished."""
    config: dict[str, Any] = field(default_factory=dict)
    """The run's config (``run.config``), its updates applied in order."""
    summary: dict[str, Any] = field(default_factory=dict)
    """The run's summary: each key's last value (nested keys joined with ``/``), W&B's own included."""


_WANDB_HEADER = struct.Struct("<4sHB")  # b":W&B", magic 0xBEE1, version 0
_RECORD_HEADER = struct.Struct("<IHB")  # crc32 of type+data, length, type (LevelDB log format)
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def read_wandb_run(path: str | os.PathLike[str], *, wait_s: float = 30.0) -> WandbOfflineRun:
    """Read an offline run (its ``offline-run-*`` directory or its ``.wandb`` file) back.

    W&B has no public reader for offline runs; this one decodes the transaction log (LevelDB log
    blocks of ``wandb_internal_pb2.Record``), so tests can assert what reached the run without
    patching the SDK. Needs wandb (for the protobuf classes).

    W&B's service process writes the log asynchronously, so right after ``run.finish()`` (or
    ``WandbHook.close()``) it may still be incomplete on a busy machine: this waits up to ``wait_s``
    seconds for the run's exit record, then returns what is there.
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            run = _read_wandb_run(Path(path))
        except ValueError:
            if time.monotonic() >= deadline:
                raise
        else:
            if run.exit_code is not None or time.monotonic() >= deadline:
                return run
        time.sleep(0.05)


def _read_wandb_run(location: Path) -> WandbOfflineRun:
    try:
        from wandb.proto import wandb_internal_pb2
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "speedtronic.testing.read_wandb_run requires wandb: pip install 'speedtronic[wandb]'",
            name="wandb",
        ) from error
    if location.is_dir():
        files = sorted(location.glob("*.wandb"))
        if len(files) != 1:
            raise ValueError(f"read_wandb_run: expected one .wandb file in {location}, found {len(files)}")
        location = files[0]
    run = WandbOfflineRun()
    for data in _wandb_records(location.read_bytes(), location):
        record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]  # protobuf makes it at runtime
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = record.history.item
            run.history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items})
        elif kind == "config":
            run.config.update({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                               for item in record.config.update})
        elif kind == "summary":
            run.summary.update({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                for item in record.summary.update})
        elif kind == "metric":
            run.step_metrics[record.metric.name or record.metric.glob_name] = record.metric.step_metric
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    return run


def _wandb_records(data: bytes, path: Path) -> Iterator[bytes]:
    ident, magic, _version = _WANDB_HEADER.unpack_from(data)
    if ident != b":W&B" or magic != 0xBEE1:
        raise ValueError(f"read_wandb_run: {path} is not a W&B transaction log")
    position, pending = _WANDB_HEADER.size, b""
    while position + _RECORD_HEADER.size <= len(data):
        if _BLOCK - position % _BLOCK < _RECORD_HEADER.size:  # a block's tail too short for a header
            position += _BLOCK - position % _BLOCK
            continue
        checksum, length, kind = _RECORD_HEADER.unpack_from(data, position)
        start = position + _RECORD_HEADER.size
        chunk = data[start : start + length]
        if kind == 0 or len(chunk) < length or zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != checksum:
            return  # zero padding, or a torn tail of a run that is still writing
        position = start + length
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            yield pending + chunk
