"""Stages that add what the producer can't know: ``elapsed_s``, ``memory_bytes``, ``rank``, and the
record's one ``timestamp``."""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

from structlog.typing import EventDict, WrappedLogger

from speedtronic.errors import LoggingFailureWarning, capped, warn_at_caller
from speedtronic.processors.memory import (
    AllocatorProbe,
    MemoryProbe,
    no_reading,
    resolve_allocator_probe,
    resolve_probe,
)
from speedtronic.record import iso_timestamp, second_text, split_time, timestamp_ns, timestamp_text

__all__ = ["AddElapsed", "AddMemory", "AddRank", "AddTimestamp", "iso_timestamp", "timestamp_ns"]
# iso_timestamp and timestamp_ns are the record contract's (speedtronic.record), named here too for
# the stage that writes the one and the hooks that read the other.


class AddTimestamp:
    """Adds ``timestamp``: the record's one reading of the wall clock, in UTC (``iso_timestamp``).

    Both renderers use it, so the text line and the JSONL record name the same instant. An event
    dict that has a ``timestamp`` already (structlog's ``TimeStamper`` earlier in your chain) keeps it.
    ``clock`` (seconds since the epoch) is for tests that need a fixed time. The date and time to the
    second are formatted once per second (events of one second share them), the microseconds per
    event: that is most of what a timestamp costs.
    """

    __slots__ = ("_clock", "_second")

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._second: tuple[int, str] = (0, second_text(0))  # the last second formatted, and its text

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        if "timestamp" not in event_dict:
            whole, micros = split_time(self._clock())
            second = self._second  # one read: another thread may replace it, never half of it
            if second[0] != whole:
                second = self._second = (whole, second_text(whole))
            event_dict["timestamp"] = timestamp_text(second[1], micros)
        return event_dict


class AddElapsed:
    """Adds ``elapsed_s``: seconds on a monotonic clock since this processor was created, to the µs.

    A payload that carries its own ``elapsed_s`` keeps it.
    """

    __slots__ = ("_clock", "_start")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._start = clock()

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        if "elapsed_s" not in event_dict:
            event_dict["elapsed_s"] = round(self._clock() - self._start, 6)
        return event_dict


class AddRank:
    """Adds ``rank`` and ``world_size`` (when absent), so records of a multi-process job say whose."""

    __slots__ = ("_rank", "_world_size")

    def __init__(self, rank: int, world_size: int) -> None:
        self._rank, self._world_size = rank, world_size

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        event_dict.setdefault("rank", self._rank)
        event_dict.setdefault("world_size", self._world_size)
        return event_dict


class AddMemory:
    """Adds ``memory_bytes`` allocated on the accelerator, when one is in use.

    The probe is chosen once: here when torch is already imported (an explicit ``device`` that torch
    refuses raises now, not at step 10,000), else at the first event (by then the trainer has imported
    torch and placed its model). CUDA reads ``torch.cuda.memory_allocated(device)`` (no device sync),
    MPS ``torch.mps.current_allocated_memory()``. With no accelerator, or torch never imported, the key
    is not added: a CPU build's ``memory_allocated()`` of 0 is not a reading. A device refused at the
    first event is warned about once (``LoggingFailureWarning``) and reports nothing.

    ``allocator=True`` (a logger whose alert rules read them: ``speedtronic.alerts.Memory``) also adds,
    on CUDA, the caching allocator's ``alloc_retries`` and ``ooms`` (``torch.cuda.memory_stats``:
    host-side counters, no device sync).
    """

    __slots__ = ("_allocator", "_counts", "_device", "_probe")

    def __init__(self, device: Any = None, *, allocator: bool = False) -> None:
        self._device = device
        self._allocator = allocator
        self._probe: MemoryProbe | None = None  # chosen at the first event
        self._counts: AllocatorProbe | None = None
        if (device is not None and "torch" in sys.modules) or (device is None and _cuda_initialised()):
            self._probe = resolve_probe(device)  # now, on the creating thread: its current device
            self._counts = resolve_allocator_probe(device) if allocator else None

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        probe = self._probe
        if probe is None:
            probe = self._probe = self._first_probe()
            if self._allocator and probe is not no_reading:
                self._counts = resolve_allocator_probe(self._device)
        if probe is not no_reading and "memory_bytes" not in event_dict:
            try:
                reading = probe()
            except Exception as error:  # a device in trouble (a device-side assert): no reading, once
                self._probe = no_reading
                warn_at_caller(
                    f"AddMemory: reading memory failed ({type(error).__name__}: {error}); "
                    "memory_bytes is no longer reported",
                    LoggingFailureWarning,
                )
                return event_dict
            if reading is not None:
                event_dict["memory_bytes"] = reading
            if self._counts is not None and "alloc_retries" not in event_dict:
                event_dict["alloc_retries"], event_dict["ooms"] = self._counts()
        return event_dict

    def _first_probe(self) -> MemoryProbe:
        try:
            return resolve_probe(self._device)
        except Exception as error:
            warnings.warn(
                capped(
                    f"AddMemory(device={self._device!r}): {type(error).__name__}: {error}; "
                    "memory_bytes is not reported"
                ),
                LoggingFailureWarning,
                stacklevel=2,
            )
            return no_reading


def _cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized())
