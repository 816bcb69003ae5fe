"""Peak dense FLOP/s of common accelerators by precision, and the FLOPs-per-token rule: what MFU
(model FLOPs utilisation) is measured against."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["FLOPS_PER_PARAMETER", "PEAK_FLOPS", "peak_flops"]

FLOPS_PER_PARAMETER = 6
"""Training FLOPs per token per parameter: 2 forward and 4 backward (Kaplan et al. 2020; torchtitan's
``6 * params``, attention's sequence-length term left out)."""

# The vendor's dense (no sparsity) tensor-core figures; "fp32" is the plain FP32 figure, since torch
# leaves TF32 matmuls off by default.
PEAK_FLOPS: Mapping[str, Mapping[str, float]] = {
    # name fragment (as torch.cuda.get_device_name spells it) -> precision -> dense FLOP/s;
    # the more specific fragment first: the first that the device's name contains is taken.
    "H100 PCIe": {"bf16": 756e12, "fp32": 51e12},
    "H100 NVL": {"bf16": 835e12, "fp32": 60e12},
    "H100": {"bf16": 989e12, "fp32": 67e12},
    "H200": {"bf16": 989e12, "fp32": 67e12},
    "GH200": {"bf16": 989e12, "fp32": 67e12},
    "B200": {"bf16": 2250e12, "fp32": 80e12},
    "A100": {"bf16": 312e12, "fp32": 19.5e12},
    "A10G": {"bf16": 70e12, "fp32": 31.2e12},
    "L40S": {"bf16": 362e12, "fp32": 91.6e12},
    "L4": {"bf16": 121e12, "fp32": 30.3e12},
    "V100": {"fp32": 15.7e12},
    "MI300X": {"bf16": 1307.4e12, "fp32": 163.4e12},
}
"""Dense peak FLOP/s from the vendors' data sheets (SXM parts unless the name says otherwise)."""


def peak_flops(device_name: str, precision: str) -> float | None:
    """The peak FLOP/s of the accelerator named ``device_name`` at ``precision`` (``"bf16"``,
    ``"fp32"``); ``None`` when the table does not know it (a CPU, an unlisted GPU)."""
    for fragment, peaks in PEAK_FLOPS.items():
        if fragment in device_name:
            return peaks.get(precision)
    return None
