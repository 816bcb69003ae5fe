"""SystemMonitor with the real psutil on this machine (the GPU path is tests/gpu/check.sh's)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from speedtronic.integrations.system import SystemMonitor, gpu_probes, visible_gpus
from speedtronic.processors.validate import payload_problems
from speedtronic.profiling import MetricLogger
from tests.helpers import read_jsonl

pytest.importorskip("psutil")

WAIT_S = 60  # the most a test waits for the sampler's thread: only a stuck thread takes that long


class SeenSystem:
    """A hook that notes the thread each ``system`` event arrives on, and signals the ``count``-th."""

    def __init__(self, count: int = 2) -> None:
        self.threads: list[str] = []
        self.enough = threading.Event()
        self._count = count

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        if event == "system":
            self.threads.append(threading.current_thread().name)
            if len(self.threads) >= self._count:
                self.enough.set()


class TestSample:
    def test_a_sample_has_the_process_and_the_host(self) -> None:
        """cpu_percent, rss_bytes and the host's memory, as the catalog's system payload types them."""
        with MetricLogger(stream=io.StringIO()) as logger:
            sample = SystemMonitor(logger, gpus=False).sample()
        assert list(sample) == [
            "cpu_percent",
            "rss_bytes",
            "host_memory_used_bytes",
            "host_memory_total_bytes",
        ]
        assert payload_problems("system", sample) == []
        assert 0 < sample["rss_bytes"] < sample["host_memory_total_bytes"]
        assert 0 < sample["host_memory_used_bytes"] <= sample["host_memory_total_bytes"]
        assert sample["cpu_percent"] >= 0

    def test_a_bad_interval_names_the_argument(self) -> None:
        """interval_s of 0 is refused before any thread starts."""
        with pytest.raises(ValueError, match=r"^SystemMonitor: interval_s must be a number of seconds > 0"):
            SystemMonitor(MetricLogger(stream=io.StringIO()), 0)


class TestMonitor:
    def test_samples_reach_the_jsonl_from_a_thread_of_their_own(self, tmp_path: Path) -> None:
        """Running, the monitor emits system records into the logger from a thread of its own."""
        seen = SeenSystem()
        jsonl = tmp_path / "metrics.jsonl"
        logger = MetricLogger(stream=io.StringIO(), json_file=jsonl, hooks=[seen])
        with logger, SystemMonitor(logger, 0.01, gpus=False):
            assert seen.enough.wait(WAIT_S)
        records = [record for record in read_jsonl(jsonl) if record["event"] == "system"]
        assert len(records) >= 2
        assert all(payload_problems("system", record) == [] for record in records)
        assert set(seen.threads) == {"speedtronic-system"}

    def test_the_thread_ends_when_the_logger_closes(self) -> None:
        """A monitor nobody closed stops at its first sample after the logger is closed."""
        seen = SeenSystem(count=1)
        logger = MetricLogger(stream=io.StringIO(), hooks=[seen])
        monitor = SystemMonitor(logger, 0.01, gpus=False)
        monitor.start()
        assert seen.enough.wait(WAIT_S)
        logger.close()
        assert monitor._thread is not None
        monitor._thread.join(WAIT_S)
        assert not monitor._thread.is_alive()

    def test_without_psutil_the_error_names_the_extra(self, tmp_path: Path) -> None:
        """psutil missing: ModuleNotFoundError saying pip install 'speedtronic[system]'."""
        code = (
            "import sys; sys.modules['psutil'] = None\n"
            "from speedtronic.integrations.system import SystemMonitor, gpu_probes, visible_gpus\n"
            "try:\n    SystemMonitor(None)\nexcept ModuleNotFoundError as error:\n    print(error)\n"
        )
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        command = [sys.executable, "-c", code]
        out = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
        assert out.stdout.strip() == (
            "speedtronic.integrations.system.SystemMonitor requires psutil: pip install 'speedtronic[system]'"
        )


class TestGpus:
    @pytest.mark.skipif(not gpu_probes(), reason="needs an NVIDIA GPU, its driver and nvidia-ml-py")
    def test_each_visible_gpu_has_its_keys(self) -> None:
        """On a GPU machine: gpu0_* keys, memory within its total, utilisation a percentage."""
        with MetricLogger(stream=io.StringIO()) as logger:
            sample = SystemMonitor(logger).sample()
        assert 0 < sample["gpu0_memory_used_bytes"] <= sample["gpu0_memory_total_bytes"]
        assert 0 <= sample["gpu0_util_percent"] <= 100
        assert {"gpu0_power_watts", "gpu0_temperature_c"} <= sample.keys()
        torch = pytest.importorskip("torch")
        assert sum(key.endswith("_memory_total_bytes") for key in sample) == torch.cuda.device_count()

    def test_cuda_visible_devices_picks_and_orders_the_gpus(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """CUDA_VISIBLE_DEVICES=2,0,x,1 is physical GPUs 2 then 0: CUDA stops at an entry it cannot use."""

        class Nvml:  # NVML's enumeration of a four-GPU machine, the only part visible_gpus reads
            NVMLError = RuntimeError

            @staticmethod
            def nvmlDeviceGetCount() -> int:
                return 4

            @staticmethod
            def nvmlDeviceGetHandleByIndex(index: int) -> str:
                if index >= 4:
                    raise RuntimeError("invalid argument")
                return f"physical {index}"

            @staticmethod
            def nvmlDeviceGetHandleByUUID(uuid: str) -> str:
                return f"uuid {uuid}"

        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0,x,1")
        assert visible_gpus(Nvml) == ["physical 2", "physical 0"]
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc,7,1")
        assert visible_gpus(Nvml) == ["uuid GPU-abc"]
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
        assert visible_gpus(Nvml) == [f"physical {index}" for index in range(4)]


class FailingProbe(SystemMonitor):
    """A monitor whose every sample fails, as one would with a GPU fallen off the bus."""

    def sample(self) -> dict[str, float | int]:
        self.tried.set()
        raise OSError("NVML: GPU is lost")

    tried = threading.Event()


def test_a_failing_sample_warns_once_and_never_stops_the_logger(tmp_path: Path) -> None:
    """Samples that raise: one SpeedtronicWarning naming the error, the rest counted; the logger goes on."""
    from speedtronic.errors import SpeedtronicWarning

    jsonl = tmp_path / "metrics.jsonl"
    with pytest.warns(SpeedtronicWarning, match="a system sample failed .*OSError: NVML: GPU is lost"):
        logger = MetricLogger(stream=io.StringIO(), json_file=jsonl)
        monitor = FailingProbe(logger, 0.01, gpus=False)
        with logger, monitor:
            assert FailingProbe.tried.wait(WAIT_S)
            logger.emit("probe", {"step": 1})
    assert monitor.failures >= 1
    assert [record["event"] for record in read_jsonl(jsonl)] == ["probe"]


class HugeFailure(SystemMonitor):
    """A monitor whose sample fails with a 100,000-character message (a driver dumping its state)."""

    tried = threading.Event()

    def sample(self) -> dict[str, float | int]:
        self.tried.set()
        raise OSError("NVML: " + "x" * 100_000)


def test_a_failing_sample_warning_is_capped() -> None:
    """The sample failure's warning is no longer than MAX_WARNING_BYTES, as every speedtronic warning."""
    from speedtronic.errors import MAX_WARNING_BYTES, SpeedtronicWarning

    with pytest.warns(SpeedtronicWarning, match="a system sample failed") as caught:
        logger = MetricLogger(stream=io.StringIO())
        monitor = HugeFailure(logger, 0.01, gpus=False)
        with logger, monitor:
            assert HugeFailure.tried.wait(WAIT_S)
    (warning,) = [w for w in caught if "a system sample failed" in str(w.message)]
    text = str(warning.message)
    assert len(text.encode()) <= MAX_WARNING_BYTES
    assert "OSError: NVML: xxx" in text
    assert "<truncated: " in text


