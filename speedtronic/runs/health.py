"""``run_health``: was a run healthy and fast? Goodput, throughput, MFU, memory and per-step times,
read from a run's records across its restarts (formulas in ``docs/reading-runs.md``)."""

from __future__ import annotations

import functools
import math
import operator
import os
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from speedtronic.runs.reader import RankChoice, Record, as_number, read_records
from speedtronic.runs.roles import Roles

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "DEFAULT_WARMUP_STEPS",
    "PARTS",
    "STRAGGLER_SCORE",
    "RankTimes",
    "RunHealth",
    "Slowdown",
    "Straggler",
    "format_health",
    "format_stragglers",
    "run_health",
    "slowdown",
    "stragglers",
    "sum_in_order",
]

DEFAULT_WARMUP_STEPS = 5
"""Steps left out of ``step_times`` at the start of each segment (compilation, caches, allocator)."""

PARTS = ("productive_s", "startup_s", "restart_s", "checkpoint_s", "eval_s", "data_wait_s", "other_s")
"""The parts the wall time is split into, in the order they are shown."""


@dataclass
class RunHealth:
    """One rank's health figures; ``None`` where the run did not record what a figure needs."""

    run: str
    wall_s: float | None = None
    productive_s: float = 0.0
    startup_s: float = 0.0
    restart_s: float = 0.0
    redone_steps: int = 0
    checkpoint_s: float = 0.0
    eval_s: float = 0.0
    data_wait_s: float = 0.0
    other_s: float = 0.0
    goodput: float | None = None
    steps: int = 0
    tokens_per_s: float | None = None
    samples_per_s: float | None = None
    flops_per_token: float | None = None
    peak_flops: float | None = None
    mfu: float | None = None
    final_loss: float | None = None
    best_loss: float | None = None
    peak_allocated_bytes: float | None = None
    peak_reserved_bytes: float | None = None
    fragmentation_bytes: float | None = None
    alloc_retries: float | None = None
    step_times: list[float] = field(default_factory=list)
    """Per-step wall times (``step_time_s``), steps run again and each segment's warm-up left out."""
    rates: list[float] = field(default_factory=list)
    """Per-record throughput (the role table's first rate key: ``tokens_per_s``), warm-up left out."""

    @property
    def median_step_s(self) -> float | None:
        return _median(self.step_times)

    def as_dict(self) -> dict[str, Any]:
        """Every figure, JSON-ready (the per-step lists left out)."""
        figures = {key: value for key, value in self.__dict__.items() if key not in ("step_times", "rates")}
        figures["median_step_s"] = self.median_step_s
        figures["parts_s"] = {part: getattr(self, part) for part in PARTS}
        return figures


class _Segment:
    """What one segment (one process's ``fit()``) did: its start, its first step, its last record."""

    __slots__ = (
        "data_wait",
        "first_step_start",
        "fit_start",
        "floor",
        "last_step_time",
        "last_time",
        "logged",
        "paused",
        "paused_by_last_step",
        "redone",
        "start",
        "start_step",
        "step_time",
        "steps_new",
    )

    def __init__(self, start: float | None, floor: int = 0) -> None:
        self.start = start
        self.floor = floor
        """The highest step done before this segment: a step at or below it is done again."""
        self.first_step_start: float | None = None
        """When its first step began: its first recorded step's time, less the time of that step and
        of the steps before it in this segment that the cadence did not record (each at that step's
        ``step_time_s``, as ``productive_s`` counts them); never before ``fit_start``."""
        self.fit_start: float | None = None
        """When its ``train_start`` was recorded: no step begins before it."""
        self.start_step: int | None = None
        """The step it resumed from (``train_start``'s ``start_step``), if recorded."""
        self.last_time = start
        self.step_time = self.data_wait = 0.0
        self.logged = 0
        """Logged steps done for the first time."""
        self.steps_new = 0
        """Steps done for the first time, logged or not."""
        self.redone: int | None = None
        """Its latest recorded step done again (at or below ``floor``)."""
        self.last_step_time: float | None = None
        """When its latest ``train_step`` was recorded."""
        self.paused = self.paused_by_last_step = 0.0
        """Its time in evals, checkpoints and steps done again so far, and as of its latest step."""


