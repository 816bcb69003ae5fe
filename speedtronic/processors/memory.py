"""Accelerator memory probes, chosen once per device.

torch is never imported here: if the process has not imported it, no accelerator is in use.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = [
    "AllocatorProbe",
    "MemoryProbe",
    "memory_usage_bytes",
    "no_reading",
    "resolve_allocator_probe",
    "resolve_probe",
]

MemoryProbe = Callable[[], "int | None"]
AllocatorProbe = Callable[[], "tuple[int, int]"]
"""Reads the CUDA caching allocator's ``(num_alloc_retries, num_ooms)``."""


def no_reading() -> int | None:
    """The probe where there is nothing to read: no accelerator, or torch never imported."""
    return None


def memory_usage_bytes(device: Any = None) -> int | None:
    """Bytes allocated on ``device`` (default: the accelerator in use), or ``None`` without one.

    CUDA: ``torch.cuda.memory_allocated(device)``; MPS: ``torch.mps.current_allocated_memory()``.
    Never imports torch: if it has not been imported, no accelerator is in use.
    """
    return resolve_probe(device)()


def resolve_probe(device: Any = None) -> MemoryProbe:
    """Return a zero-argument callable reading allocated bytes on ``device``, or ``None``.

    ``device`` is anything ``torch.device`` accepts (``"cuda:1"``, ``1``, a ``torch.device``) or
    ``None`` for the accelerator in use: CUDA when it is initialised (the current device, fixed now so
    that a later call from another thread still reads the same card), else MPS when it holds memory.
    A CPU device, a CPU build of torch, or torch not imported gives a probe that returns ``None``.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return no_reading
    if device is None:
        return _default_probe(torch)
    target = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    if target.type == "cuda" and torch.cuda.is_available():
        index = target.index if target.index is not None else torch.cuda.current_device()
        return _cuda_probe(torch, index)
    if target.type == "mps" and _mps_available(torch):
        return _mps_probe(torch)
    return no_reading


def _default_probe(torch: Any) -> MemoryProbe:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return _cuda_probe(torch, torch.cuda.current_device())
    if _mps_available(torch) and torch.mps.current_allocated_memory() > 0:
        return _mps_probe(torch)
    return no_reading


def _mps_available(torch: Any) -> bool:
    mps = getattr(getattr(torch, "backends", None), "mps", None)
    return bool(mps is not None and mps.is_available())


def _cuda_probe(torch: Any, index: int) -> MemoryProbe:
    memory_allocated = torch.cuda.memory_allocated

    def cuda_memory() -> int | None:
        return int(memory_allocated(index))

    return cuda_memory


def _mps_probe(torch: Any) -> MemoryProbe:
    current_allocated_memory = torch.mps.current_allocated_memory

    def mps_memory() -> int | None:
        return int(current_allocated_memory())

    return mps_memory


def resolve_allocator_probe(device: Any = None) -> AllocatorProbe | None:
    """A zero-argument callable reading the CUDA caching allocator's retries and out-of-memory count
    on ``device`` (as ``resolve_probe`` picks it), or ``None`` off CUDA. It reads
    ``torch.cuda.memory_stats``: host-side counters, no device sync."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    if device is None:
        if not torch.cuda.is_initialized():
            return None
        index = torch.cuda.current_device()
    else:
        target = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
        if target.type != "cuda":
            return None
        index = target.index if target.index is not None else torch.cuda.current_device()
    memory_stats = torch.cuda.memory_stats

    def allocator_counts() -> tuple[int, int]:
        stats = memory_stats(index)
        return int(stats.get("num_alloc_retries", 0)), int(stats.get("num_ooms", 0))

    return allocator_counts