FORKED = """
import io, os
from speedtronic.integrations.system import SystemMonitor
from speedtronic.profiling import MetricLogger

monitor = SystemMonitor(MetricLogger(stream=io.StringIO()), gpus=False)
parent = monitor.sample()["rss_bytes"]
read, write = os.pipe()
child = os.fork()
if child == 0:
    held = bytearray(b"\\1") * (256 * 2**20)  # 256 MiB written, so resident in the child only
    os.write(write, str(monitor.sample()["rss_bytes"]).encode())
    os._exit(0)
os.close(write)
sampled = int(os.read(read, 100))
os.waitpid(child, 0)
print(parent, sampled, monitor.sample()["rss_bytes"])
"""


def test_a_forked_child_samples_itself() -> None:
    """After os.fork(), the child's sample is the child's RSS (its 256 MiB in), not the parent's."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, text=True, env=env, check=True)
    parent, child, parent_after = (int(part) for part in out.stdout.split())
    assert child >= parent + 200 * 2**20
    assert parent_after < parent + 200 * 2**20  # the parent still samples itself


class HangingNvml:
    """A stand-in for nvidia-ml-py's ``pynvml`` (no GPU here): one GPU whose utilisation query, once
    ``hang`` is set, blocks until ``release`` is set, as a driver stuck in NVML does."""

    NVMLError = RuntimeError
    NVML_TEMPERATURE_GPU = 0

    def __init__(self) -> None:
        self.hang = threading.Event()
        self.hanging = threading.Event()
        self.release = threading.Event()

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu {index}"

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> Any:
        if self.hang.is_set():
            self.hanging.set()
            self.release.wait()

        class Rates:
            gpu = 50

        return Rates()

    def nvmlDeviceGetMemoryInfo(self, handle: str, *args: Any) -> Any:
        raise RuntimeError("not supported")

    nvmlDeviceGetPowerUsage = nvmlDeviceGetMemoryInfo
    nvmlDeviceGetTemperature = nvmlDeviceGetMemoryInfo


def test_close_is_bounded_when_an_nvml_call_hangs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sample stuck in NVML: close(timeout) returns, with a warning, and the thread ends once freed."""
    from speedtronic.errors import SpeedtronicWarning

    nvml = HangingNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    logger = MetricLogger(stream=io.StringIO())
    monitor = SystemMonitor(logger, 0.01)
    assert monitor.sample()["gpu0_util_percent"] == 50
    nvml.hang.set()
    monitor.start()
    assert nvml.hanging.wait(WAIT_S)
    closed = threading.Event()
    caught: list[Any] = []

    def close() -> None:
        with pytest.warns(SpeedtronicWarning, match=r"SystemMonitor.close: a system sample was still"):
            monitor.close(timeout=0.05)
        caught.append(True)
        closed.set()

    closer = threading.Thread(target=close)
    closer.start()
    try:
        assert closed.wait(WAIT_S), "close() waited on the hung NVML call"
        assert caught == [True]
        assert monitor._thread is not None
        assert monitor._thread.is_alive()  # still in NVML, on its own
    finally:
        nvml.release.set()
        closer.join(WAIT_S)
    monitor._thread.join(WAIT_S)
    assert not monitor._thread.is_alive()
    logger.close()


def test_close_has_a_bound_by_default() -> None:
    """close()'s default timeout is CLOSE_TIMEOUT_S, a finite number of seconds."""
    import inspect

    from speedtronic.integrations.system import CLOSE_TIMEOUT_S

    assert inspect.signature(SystemMonitor.close).parameters["timeout"].default == CLOSE_TIMEOUT_S
    assert 0 < CLOSE_TIMEOUT_S < 60
