"""``OuterLoop``: the DiLoCo outer loop for the reference ``Trainer``, its exchange on a background
thread (``docs/distributed.md``)."""

from __future__ import annotations

import contextlib
import hashlib
import queue
import threading
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
import torch.distributed as dist
from torch import Tensor, nn

from speedtronic.errors import SpeedtronicWarning
from speedtronic.events import Event

if TYPE_CHECKING:
    from speedtronic.training.trainer import Trainer

__all__ = ["IDLE", "IN_FLIGHT", "OVERFLOW", "OuterLoop", "checksum", "skip_reason"]

IDLE, IN_FLIGHT, OVERFLOW = 0, 1, 2
"""A rank's exchange state at a boundary: nothing outstanding, an exchange running, or one still
waiting in the queue (its thread has not started it). The ranks agree on the largest."""

_REASONS = {IN_FLIGHT: "in_flight", OVERFLOW: "overflow"}

Reduce = Callable[[Tensor], None]
"""Sums a CPU tensor over the ranks, in place."""


def skip_reason(agreed_state: int) -> str | None:
    """Why the delta due at a boundary is skipped, given the largest exchange state over all ranks;
    ``None``: upload it. Every rank decides from the same agreed number, so all skip together."""
    return _REASONS.get(agreed_state)


def checksum(flat: Tensor) -> str:
    """A SHA-256 prefix of a CPU tensor's bytes: equal exactly when the values are bitwise equal."""
    return hashlib.sha256(flat.detach().numpy().tobytes()).hexdigest()[:16]


class _Job(NamedTuple):
    packed: Tensor
    """``[delta..., 1.0]``, or zeros and ``0.0`` from a rank whose delta is not finite."""
    local_step: int
    base_generation: int


