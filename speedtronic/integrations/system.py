"""``SystemMonitor``: the process and the machine (CPU, memory, GPUs) sampled on a thread of its own,
as ``system`` events."""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
from collections.abc import Callable
from typing import Any, Protocol

from speedtronic.checks import check_seconds
from speedtronic.errors import LoggerClosedError, SpeedtronicWarning, warn_at_caller
from speedtronic.events import Event
from speedtronic.extras import require
from speedtronic.integrations.structlog import exception_text

__all__ = ["CLOSE_TIMEOUT_S", "DEFAULT_INTERVAL_S", "SystemMonitor", "gpu_probes", "visible_gpus"]

DEFAULT_INTERVAL_S = 10.0
"""Seconds between two samples, by default (W&B samples every 10 s too)."""

CLOSE_TIMEOUT_S = 10.0
"""Longest ``SystemMonitor.close()`` waits, by default, for a sample being taken (a hung NVML call)."""

_NEEDED_BY = "speedtronic.integrations.system.SystemMonitor"

Probe = Callable[[], "dict[str, float | int]"]


class _Emits(Protocol):
    def emit(self, event: str, payload: dict[str, Any], *, level: str | None = None) -> bool: ...


class SystemMonitor:
    """Emits a ``system`` event into ``logger`` every ``interval_s`` seconds, from a thread of its own.

    ``start()`` starts the thread (the first sample comes one interval later, when the CPU share has
    an interval to be measured over); ``close()`` stops it and waits for it, at most
    ``CLOSE_TIMEOUT_S`` by default; usable as a context manager. ``sample()`` takes one sample on the
    caller's thread. The thread stops by itself when the logger is closed. ``MetricLogger`` runs
    none by default; ``speedtronic train`` runs one while it trains (``logging.system_interval_s``,
    default 10; ``null``: none).

    Args:
        logger: where the events go (a ``MetricLogger``, or anything with ``emit(event, payload)``).
        interval_s: seconds between two samples.
        gpus: sample the visible NVIDIA GPUs (``False``: the process and the host only).
    """

    def __init__(self, logger: _Emits, interval_s: float = DEFAULT_INTERVAL_S, *, gpus: bool = True) -> None:
        check_seconds("SystemMonitor: interval_s", interval_s)
        psutil = require("psutil", "system", needed_by=_NEEDED_BY)
        self.logger = logger
        self.interval_s = float(interval_s)
        self._new_process = psutil.Process
        self._process = self._new_process()
        self._process.cpu_percent(None)  # the first call starts the interval the next one measures
        self._memory = psutil.virtual_memory
        self._gpus = gpu_probes() if gpus else []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self.failures = 0
        """Samples that could not be taken or emitted (a GPU fallen off the bus, a strict hook's error)."""

    def sample(self) -> dict[str, float | int]:
        """One ``system`` payload: the process's CPU share since the last sample and its RSS, the
        host's memory, then each GPU's keys. In a forked child, the child's own (its first CPU share
        is 0: its interval starts at that sample)."""
        if self._process.pid != os.getpid():  # forked: psutil.Process() keeps the pid it was made with
            self._process = self._new_process()
            self._process.cpu_percent(None)
        with self._process.oneshot():
            payload: dict[str, float | int] = {
                "cpu_percent": float(self._process.cpu_percent(None)),
                "rss_bytes": int(self._process.memory_info().rss),
            }
        memory = self._memory()
        payload["host_memory_used_bytes"] = int(memory.total - memory.available)
        payload["host_memory_total_bytes"] = int(memory.total)
        for probe in self._gpus:
            payload.update(probe())
        return payload

    def start(self) -> None:
        """Start sampling (idempotent)."""
        if self._thread is None or not self._thread.is_alive() or os.getpid() != self._pid:
            self._stop.clear()
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._run, name="speedtronic-system", daemon=True)
            self._thread.start()

    def close(self, timeout: float | None = CLOSE_TIMEOUT_S) -> None:
        """Stop sampling and wait at most ``timeout`` seconds (``None``: as long as it takes) for a
        sample being taken or emitted; idempotent. A sample still running then (a GPU query that
        hangs) is left to the daemon thread, which ends once it returns, with a warning."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread() and os.getpid() == self._pid:
            thread.join(timeout)
            if thread.is_alive():
                warn_at_caller(
                    f"speedtronic: SystemMonitor.close: a system sample was still running after "
                    f"{timeout:g} s (a GPU query that hangs?); left to its daemon thread",
                    SpeedtronicWarning,
                )

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.logger.emit(Event.SYSTEM, self.sample(), level="debug")
            except LoggerClosedError:
                return
            except Exception as error:  # a failing probe or hook costs its sample, never training
                self.failures += 1
                if self.failures == 1:  # said once; the count is in ``failures``
                    warn_at_caller(  # capped, as every warning: an error's text can be megabytes
                        f"speedtronic: a system sample failed (later failures are counted in "
                        f"SystemMonitor.failures): {exception_text(error)}",
                        SpeedtronicWarning,
                    )

    def __enter__(self) -> SystemMonitor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        running = self._thread is not None and self._thread.is_alive() and not self._stop.is_set()
        state = "running" if running else "stopped"
        return f"<SystemMonitor every {self.interval_s:g} s, {len(self._gpus)} GPUs, {state}>"


def visible_gpus(nvml: Any) -> list[Any]:
    """NVML handles of the GPUs CUDA shows this process, in CUDA's order: ``CUDA_VISIBLE_DEVICES``'s
    indices and ``GPU-``/``MIG-`` UUIDs (up to the first it can't find, as CUDA does), else all."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return [nvml.nvmlDeviceGetHandleByIndex(index) for index in range(nvml.nvmlDeviceGetCount())]
    handles = []
    for entry in (part.strip() for part in listed.split(",")):
        try:
            if entry.isdigit():
                handles.append(nvml.nvmlDeviceGetHandleByIndex(int(entry)))
            elif entry.startswith(("GPU-", "MIG-")):
                handles.append(nvml.nvmlDeviceGetHandleByUUID(entry))
            else:
                break
        except nvml.NVMLError:
            break
    return handles


def gpu_probes() -> list[Probe]:
    """One probe per visible NVIDIA GPU, each returning that GPU's ``gpu<i>_...`` keys; none when
    nvidia-ml-py is not installed or NVML can't start (no NVIDIA driver)."""
    try:
        nvml: Any = importlib.import_module("pynvml")  # nvidia-ml-py's module, untyped
    except ModuleNotFoundError:
        return []
    try:
        nvml.nvmlInit()
        handles = visible_gpus(nvml)
    except nvml.NVMLError:
        return []
    return [_gpu_probe(nvml, index, handle) for index, handle in enumerate(handles)]


def _gpu_probe(nvml: Any, index: int, handle: Any) -> Probe:
    """The probe of one GPU, with only the queries it answered when asked once."""
    prefix = f"gpu{index}_"

    def utilisation() -> dict[str, float | int]:
        return {prefix + "util_percent": int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)}

    def memory() -> dict[str, float | int]:
        info = nvml.nvmlDeviceGetMemoryInfo(handle)
        return {prefix + "memory_used_bytes": int(info.used), prefix + "memory_total_bytes": int(info.total)}

    def power() -> dict[str, float | int]:
        return {prefix + "power_watts": nvml.nvmlDeviceGetPowerUsage(handle) / 1000}  # milliwatts

    def temperature() -> dict[str, float | int]:
        celsius = nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
        return {prefix + "temperature_c": int(celsius)}

    answered: list[Probe] = []
    for query in (utilisation, memory, power, temperature):
        with contextlib.suppress(nvml.NVMLError):
            query()
            answered.append(query)

    def probe() -> dict[str, float | int]:
        payload: dict[str, float | int] = {}
        for query in answered:
            payload.update(query())
        return payload

    return probe