def _time(record: Record) -> float | None:
    """The record's ``timestamp`` in seconds since the epoch; ``None`` without a readable one."""
    if record.timestamp is None:
        return None
    try:
        return datetime.fromisoformat(record.timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def run_health(
    path: str | os.PathLike[str],
    *,
    rank: RankChoice = "first",
    peak_flops: float | None = None,
    warmup_steps: int = DEFAULT_WARMUP_STEPS,
    roles: Roles | None = None,
) -> RunHealth:
    """The health figures of one rank of the run at ``path`` (``RunError`` if it can't be read).

    ``peak_flops`` overrides the peak the run recorded; ``warmup_steps`` are left out of the per-step
    times at the start of each segment."""
    roles = roles or Roles()
    health = RunHealth(run=str(path))
    segments: list[_Segment] = []
    where: tuple[Any, int] | None = None
    highest = 0
    tokens: float | None = None
    samples: float | None = None
    for record in read_records(path, rank=rank):
        moment = _time(record)
        if (record.source, record.segment) != where:
            where = (record.source, record.segment)
            elapsed = as_number(record.payload.get("elapsed_s"))
            segments.append(_Segment(moment - elapsed if moment is not None and elapsed else moment, highest))
        segment = segments[-1]
        if moment is not None:
            segment.last_time = moment if segment.last_time is None else max(segment.last_time, moment)
        payload = record.payload
        if record.event == "train_start":
            start_step = payload.get("start_step")
            segment.start_step = start_step if type(start_step) is int else segment.start_step
            segment.fit_start = moment if segment.fit_start is None else segment.fit_start
            health.flops_per_token = as_number(payload.get("flops_per_token")) or health.flops_per_token
            health.peak_flops = as_number(payload.get("peak_flops")) or health.peak_flops
        elif record.event == "train_step":
            step = payload.get("step")
            if not isinstance(step, int):
                continue
            duration = as_number(payload.get("step_time_s"))
            began = segment.start_step if segment.start_step is not None else segment.floor
            warm = step - began <= warmup_steps  # the segment's first steps, recorded or not (a cadence)
            if segment.first_step_start is None and moment is not None:
                ran = max(1, step - began)  # this step and those of the segment the cadence left out
                segment.first_step_start = moment - (duration or 0.0) * ran
            loss = _loss(payload, roles)
            if loss is not None:
                health.final_loss = loss
                health.best_loss = loss if health.best_loss is None else min(health.best_loss, loss)
            if step <= segment.floor:  # run again after a resume: time lost to the restart
                before = segment.redone if segment.redone is not None else segment.start_step
                ran = 1 if before is None or before > step else step - before  # the cadence's steps too
                lost = (duration or 0.0) * max(ran, 1)  # a step's second record: its own time
                health.restart_s += lost
                health.redone_steps += ran
                segment.redone = step
                segment.paused += lost
                segment.last_step_time, segment.paused_by_last_step = moment, segment.paused
                continue
            segment.last_step_time, segment.paused_by_last_step = moment, segment.paused
            if step > highest:  # a second record of the same step (a callback's) is no new step
                segment.steps_new += step - highest
                highest = step
            tokens = as_number(payload.get("tokens")) or tokens
            samples = as_number(payload.get("samples")) or samples
            rate = next((as_number(payload[key]) for key in payload if roles.is_rate(key)), None)
            if duration is None:
                if rate is not None and not warm:
                    health.rates.append(rate)
                continue
            segment.logged += 1
            segment.step_time += duration
            segment.data_wait += as_number(payload.get("data_wait_s")) or 0.0
            if not warm:
                health.step_times.append(duration)
                if rate is not None:
                    health.rates.append(rate)
        elif record.event == "checkpoint":
            saved = as_number(payload.get("save_s")) or 0.0
            health.checkpoint_s += saved
            segment.paused += saved
        elif record.event == "eval":
            evaluated = as_number(payload.get("eval_s")) or 0.0
            health.eval_s += evaluated
            segment.paused += evaluated
        elif record.event == "train_end":
            _memory(health, payload)
        _memory_key(health, payload)
    health.steps = highest
    _account(health, segments)
    _throughput(health, tokens, samples, peak_flops)
    return health


def _loss(payload: dict[str, Any], roles: Roles) -> float | None:
    ranked = [(rank, key) for key in payload if (rank := roles.loss_rank(key)) is not None]
    if not ranked:
        return None
    value = as_number(payload[min(ranked)[1]])
    return value if value is not None and math.isfinite(value) else None


def _account(health: RunHealth, segments: list[_Segment]) -> None:
    """Split the wall time into its parts, segment by segment."""
    timed = [segment for segment in segments if segment.start is not None and segment.last_time is not None]
    if not timed:
        return
    first, last = timed[0], timed[-1]
    assert first.start is not None
    assert last.last_time is not None
    health.wall_s = last.last_time - first.start
    previous_end: float | None = None
    for segment in timed:
        assert segment.start is not None
        assert segment.last_time is not None
        began = segment.first_step_start if segment.first_step_start is not None else segment.last_time
        began = max(began, segment.fit_start or segment.start, segment.start)
        if previous_end is None:
            health.startup_s += began - segment.start
        else:
            health.restart_s += began - previous_end
        previous_end = segment.last_time
        if segment.logged:
            scale = segment.steps_new / segment.logged  # steps the cadence did not log count at the mean
            if segment.last_step_time is not None:
                # ... but never longer than the segment's steps had: logged steps slower than the others
                # (a DiLoCo boundary at each) would make goodput pass 100%.
                room = segment.last_step_time - began - segment.paused_by_last_step
                if 0.0 < room < segment.step_time * scale:
                    scale = room / segment.step_time
            health.data_wait_s += segment.data_wait * scale
            health.productive_s += (segment.step_time - segment.data_wait) * scale
    accounted = sum(getattr(health, part) for part in PARTS if part != "other_s")
    health.other_s = health.wall_s - accounted
    stepped = any(segment.logged for segment in segments)  # a run without step_time_s has no goodput
    health.goodput = health.productive_s / health.wall_s if stepped and health.wall_s > 0 else None


def _throughput(health: RunHealth, tokens: float | None, samples: float | None, peak: float | None) -> None:
    """Tokens and samples per second of step time (median recorded rate where no step was timed), and MFU."""
    busy = health.productive_s + health.data_wait_s
    if busy > 0 and tokens is not None:
        health.tokens_per_s = tokens / busy
    if busy > 0 and samples is not None:
        health.samples_per_s = samples / busy
    if health.tokens_per_s is None:
        health.tokens_per_s = _median(health.rates)
    health.peak_flops = peak if peak is not None else health.peak_flops
    if health.flops_per_token and health.peak_flops and health.tokens_per_s is not None:
        health.mfu = health.flops_per_token * health.tokens_per_s / health.peak_flops


_MEMORY_KEYS = ("peak_allocated_bytes", "peak_reserved_bytes", "alloc_retries")


def _memory(health: RunHealth, payload: dict[str, Any]) -> None:
    """The device's peaks as ``train_end`` records them (the largest over the segments)."""
    for key in _MEMORY_KEYS:
        value = as_number(payload.get(key))
        if value is not None:
            held = getattr(health, key)
            setattr(health, key, value if held is None else max(held, value))
    if health.peak_allocated_bytes is not None and health.peak_reserved_bytes is not None:
        health.fragmentation_bytes = health.peak_reserved_bytes - health.peak_allocated_bytes


def _memory_key(health: RunHealth, payload: dict[str, Any]) -> None:
    """``memory_bytes`` (allocated now, added by the logger on an accelerator): a floor for the peak."""
    value = as_number(payload.get("memory_bytes"))
    if value is not None and (health.peak_allocated_bytes is None or value > health.peak_allocated_bytes):
        health.peak_allocated_bytes = value


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def _share(part: float, whole: float | None) -> str:
    return "" if not whole else f" ({100 * part / whole:.1f}%)"


def format_health(health: RunHealth) -> str:
    """The figures as a few aligned lines for the terminal."""
    wall = health.wall_s
    lines = [f"health of {health.run}"]
    lines.append(f"  wall time      {_seconds(wall)}")
    goodput = "-" if health.goodput is None else f"{100 * health.goodput:.1f}%"
    lines.append(f"  goodput        {goodput}")
    for part in PARTS:
        value = getattr(health, part)
        lines.append(f"    {part.removesuffix('_s'):<12} {_seconds(value)}{_share(value, wall)}")
    if health.redone_steps:
        lines.append(f"    ({health.redone_steps} steps run again after a resume, in restart)")
    rate = "-" if health.tokens_per_s is None else f"{health.tokens_per_s:,.1f}"
    lines.append(f"  tokens/s       {rate}")
    median = health.median_step_s
    lines.append(f"  step time      {'-' if median is None else f'{1000 * median:.3f} ms'} (median)")
    if health.mfu is not None:
        lines.append(
            f"  MFU            {100 * health.mfu:.2f}% ({health.flops_per_token:,.0f} FLOPs/token, "
            f"peak {health.peak_flops:.3g} FLOP/s)"
        )
    else:
        lines.append("  MFU            - (no peak FLOP/s recorded or given)")
    if health.peak_allocated_bytes is not None:
        memory = f"  memory         peak allocated {health.peak_allocated_bytes / 2**20:,.1f} MiB"
        if health.peak_reserved_bytes is not None:
            memory += f", reserved {health.peak_reserved_bytes / 2**20:,.1f} MiB"
        if health.fragmentation_bytes is not None:
            memory += f", fragmentation {health.fragmentation_bytes / 2**20:,.1f} MiB"
        if health.alloc_retries is not None:
            memory += f", allocator retries {health.alloc_retries:.0f}"
        lines.append(memory)
    return "\n".join(lines)


BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0


@dataclass(frozen=True)
class Slowdown:
    """How much worse B is than A on one figure: ``ratio`` > 1 is worse (B's step time over A's, or
    A's tokens/s over B's), with its 95% bootstrap interval ``low``-``high``."""

    figure: str
    ratio: float
    low: float
    high: float

    def regressed(self, limit: float) -> bool:
        """Whether B is worse by more than ``limit`` (0.05: 5%) at 95% confidence: the interval's
        lower end is above ``1 + limit``."""
        return self.low > 1 + limit


def slowdown(
    figure: str,
    baseline: list[float],
    candidate: list[float],
    *,
    higher_is_better: bool = False,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Slowdown | None:
    """The ratio of the candidate's mean to the baseline's (inverted for a figure where more is
    better), with a 95% percentile-bootstrap interval over the per-step values (each run resampled
    on its own, ``random.Random(seed)``: the same runs give the same interval); ``None`` when either
    run has fewer than 2 values."""
    if len(baseline) < 2 or len(candidate) < 2:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        a = math.fsum(rng.choices(baseline, k=len(baseline))) / len(baseline)
        b = math.fsum(rng.choices(candidate, k=len(candidate))) / len(candidate)
        ratios.append(_ratio(a, b, higher_is_better))
    ratios.sort()
    point = _ratio(
        math.fsum(baseline) / len(baseline), math.fsum(candidate) / len(candidate), higher_is_better
    )
    return Slowdown(figure, point, ratios[int(0.025 * resamples)], ratios[int(0.975 * resamples) - 1])


def _ratio(a: float, b: float, higher_is_better: bool) -> float:
    numerator, denominator = (a, b) if higher_is_better else (b, a)
    return numerator / denominator if denominator > 0 else math.inf


def _reduce_sum(values: Sequence[float], start: float) -> float:
    return functools.reduce(operator.add, values, start)


sum_in_order: Callable[[Sequence[float], float], float] = sum if sys.version_info < (3, 12) else _reduce_sum
"""``start`` plus each of ``values`` in turn, as ``+=`` one by one would give (a fold in bulk gives
what a fold record by record gives, to the last bit). Python 3.12's ``sum`` of floats compensates
for rounding, so from 3.12 on it is ``functools.reduce`` (4 to 5 times slower than 3.11's ``sum``)."""


STRAGGLER_SCORE = 0.05
"""A rank is named when the others wait for it, on average, at least this share of a step."""


@dataclass(frozen=True)
class Straggler:
    """A rank that holds the others back: it waits least at the sync point.

    ``score`` = (the ranks' median sync wait - this rank's) / the ranks' median step time, over the
    steps after each segment's warm-up; ``data_wait_s`` and ``compute_s`` are its means, beside the
    ranks' medians (``median_data_wait_s``, ``median_compute_s``): the larger gap names the cause."""

    rank: int
    score: float
    sync_wait_s: float
    data_wait_s: float
    compute_s: float
    median_sync_wait_s: float
    median_data_wait_s: float
    median_compute_s: float

    @property
    def cause(self) -> str:
        data = self.data_wait_s - self.median_data_wait_s
        compute = self.compute_s - self.median_compute_s
        return "data loading" if data > compute else "compute"

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "cause": self.cause}


def stragglers(
    path: str | os.PathLike[str],
    *,
    warmup_steps: int = DEFAULT_WARMUP_STEPS,
    threshold: float = STRAGGLER_SCORE,
) -> list[Straggler]:
    """The ranks of the run at ``path`` that hold the others back, most first (``[]`` for a balanced
    run, and for a run whose steps have no ``sync_wait_s``). Under a synchronous all-reduce every
    rank's step takes as long as the slowest's, so step times can't tell the culprit; it is the rank
    that waits least at the sync (TraceML's finding). Memory: a few sums per rank.

    ``summarize_run(..., stragglers=True)`` gathers the same sums in its one pass over the run
    (``RunSummary.rank_times``)."""
    times = RankTimes(warmup_steps)
    for record in read_records(path, rank="all"):
        if record.event == "train_step":
            times.add_step(record.payload, record.rank, (record.source, record.segment))
    return times.stragglers(threshold)


class RankTimes:
    """Per rank, the sums ``stragglers`` ranks by: the steps with a ``sync_wait_s`` after each
    segment's first ``warmup_steps`` (the warm-up after each (re)start), and their sync wait, data
    wait, compute and step time. Fed step by step (``add_step``) or a rank's steps at a time
    (``add_steps``); the sums of a run read in pieces are merged in order (``merge``). Memory: a few
    sums per rank, and the warm-up steps of each rank's first segment (a piece's first segment may go
    on from the piece before it: which of them are warm-up is known only then)."""

    __slots__ = ("_at", "_held", "sums", "warmup_steps")

    def __init__(self, warmup_steps: int = DEFAULT_WARMUP_STEPS) -> None:
        self.warmup_steps = warmup_steps
        self.sums: dict[int, list[float]] = {}
        """rank -> [steps, sync wait, data wait, compute, step time] over the steps after the warm-up."""
        self._at: dict[int, list[Any]] = {}
        """rank -> [its segment now, its steps in it so far, its first segment]"""
        self._held: dict[int, list[tuple[float, float, float, float]]] = {}
        """rank -> the warm-up steps of its first segment: (sync wait, data wait, compute, step time)."""

    def add_step(self, payload: dict[str, Any], rank: int, segment: Any) -> None:
        """One ``train_step``'s payload, of ``rank``, in ``segment`` (anything that tells segments
        apart); a step without a numeric ``sync_wait_s`` is left out."""
        wait = as_number(payload.get("sync_wait_s"))
        if wait is None:
            return
        at = self._position(rank, segment)
        at[1] += 1
        data = as_number(payload.get("data_wait_s")) or 0.0
        compute = as_number(payload.get("compute_s")) or 0.0
        step = as_number(payload.get("step_time_s")) or 0.0
        if at[1] <= self.warmup_steps:
            if at[0] == at[2]:
                self._held[rank].append((wait, data, compute, step))
            return
        row = self.sums.get(rank)
        if row is None:
            row = self.sums[rank] = [0.0, 0.0, 0.0, 0.0, 0.0]
        row[0] += 1
        row[1] += wait
        row[2] += data
        row[3] += compute
        row[4] += step

    def _position(self, rank: int, segment: Any) -> list[Any]:
        """``rank``'s ``[segment, steps in it so far, first segment]``, moved to ``segment``."""
        at = self._at.get(rank)
        if at is None:
            at = self._at[rank] = [segment, 0, segment]
            self._held[rank] = []
        elif at[0] != segment:
            at[0], at[1] = segment, 0
        return at

    def add_steps(self, rank: int, segment: Any, columns: Sequence[tuple[float, ...]]) -> None:
        """``add_step`` of consecutive steps of ``rank`` in ``segment``, given as the columns of their
        sync wait, data wait, compute and step time, every value a float (what ``add_step`` would
        read): the same sums, in the same order."""
        waits = columns[0]
        at = self._position(rank, segment)
        skip = max(0, self.warmup_steps - at[1])
        at[1] += len(waits)
        if skip:
            if at[0] == at[2]:
                self._held[rank] += zip(*(column[:skip] for column in columns), strict=True)
            if skip >= len(waits):
                return
            columns = [column[skip:] for column in columns]
        row = self.sums.get(rank)
        if row is None:
            row = self.sums[rank] = [0.0, 0.0, 0.0, 0.0, 0.0]
        row[0] += len(columns[0])
        for index, column in enumerate(columns, 1):
            row[index] = sum_in_order(column, row[index])

    def merge(self, later: RankTimes, segment: Callable[[Any], Any]) -> None:
        """Add the sums of ``later``, read after this one's records; ``segment`` maps its segments to
        this one's (a piece's first segment may be the one this one's last record was in)."""
        for rank in dict.fromkeys([*later.sums, *later._at]):  # new ranks' sums in the order met
            now, count, first = later._at[rank]
            now, first = segment(now), segment(first)
            at = self._at.get(rank)
            before = at[1] if at is not None and at[0] == first else 0
            row = self.sums.get(rank)
            for index, values in enumerate(later._held.get(rank, ()), before + 1):
                if index > self.warmup_steps:  # no warm-up after all: the segment went on
                    if row is None:
                        row = self.sums[rank] = [0.0, 0.0, 0.0, 0.0, 0.0]
                    row[0] += 1
                    for column, value in enumerate(values, 1):
                        row[column] += value
            more = later.sums.get(rank)
            if more is not None:
                if row is None:
                    self.sums[rank] = list(more)
                else:
                    for column, value in enumerate(more):
                        row[column] += value
            if at is None:
                self._at[rank] = [now, count + before if now == first else count, first]
                self._held[rank] = list(later._held.get(rank, ()))
            else:
                at[0], at[1] = now, count + before if now == first else count

    def stragglers(self, threshold: float = STRAGGLER_SCORE) -> list[Straggler]:
        """The ranks that hold the others back, most first (``stragglers``)."""
        sums = self.sums
        if len(sums) < 2:
            return []
        means = {rank: [value / row[0] for value in row[1:]] for rank, row in sums.items()}
        medians = [_median([mean[index] for mean in means.values()]) or 0.0 for index in range(4)]
        step = medians[3]
        if step <= 0:
            return []
        found = [
            Straggler(
                rank,
                (medians[0] - mean[0]) / step,
                mean[0],
                mean[1],
                mean[2],
                medians[0],
                medians[1],
                medians[2],
            )
            for rank, mean in means.items()
            if (medians[0] - mean[0]) / step >= threshold
        ]
        return sorted(found, key=lambda straggler: -straggler.score)


def format_stragglers(found: list[Straggler], timed_ranks: int | None = None) -> str:
    """The ranks ``found`` as lines; ``timed_ranks``: how many ranks had steps to rank (``RankTimes.sums``),
    so that a run with nothing to rank is not called balanced."""
    if timed_ranks is not None and timed_ranks < 2:
        return (
            "stragglers     - (nothing to rank: sync_wait_s after each segment's warm-up from "
            f"{timed_ranks} rank(s), 2 needed)"
        )
    if not found:
        return "stragglers     none (no rank makes the others wait)"
    lines = [f"stragglers     {len(found)} rank(s) hold the others back (they wait least at the sync):"]
    for item in found:
        lines.append(
            f"  rank {item.rank}: others wait {100 * item.score:.1f}% of a step for it; its sync wait "
            f"{1000 * item.sync_wait_s:.2f} ms (median {1000 * item.median_sync_wait_s:.2f}), data wait "
            f"{1000 * item.data_wait_s:.2f} ms (median {1000 * item.median_data_wait_s:.2f}), compute "
            f"{1000 * item.compute_s:.2f} ms (median {1000 * item.median_compute_s:.2f}): {item.cause}"
        )
    return "\n".join(lines)
