"""The process group of a run launched by ``torchrun`` (or SLURM): set up, agreed on, torn down.

``build_runtime`` calls these; importing this module does not import torch.
"""

from __future__ import annotations

from typing import Any, TypeVar

from speedtronic.distributed import RankInfo

__all__ = ["destroy_process_group", "device_for_rank", "init_process_group", "share_from_rank0", "shutdown"]

T = TypeVar("T")


def device_for_rank(device: Any, rank: RankInfo) -> Any:
    """A bare CUDA device becomes ``cuda:LOCAL_RANK`` (made current) in a multi-process job."""
    import torch

    if rank.distributed and device.type == "cuda":
        device = torch.device("cuda", rank.local_rank)
        torch.cuda.set_device(device)
    return device


def init_process_group(rank: RankInfo, device: Any) -> bool:
    """Initialise the default group for a multi-process job (nccl on CUDA, else gloo), from the
    launcher's environment. ``True`` if this call initialised it, so the caller destroys it."""
    import torch.distributed as dist

    if not rank.distributed or dist.is_initialized():
        return False
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    return True


def share_from_rank0(value: T) -> T:
    """Rank 0's ``value`` on every rank (a picklable object); ``value`` itself outside a process group."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return value
    chosen = [value]
    dist.broadcast_object_list(chosen, src=0)
    return chosen[0]


def shutdown(steps: list[Any], *, quiet: bool) -> None:
    """Run each clean-up step in order, every one even if an earlier one fails. ``quiet`` (an error
    is already on its way) swallows their ``Exception``\\ s; otherwise the first is raised at the end."""
    first: Exception | None = None
    for step in steps:
        try:
            step()
        except Exception as error:
            if first is None and not quiet:
                first = error
    if first is not None:
        raise first


def destroy_process_group() -> None:
    """Destroy the default group and every group made from it (the outer loop's), if still there."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
