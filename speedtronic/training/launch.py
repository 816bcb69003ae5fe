"""The process group of a run launched by ``torchrun`` (or SLURM): set up, agreed on, torn down.
Importing this module does not import torch."""

from __future__ import annotations

import copy
import json
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from speedtronic.distributed import RankInfo
from speedtronic.training import rundir as _rundir
from speedtronic.training.config import ConfigError

__all__ = [
    "LAUNCH_NAME",
    "RANKS_NAME",
    "Node",
    "Start",
    "StartError",
    "agree_on_start",
    "agreement_group",
    "decide",
    "destroy_process_group",
    "device_for_rank",
    "init_process_group",
    "recorded_ranks",
    "shutdown",
    "this_node",
    "training_group",
    "write_ranks",
]

T = TypeVar("T")

LAUNCH_NAME = ".speedtronic-launch"
"""Rank 0 writes this launch's id there: a rank that reads the same id shares rank 0's directory."""
RANKS_NAME = "ranks.json"
"""Which ranks (on which node) wrote a directory's files at the last launch."""


class StartError(ConfigError):
    """The ranks could not start (or resume) the run together: one line naming the node and rank."""

    def __init__(self, problem: str) -> None:
        super().__init__("", "", problem)


@dataclass(frozen=True)
class Node:
    """Where a rank runs: its host, the launcher's node rank (``GROUP_RANK``; SLURM's node id) and its
    local rank. Printed as ``rank 1 (node 1, host h, local rank 0)``."""

    rank: int
    host: str
    node_rank: int | None
    local_rank: int

    def __str__(self) -> str:
        node = f"node {self.node_rank}, " if self.node_rank is not None else ""
        return f"rank {self.rank} ({node}host {self.host}, local rank {self.local_rank})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "node_rank": self.node_rank,
            "host": self.host,
            "local_rank": self.local_rank,
        }


def this_node(rank: RankInfo, environ: Mapping[str, str] | None = None) -> Node:
    """This process's ``Node``: ``GROUP_RANK`` (torchrun), else ``SLURM_NODEID``, else unknown."""
    env = os.environ if environ is None else environ
    text = env.get("GROUP_RANK", env.get("SLURM_NODEID"))
    node_rank = int(text) if text is not None and text.isdigit() else None
    return Node(rank.rank, socket.gethostname(), node_rank, rank.local_rank)


@dataclass(frozen=True)
class Start:
    """What the ranks agreed on at start: this rank's config (rank 0's, in this node's run directory),
    whether this rank records it there, and the notes rank 0 shows."""

    config: dict[str, Any]
    writes_config: bool
    """This rank is its directory's writer of ``config.yaml`` and ``ranks.json``: rank 0, or the lowest
    rank of a directory rank 0 does not share."""
    directory_ranks: tuple[dict[str, Any], ...]
    """The ranks writing into this rank's directory, each as ``Node.as_dict()`` (``ranks.json``)."""
    launch: str
    notes: tuple[str, ...] = ()
    """Warnings for this rank to show: on rank 0, a rank that lacks its newest checkpoint; on the
    writer of a node-local directory named after rank 0's, that it is so named."""


def device_for_rank(device: Any, rank: RankInfo) -> Any:
    """A bare CUDA device becomes ``cuda:LOCAL_RANK`` (made current) in a multi-process job."""
    import torch

    if rank.distributed and device.type == "cuda":
        device = torch.device("cuda", rank.local_rank)
        torch.cuda.set_device(device)
    return device


def init_process_group(rank: RankInfo, device: Any, timeout_s: float | None = None) -> bool:
    """Initialise the default group for a multi-process job (nccl on CUDA, else gloo), from the
    launcher's environment. ``True`` if this call initialised it, so the caller destroys it.

    ``timeout_s`` bounds the wait for the other ranks (and the default group's collectives); a peer
    that never arrives is a ``StartError`` naming this rank.
    """
    import torch.distributed as dist

    if not rank.distributed or dist.is_initialized():
        return False
    backend = "nccl" if device.type == "cuda" else "gloo"
    extra: dict[str, Any] = {} if timeout_s is None else {"timeout": timedelta(seconds=timeout_s)}
    node = this_node(rank)
    _bounded(
        node,
        "the process group",
        timeout_s,
        lambda: dist.init_process_group(backend, device_id=device if backend == "nccl" else None, **extra),
    )
    return True


def agreement_group(rank: RankInfo, timeout_s: float) -> Any:
    """A gloo group over every rank whose collectives give up after ``timeout_s``: the start and the
    resume agreement run on it (picklable objects travel on the CPU, whatever the training backend)."""
    import torch.distributed as dist

    return _bounded(
        this_node(rank),
        "a gloo group for the start",
        timeout_s,
        lambda: dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s)),
    )


