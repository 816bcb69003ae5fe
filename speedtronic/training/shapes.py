"""Layer sizes checked against the multiple a device's fast kernels want (``shape_profile`` events).
torch is never imported here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["alignment_for", "layer_sizes", "misaligned"]

# Matmuls run fastest when their dimensions fill whole vector registers (32 bytes on a CPU with AVX2) or
# tensor-core tiles (16 bytes on CUDA and MPS): 8 or 16 elements (fp32, bf16) on a CPU, 4 or 8 on a GPU.
_VECTOR_BYTES = {"cpu": 32, "cuda": 16, "mps": 16}
_ELEMENT_BYTES = {"fp32": 4, "bf16": 2}
_SIZE_ATTRIBUTES = ("in_features", "out_features", "embedding_dim")  # Linear, Embedding


def alignment_for(device_type: str, precision: str) -> int:
    """The multiple, in elements, that layer sizes should be on ``device_type`` at ``precision``."""
    return max(1, _VECTOR_BYTES.get(device_type, 16) // _ELEMENT_BYTES[precision])


def layer_sizes(model: Any) -> Iterator[tuple[str, int]]:
    """``("net.1.out_features", 100)`` for each matmul dimension of the model's Linear/Embedding layers."""
    for name, module in model.named_modules():
        for attribute in _SIZE_ATTRIBUTES:
            value = getattr(module, attribute, None)
            if type(value) is int:
                yield (f"{name}.{attribute}" if name else attribute), value


def misaligned(model: Any, alignment: int) -> list[tuple[str, int]]:
    """The layer sizes that are not a multiple of ``alignment``, in module order."""
    return [(field, value) for field, value in layer_sizes(model) if value % alignment]
