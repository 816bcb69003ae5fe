"""Rank awareness for runs under ``torchrun``/DDP/SLURM: who am I, and what each rank writes.
Nothing here imports torch."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["RankInfo", "aggregate", "detect_rank", "is_lead"]


@dataclass(frozen=True)
class RankInfo:
    """This process's place in the job; ``source`` says where it was read from."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    source: str = "single-process"

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def detect_rank(environ: Mapping[str, str] | None = None) -> RankInfo:
    """An initialised ``torch.distributed`` group, else the launcher's environment, else one process.

    Environment: ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` (torchrun), then SLURM's
    ``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID``.
    """
    env = os.environ if environ is None else environ
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is not None and dist.is_available() and dist.is_initialized():
        local = _int(env.get("LOCAL_RANK"), 0)
        return RankInfo(dist.get_rank(), dist.get_world_size(), local, "torch.distributed")
    for rank_key, size_key, local_key, source in (
        ("RANK", "WORLD_SIZE", "LOCAL_RANK", "env:RANK"),
        ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "env:SLURM_PROCID"),
    ):
        if rank_key in env and size_key in env:
            rank, size = _int(env[rank_key], 0), _int(env[size_key], 1)
            if 0 <= rank < size:
                return RankInfo(rank, size, _int(env.get(local_key), 0), source)
    return RankInfo()


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def is_lead(rank: RankInfo, lead_rank: int | None = 0) -> bool:
    """Whether ``rank`` runs the text log and the hooks: it is ``lead_rank``, or ``lead_rank`` is ``None``
    (every rank). ``MetricLogger.is_lead`` and ``build_logger`` (which builds hooks only there) ask this."""
    return lead_rank is None or rank.rank == lead_rank


Op = Literal["mean", "sum", "max", "min"]


def aggregate(
    payload: Mapping[str, Any],
    op: Op = "mean",
    *,
    keep: Collection[str] = ("step",),
    group: Any = None,
    device: Any = None,
) -> dict[str, Any]:
    """Reduce a payload's numeric values across ranks with ONE collective; call it on every rank.

    Numbers (int, float, 0-d tensors, numpy scalars; not bools) are packed into one float64 tensor
    and all-reduced (``mean`` is a sum divided by the world size); the keys in ``keep`` (the
    ``step``, which the cadence and the trackers need as an int) and every other value are this
    rank's own. ``sum``, ``max`` and ``min`` of ints stay ints. Keys must be the same on every rank,
    in the same order. Without an initialised process group the numbers are this rank's (tensors as
    Python numbers). It costs one collective, and a device sync for tensors, per call: call it on the
    steps you log, never inside ``emit``, where a rank that skipped a step would leave the others
    waiting forever.
    """
    import torch
    import torch.distributed as dist

    numeric = [key for key, value in payload.items() if key not in keep and _is_number(value)]
    out = dict(payload)
    if not numeric:
        return out
    values = [payload[key].item() if hasattr(payload[key], "item") else payload[key] for key in numeric]
    if not (dist.is_available() and dist.is_initialized()):
        out.update(zip(numeric, values, strict=True))
        return out
    values = [float(value) for value in values]
    if device is None:
        device = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
    packed = torch.tensor(values, dtype=torch.float64, device=device)
    reduce_op = {
        "mean": dist.ReduceOp.SUM,
        "sum": dist.ReduceOp.SUM,
        "max": dist.ReduceOp.MAX,
        "min": dist.ReduceOp.MIN,
    }[op]
    dist.all_reduce(packed, op=reduce_op, group=group)
    if op == "mean":
        packed /= dist.get_world_size(group)
    for key, reduced in zip(numeric, packed.tolist(), strict=True):
        keeps_int = isinstance(payload[key], int) and op != "mean" and math.isfinite(reduced)
        out[key] = int(reduced) if keeps_int else reduced
    return out


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    shape = getattr(value, "shape", None)
    return shape is not None and tuple(shape) == () and hasattr(value, "item")