def training_group() -> Any:
    """A group over every rank with torch's default timeout (30 min gloo, 10 min nccl) for training's
    own collectives (DDP's all-reduce), which may legitimately wait long on a slow rank."""
    import torch.distributed as dist

    return dist.new_group()


def _bounded(node: Node, what: str, timeout_s: float | None, call: Callable[[], T]) -> T:
    """``call()``; a collective that times out or loses a peer is a one-line ``StartError``."""
    try:
        return call()
    except RuntimeError as error:  # torch.distributed's errors (timeouts, a peer gone) subclass it
        within = f" within train.dist_timeout_s={timeout_s:g} s" if timeout_s is not None else ""
        raise StartError(
            f"{node}: the ranks did not agree on {what}{within} ({type(error).__name__}: "
            f"{_first_line(error)}); a peer did not start or failed: see its log"
        ) from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def agree_on_start(
    config: dict[str, Any],
    rank: RankInfo,
    *,
    group: Any,
    timeout_s: float,
    resolve: Callable[[dict[str, Any], str], dict[str, Any]],
) -> Start:
    """Agree on rank 0's config, run directory state and checkpoints; every rank raises the same
    ``StartError`` (one line naming the node and rank) when they can't start or resume together.

    Rank 0 claims its run directory (``rundir.claim``) and sends its config; every rank then uses its
    own run directory (its config's ``run_dir``, else rank 0's path) with rank 0's config, claims it,
    and reports what it holds. ``resolve(config, placeholder)`` moves the config's paths from rank 0's
    run directory (``placeholder``) to this rank's.
    """
    import torch.distributed as dist

    node = this_node(rank)
    launch = uuid.uuid4().hex
    lead: dict[str, Any] = {"config": None, "error": None, "launch": launch, "node": str(node)}
    if rank.rank == 0:
        try:
            path = _rundir.claim(config["run_dir"], resume=config["train"]["resume"])
            _rundir.write_text(path / LAUNCH_NAME, launch)
        except _rundir.RunDirError as error:
            lead["error"] = str(error)
        except OSError as error:
            lead["error"] = f"{error.filename}: can't write: {error.strerror or error}"
        else:
            lead["config"] = dict(config, run_dir=str(path))
            if config["run_dir"] is None:
                lead["config"] = resolve(lead["config"], "{run_dir}")
    chosen = [lead]
    _bounded(
        node, "rank 0's config", timeout_s, lambda: dist.broadcast_object_list(chosen, src=0, group=group)
    )
    lead = chosen[0]
    if lead["error"] is not None:
        raise StartError(f"{lead['node']}: {lead['error']}")
    leader: dict[str, Any] = lead["config"]
    own = config["run_dir"] if rank.rank and config["run_dir"] is not None else leader["run_dir"]
    mine = _facts(node, Path(own), leader["train"]["resume"], lead["launch"], claim=rank.rank != 0)
    facts: list[Any] = [None] * rank.world_size
    _bounded(
        node,
        "the run directories and checkpoints",
        timeout_s,
        lambda: dist.all_gather_object(facts, mine, group=group),
    )
    notes = decide(facts, resume=leader["train"]["resume"])
    together = _directory_of(facts, rank.rank)
    if rank.rank and config["run_dir"] is None and not mine["shared"] and rank.rank == min(together):
        notes = [
            f"{node}: no --run-dir on this node: writing to {mine['run_dir']}, the path rank 0 uses, "
            "on this node's own file system"
        ]
    elif rank.rank:
        notes = []
    ours = copy.deepcopy(leader)  # plain data, as broadcast: this rank's own to change
    if own != leader["run_dir"]:  # this node's own run directory: the config's paths move there
        ours["run_dir"] = own
        ours = resolve(ours, leader["run_dir"])
    return Start(
        config=ours,
        writes_config=rank.rank == min(together),
        directory_ranks=tuple(facts[r]["node"] for r in together),
        launch=lead["launch"],
        notes=tuple(notes),
    )


def _facts(node: Node, path: Path, resume: bool, launch: str, *, claim: bool) -> dict[str, Any]:
    """What this rank's run directory holds, for the others to see."""
    error = None
    if claim:
        try:
            _rundir.claim(str(path), resume=resume)
        except _rundir.RunDirError as problem:
            error = str(problem)
    return {
        "node": node.as_dict(),
        "run_dir": os.path.abspath(path),
        "error": error,
        "shared": _read(path / LAUNCH_NAME) == launch,
        "holds_run": _rundir.holds_run(path),
        "checkpoints": sorted(_rundir.rank_checkpoints(path / _rundir.CHECKPOINTS, node.rank)),
        "recorded": recorded_ranks(path),
    }


def _read(path: Path) -> str | None:
    try:
        return _rundir.read_text(path)
    except (OSError, ValueError):  # ValueError: not UTF-8, or not a plain file (rundir.RunDirError)
        return None