# What the loop does. Each rank is one DiLoCo worker with its own data and inner optimizer (no DDP);
# every `every` inner steps (an outer boundary) the workers' progress is merged, one step delayed
# (pccl's async DiLoCo): the deltas taken at a boundary are all-reduced on the exchange thread while
# the next `every` inner steps run, and the result is loaded at the next boundary. The synced
# parameters theta (a flat float32 CPU tensor, equal on every rank) and the outer optimizer (SGD,
# Nesterov, lr 0.7, momentum 0.9 by default) belong to the exchange thread while an exchange runs.
# At each boundary the training thread:
# 1. agrees with the other ranks whether every previous exchange has finished: one one-element
#    all-reduce (MAX of IDLE/IN_FLIGHT/OVERFLOW) on a control group, so all ranks decide alike
#    (skip_reason); if not, the delta due here is skipped (delta_upload_skipped) and its progress
#    stays in the model for the next delta;
# 2. takes the delta: the baseline (the synced parameters the model was last set to) minus the model;
# 3. sets the model to the newest synced parameters (those the last exchange produced, else the
#    baseline again: the progress just taken travels in the delta);
# 4. hands the delta to the exchange thread through a queue of size 1 (delta_upload_queued).
# The exchange thread sums [delta, 1] over the ranks with ONE all-reduce (delta_uploaded), averages
# the finite deltas (included) and steps the outer optimizer on theta (outer_step). A delta taken
# against generation g lands on g + 1 (delta_upload_stale, applied anyway); an exception is
# delta_upload_failed and theta stays. fit() ends by waiting for the exchange in flight and loading its
# result; a checkpoint holds theta, its generation, the baseline and the momentum, taken after that
# wait. Not done: DDP inside a worker; partial or quantised exchanges; a collective failing on some
# ranks only. docs/distributed.md describes it for users.
class OuterLoop:
    """Attaches the DiLoCo outer loop to ``trainer`` (the comment above says what it does).

    Build it on every rank, after ``torch.distributed`` is initialised (or in a single process: one
    worker, the exchange is the identity), before ``fit()``. ``reduce`` replaces the default
    all-reduce over the exchange's own gloo group (``self.group``). Close it when done.
    """

    def __init__(
        self,
        trainer: Trainer,
        every: int,
        *,
        lr: float = 0.7,
        momentum: float = 0.9,
        reduce: Reduce | None = None,
    ) -> None:
        if every < 1 or lr <= 0 or not 0 <= momentum < 1:
            raise ValueError(f"need every >= 1, lr > 0, 0 <= momentum < 1; got {every}, {lr}, {momentum}")
        self.every = every
        self._trainer = trainer
        self._params = [p for p in trainer.module.parameters() if p.requires_grad]
        grouped = dist.is_available() and dist.is_initialized()
        self.world_size = dist.get_world_size() if grouped else 1
        # Gloo groups of their own: the control group on the training thread, the exchange group on
        # the exchange thread, so no group is ever used from two threads at once.
        self._control: Any = dist.new_group(backend="gloo") if self.world_size > 1 else None
        self.group: Any = dist.new_group(backend="gloo") if self.world_size > 1 else None
        self.reduce: Reduce = reduce if reduce is not None else self._all_reduce
        self.generation = 0
        """The synced parameters' generation the model was last set to (outer steps it holds)."""
        self._baseline = self._flatten()
        self._synced = nn.Parameter(self._baseline.clone())
        self._synced_generation = 0
        self._outer = torch.optim.SGD([self._synced], lr=lr, momentum=momentum, nesterov=momentum > 0)
        self._jobs: queue.Queue[_Job | None] = queue.Queue(maxsize=1)
        self._lock = threading.Lock()
        self._outstanding = 0
        self._closed = False
        self._restored = False
        self._thread = threading.Thread(target=self._run, name="speedtronic-outer", daemon=True)
        self._thread.start()
        trainer.at_fit_start.append(self._start)
        trainer.after_optimizer_step.append(self._after_step)
        trainer.before_fit_end.append(self._finish)
        trainer.outer = self

    # -- the training thread -------------------------------------------------------------------

    def _start(self, trainer: Trainer) -> None:
        """At ``fit()``'s start: every worker starts from rank 0's parameters (a resumed loop goes on
        from its checkpoint instead)."""
        if self._restored:
            return
        start = self._flatten()
        if self._control is not None:
            dist.broadcast(start, src=0, group=self._control)
            self._load(start)
        self._baseline = start
        self._synced.data.copy_(start)

    def _after_step(self, trainer: Trainer) -> None:
        if trainer.step % self.every == 0:
            self._boundary(trainer.step)

    def _boundary(self, step: int) -> None:
        reason = skip_reason(self._agree(self._state()))
        if reason is not None:
            self._emit(
                Event.DELTA_UPLOAD_SKIPPED,
                {
                    "local_step": step,
                    "base_outer_step": self.generation,
                    "reason": reason,
                },
            )
            return
        # Every rank's exchange thread is idle: the synced parameters are this thread's to read.
        delta = self._baseline - self._flatten()
        finite = bool(torch.isfinite(delta).all())
        flag = delta.new_tensor([1.0 if finite else 0.0])
        packed = torch.cat([delta if finite else torch.zeros_like(delta), flag])
        base_generation = self.generation
        if self._synced_generation > self.generation:
            self._baseline = self._synced.detach().clone()
            self.generation = self._synced_generation
        self._load(self._baseline)
        self._emit(
            Event.DELTA_UPLOAD_QUEUED,
            {
                "local_step": step,
                "base_outer_step": base_generation,
                "in_flight": 1,
                "checksum": checksum(self._baseline),
            },
        )
        with self._lock:
            self._outstanding += 1
        self._jobs.put_nowait(_Job(packed, step, base_generation))  # agreed idle: the queue is empty

    def wait(self) -> None:
        """Block until this rank's exchange in flight, if any, is done (every rank queued the same
        ones, so it completes). Called from an ``after_optimizer_step`` callback one step before each
        boundary, it makes every boundary upload: synchronous DiLoCo, one step late."""
        self._jobs.join()

    def _finish(self, trainer: Trainer) -> None:
        """At ``fit()``'s end: wait for the exchange in flight, then load its result."""
        self.wait()
        if self._synced_generation > self.generation:
            self._baseline = self._synced.detach().clone()
            self.generation = self._synced_generation
            self._load(self._baseline)

    def state_dict(self) -> dict[str, Any]:
        """θ, its generation, the baseline and the outer optimizer, once the exchange in flight is done."""
        self.wait()
        return {
            "generation": self.generation,
            "baseline": self._baseline.clone(),
            "synced": self._synced.detach().clone(),
            "synced_generation": self._synced_generation,
            "optimizer": self._outer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from a ``state_dict()``: ``fit()`` then keeps it instead of starting from the model."""
        self.wait()
        self.generation = state["generation"]
        self._baseline = state["baseline"].cpu()
        with torch.no_grad():
            self._synced.copy_(state["synced"].cpu())
        self._synced_generation = state["synced_generation"]
        self._outer.load_state_dict(state["optimizer"])
        self._restored = True

    def _state(self) -> int:
        with self._lock:
            if not self._outstanding:
                return IDLE
            return OVERFLOW if self._jobs.full() else IN_FLIGHT

    def _agree(self, state: int) -> int:
        if self._control is None:
            return state
        agreed = torch.tensor([state], dtype=torch.int64)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=self._control)
        return int(agreed.item())

    def _flatten(self) -> Tensor:
        with torch.no_grad():
            return torch.cat([p.detach().reshape(-1).to("cpu", torch.float32) for p in self._params])

    def _load(self, flat: Tensor) -> None:
        with torch.no_grad():
            offset = 0
            for p in self._params:
                p.copy_(flat[offset : offset + p.numel()].view_as(p))
                offset += p.numel()

    # -- the exchange thread -------------------------------------------------------------------

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                self._exchange(job)
            except Exception as error:  # any failure of an exchange costs its outer step, not the run
                with contextlib.suppress(Exception):  # a closed logger: nobody is left to tell
                    self._emit(
                        Event.DELTA_UPLOAD_FAILED,
                        {
                            "local_step": job.local_step,
                            "base_outer_step": job.base_generation,
                            "error": f"{type(error).__name__}: {error}",
                        },
                    )
            finally:
                with self._lock:
                    self._outstanding -= 1
                self._jobs.task_done()
        self._jobs.task_done()

    def _exchange(self, job: _Job) -> None:
        started = time.perf_counter()
        packed = job.packed
        self.reduce(packed)
        ids = {"local_step": job.local_step, "base_outer_step": job.base_generation}
        self._emit(
            Event.DELTA_UPLOADED,
            {
                **ids,
                "bytes": packed.numel() * packed.element_size(),
                "upload_s": round(time.perf_counter() - started, 6),
            },
        )
        included = round(float(packed[-1]))
        if included < 1:
            raise RuntimeError("no rank had a finite delta")
        lag = self._synced_generation - job.base_generation
        if lag > 0:
            self._emit(Event.DELTA_UPLOAD_STALE, {**ids, "baseline_generation": self._synced_generation})
        self._synced.grad = packed[:-1] / included
        self._outer.step()
        self._synced.grad = None
        self._synced_generation += 1
        self._emit(
            Event.OUTER_STEP,
            {
                "outer_step": self._synced_generation,
                "candidates": self.world_size,
                "included": included,
                "step": job.local_step,
                "lag": lag,
                "checksum": checksum(self._synced),
            },
        )

    def _all_reduce(self, tensor: Tensor) -> None:
        if self.group is not None:
            dist.all_reduce(tensor, group=self.group)

    def _emit(self, event: Event, payload: dict[str, Any]) -> None:
        self._trainer.emit(event, payload)

    # -- lifetime ------------------------------------------------------------------------------

    def close(self, timeout: float = 30.0) -> None:
        """Stop the exchange thread (after the exchange in flight, up to ``timeout`` s), then destroy
        the loop's own groups. Idempotent.

        The thread is always joined before a group goes: a gloo group destroyed (or left to
        interpreter exit) under a thread still inside one of its collectives aborts the process
        ("terminate called without an active exception"). A thread still stuck after ``timeout``
        keeps its groups, and the warning says so.
        """
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(queue.Full):  # an exchange is stuck: the join below says so
            self._jobs.put(None, timeout=timeout)
        self._thread.join(timeout)
        if self._thread.is_alive():
            warnings.warn(
                f"speedtronic: the outer loop's exchange did not finish within {timeout} s; "
                "its process groups are left alive",
                SpeedtronicWarning,
                stacklevel=2,
            )
            return
        groups, self.group, self._control = (self.group, self._control), None, None
        for group in groups:
            if group is not None and dist.is_initialized():
                dist.destroy_process_group(group)
