"""Skipped steps never touch tensor values, so they can never force a device sync."""

from __future__ import annotations

import io
from typing import Any, ClassVar

import pytest

from speedtronic.profiling import MetricLogger

torch = pytest.importorskip("torch", reason="needs torch (the test set-up installs it)")


class CountingTensor(torch.Tensor):  # type: ignore[misc]  # torch is untyped here
    """A tensor that journals every torch function called on it (item, tolist, __float__, ...)."""

    calls: ClassVar[list[str]] = []

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        cls.calls.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


def counting(value: float) -> Any:
    return torch.tensor(value).as_subclass(CountingTensor)


def test_skipped_steps_touch_no_tensor() -> None:
    """A skipped train_step calls nothing on its tensors; a logged one converts them once."""
    CountingTensor.calls.clear()
    seen: list[dict[str, Any]] = []
    with MetricLogger(stream=io.StringIO(), every_steps=10, hooks=[lambda e, p: seen.append(p)]) as lg:
        for step in range(1, 10):
            lg.emit("train_step", {"step": step, "loss": counting(1.0), "grad_norm": counting(2.0)})
        assert CountingTensor.calls == []
        lg.emit("train_step", {"step": 10, "loss": counting(0.5), "grad_norm": counting(2.0)})
    assert "item" in CountingTensor.calls
    assert seen[0]["loss"] == 0.5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU for sync debug mode")
def test_no_cuda_sync_on_skipped_steps() -> None:
    """With torch.cuda.set_sync_debug_mode('error'), skipped emits of CUDA tensors don't sync."""
    loss = torch.ones(1024, device="cuda").sum()
    with MetricLogger(stream=io.StringIO(), every_steps=100) as logger:
        torch.cuda.set_sync_debug_mode("error")
        try:
            for step in range(1, 100):
                logger.emit("train_step", {"step": step, "loss": loss})
        finally:
            torch.cuda.set_sync_debug_mode("default")