def recorded_ranks(path: Path) -> list[int] | None:
    """The ranks ``ranks.json`` says wrote into ``path`` at the last launch, or ``None``."""
    text = _read(path / RANKS_NAME)
    try:
        ranks = json.loads(text)["ranks"] if text is not None else None
        return sorted(int(entry["rank"]) for entry in ranks) if ranks is not None else None
    except (ValueError, KeyError, TypeError):
        return None


def write_ranks(run_dir: Path, start: Start, world_size: int) -> None:
    """Record which ranks (on which node) write into ``run_dir``: a later resume checks it."""
    record = {"launch": start.launch, "world_size": world_size, "ranks": list(start.directory_ranks)}
    try:
        _rundir.write_text(run_dir / RANKS_NAME, json.dumps(record, indent=1) + "\n")
    except OSError as error:
        raise _rundir.RunDirError(run_dir / RANKS_NAME, f"can't write: {error.strerror or error}") from None


def _directory_of(facts: list[dict[str, Any]], rank: int) -> list[int]:
    """The ranks writing into the same directory as ``rank``: rank 0's sharers, or the same host's
    ranks with the same path."""
    key = _key(facts[rank])
    return [index for index, fact in enumerate(facts) if _key(fact) == key]


def _key(fact: dict[str, Any]) -> tuple[str, ...]:
    return _SHARED if fact["shared"] else (fact["node"]["host"], fact["run_dir"])


_SHARED = ("rank 0's directory",)


def _shown(fact: dict[str, Any]) -> str:
    return str(Node(**fact["node"]))


def decide(facts: list[dict[str, Any]], *, resume: bool) -> list[str]:
    """Whether the ranks can start (or resume) together from what each reported: raises the one
    ``StartError`` every rank raises, else returns the notes for rank 0 (empty when all is well)."""
    for fact in facts:
        if fact["error"] is not None:
            raise StartError(f"{_shown(fact)}: {fact['error']}")
    if not resume:
        return []
    directories = {_key(fact): _directory_of(facts, index) for index, fact in enumerate(facts)}
    for key, ranks in directories.items():
        first = facts[ranks[0]]
        if key == _SHARED:  # any rank may sit anywhere in rank 0's directory; moves show in the others
            continue
        recorded = first["recorded"]
        if first["holds_run"] and recorded is not None and recorded != ranks:
            raise StartError(
                f"--resume: {_shown(first)}: {first['run_dir']} holds the files of rank(s) "
                f"{_ranks(recorded)} from the last launch, and now would get rank(s) {_ranks(ranks)}: the "
                "ranks moved between nodes (c10d rendezvous numbers nodes anew at each launch). Pin each "
                "node's rank with static rendezvous (torchrun --node-rank N --master-addr HOST "
                "--master-port PORT), or keep the run directory on a shared file system"
            )
    held = [set(fact["checkpoints"]) for fact in facts]
    every, common = set().union(*held), set.intersection(*held)
    lead_steps = held[0]
    if every and not common:
        step = max(lead_steps or every)
        missing = next(fact for fact, steps in zip(facts, held, strict=True) if step not in steps)
        raise StartError(f"--resume: {_missing(missing, step)}: {_how(facts, step)}")
    if common and lead_steps and max(common) < max(lead_steps):
        step = max(lead_steps)
        missing = next(fact for fact, steps in zip(facts, held, strict=True) if step not in steps)
        return [
            f"--resume: {_missing(missing, step)}; every rank resumes from step {max(common)}, the "
            "newest all of them hold"
        ]
    if not every:
        holding = [ranks for ranks in directories.values() if facts[ranks[0]]["holds_run"]]
        empty = [ranks for ranks in directories.values() if not facts[ranks[0]]["holds_run"]]
        if holding and empty:
            lacking, other = facts[empty[0][0]], facts[holding[0][0]]
            raise StartError(
                f"--resume: {_shown(lacking)}: {lacking['run_dir']} holds no run, while "
                f"{_shown(other)}'s {other['run_dir']} does: give each node the run directory it wrote "
                "(--run-dir), with the node ranks it had"
            )
    return []


def _missing(fact: dict[str, Any], step: int) -> str:
    path = Path(fact["run_dir"]) / _rundir.CHECKPOINTS / _rundir.checkpoint_name(step, fact["node"]["rank"])
    return f"{_shown(fact)} has no checkpoint of step {step}: missing {path}"


def _how(facts: list[dict[str, Any]], step: int) -> str:
    holders = [fact["node"]["rank"] for fact in facts if step in fact["checkpoints"]]
    return (
        f"rank(s) {_ranks(holders)} hold it. Start every node with the run directory and node rank it "
        "had (static rendezvous pins node ranks), or keep the run directory on a shared file system"
    )


def _ranks(ranks: list[int]) -> str:
    shown = ", ".join(str(rank) for rank in ranks[:8])
    return shown + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")


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
