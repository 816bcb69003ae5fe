"""memory_bytes: the right device, chosen once, never importing torch."""

from __future__ import annotations

import io
import subprocess
import sys
import types
from typing import Any

import pytest

from speedtronic.processors import AddMemory
from speedtronic.profiling import MetricLogger, memory_usage_bytes


class FakeCuda:
    """Stands in for torch.cuda on a machine without a GPU: per-device readings, call journal."""

    def __init__(self, current: int = 0) -> None:
        self.current = current
        self.calls: list[Any] = []

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def current_device(self) -> int:
        return self.current

    def memory_allocated(self, device: Any = None) -> int:
        self.calls.append(device)
        return 1000 + int(device)


def fake_torch(cuda: FakeCuda) -> types.ModuleType:
    module = types.ModuleType("torch")
    module.cuda = cuda  # type: ignore[attr-defined]

    class Device:
        def __init__(self, kind: str, index: int | None = None) -> None:
            self.type, _, idx = kind.partition(":")
            self.index = int(idx) if idx else index

    module.device = Device  # type: ignore[attr-defined]
    return module


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    fake = FakeCuda(current=0)
    monkeypatch.setitem(sys.modules, "torch", fake_torch(fake))
    return fake


def test_cpu_gives_no_reading() -> None:
    """The CPU has no reading (not 0); with a CPU build of torch, neither has the default device."""
    import torch

    assert memory_usage_bytes("cpu") is None
    if torch.cuda.is_available():
        pytest.skip("the default device is a CUDA GPU here (tests/gpu/check.sh covers it)")
    assert memory_usage_bytes() is None


def test_explicit_device_is_read(cuda: FakeCuda) -> None:
    """device="cuda:1" reads card 1, not the current card 0."""
    assert memory_usage_bytes("cuda:1") == 1001
    assert cuda.calls == [1]


def test_default_device_fixed_at_construction(cuda: FakeCuda) -> None:
    """The current device when the logger is created is the one read later, from any thread."""
    import threading

    cuda.current = 3
    stage = AddMemory()
    cuda.current = 0  # e.g. another thread whose current device is 0
    readings: list[Any] = []
    thread = threading.Thread(target=lambda: readings.append(stage(None, "info", {})["memory_bytes"]))
    thread.start()
    thread.join()
    assert readings == [1003]


def test_logger_device_option(cuda: FakeCuda) -> None:
    """MetricLogger(device=...) reports that device's memory."""
    seen: list[dict[str, Any]] = []
    with MetricLogger(stream=io.StringIO(), device="cuda:2", hooks=[lambda e, p: seen.append(p)]) as lg:
        lg.emit("train_step", {"step": 1})
    assert seen[0]["memory_bytes"] == 1002


def test_no_query_for_skipped_steps(cuda: FakeCuda) -> None:
    """Skipped steps never query the device; the probe is resolved once."""
    with MetricLogger(stream=io.StringIO(), every_steps=10, device=0) as logger:
        for step in range(1, 31):
            logger.emit("train_step", {"step": step})
    assert cuda.calls == [0, 0, 0]


def test_torch_never_imported() -> None:
    """A process that never imported torch logs without importing it, and gets no memory key."""
    code = (
        "import io, sys\n"
        "from speedtronic.profiling import MetricLogger, memory_usage_bytes\n"
        "seen = []\n"
        "with MetricLogger(stream=io.StringIO(), hooks=[lambda e, p: seen.append(p)]) as lg:\n"
        "    lg.emit('train_step', {'step': 1})\n"
        "assert memory_usage_bytes() is None\n"
        "assert 'memory_bytes' not in seen[0], seen\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.skipif(
    "not __import__('torch').cuda.is_available()", reason="needs a CUDA GPU: real memory_allocated"
)
def test_real_cuda_reading() -> None:
    """On a GPU machine, memory_bytes is torch.cuda.memory_allocated of the logger's device."""
    import torch

    x = torch.ones(1024, 1024, device="cuda")
    seen: list[dict[str, Any]] = []
    with MetricLogger(stream=io.StringIO(), device="cuda:0", hooks=[lambda e, p: seen.append(p)]) as lg:
        lg.emit("train_step", {"step": 1})
    assert seen[0]["memory_bytes"] == torch.cuda.memory_allocated(0) >= x.numel() * 4


@pytest.mark.skipif(
    "not __import__('torch').cuda.is_available()", reason="needs a CUDA GPU: real memory_stats"
)
def test_real_cuda_allocator_counters_with_the_memory_rule() -> None:
    """A logger running the memory rule adds the allocator's alloc_retries and ooms on CUDA (what
    torch.cuda.memory_stats says); one without it adds neither."""
    import torch

    from speedtronic.alerts import Memory

    torch.ones(1024, device="cuda")
    seen: list[dict[str, Any]] = []
    with MetricLogger(stream=io.StringIO(), device="cuda:0", hooks=[lambda e, p: seen.append(p)],
                      alerts=[Memory()]) as lg:  # fmt: skip
        lg.emit("train_step", {"step": 1})
    with MetricLogger(stream=io.StringIO(), device="cuda:0", hooks=[lambda e, p: seen.append(p)]) as lg:
        lg.emit("train_step", {"step": 2})
    stats = torch.cuda.memory_stats(0)
    assert (seen[0]["alloc_retries"], seen[0]["ooms"]) == (stats["num_alloc_retries"], stats["num_ooms"])
    assert "alloc_retries" not in seen[1]


def test_no_allocator_counters_without_an_accelerator() -> None:
    """On the CPU the memory rule adds nothing to the records (no allocator to read)."""
    from speedtronic.alerts import Memory

    seen: list[dict[str, Any]] = []
    with MetricLogger(stream=io.StringIO(), hooks=[lambda e, p: seen.append(p)], alerts=[Memory()]) as lg:
        lg.emit("train_step", {"step": 1})
    assert "alloc_retries" not in seen[0]
    assert "ooms" not in seen[0]
