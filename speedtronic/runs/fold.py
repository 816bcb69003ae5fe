"""``RunSummary``: a run's records folded into its figures, in constant memory."""

from __future__ import annotations

import itertools
import math
import operator
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from math import isfinite
from typing import Any

from speedtronic.events import level_for
from speedtronic.record import NOTE_KEY, non_finite_text
from speedtronic.runs.alert_records import RecordedAlerts
from speedtronic.runs.health import RankTimes, sum_in_order
from speedtronic.runs.reader import Record, Skipped, as_number
from speedtronic.runs.roles import Roles, eval_split

__all__ = ["RateStats", "RunSummary", "SeriesStats"]

_STEP_BITS = 1 << 27
"""Steps remembered one bit each (16 MiB at most) to count a step recorded twice once."""


@dataclass
class RateStats:
    """Mean and last value of one throughput rate; non-finite values are left out of both."""

    total: float = 0.0
    count: int = 0
    last: float = math.nan

    def add(self, value: float) -> None:
        if math.isfinite(value):
            self.total += value
            self.count += 1
            self.last = value

    def merge(self, later: RateStats) -> None:
        """Add the values of ``later``, read after this one's."""
        self.total += later.total
        self.count += later.count
        self.last = later.last if later.count else self.last

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan


@dataclass
class SeriesStats:
    """First, last and best (lowest finite) value of one loss series, by record order; non-finite
    values are counted, never best. ``seen_at`` is the record it was first met in (the run's loss is
    the loss key met first), ``rank`` how preferred its key is among those of one record."""

    first: float
    last: float
    last_step: int | None
    best: float | None = None
    best_step: int | None = None
    non_finite: int = 0
    seen_at: int = 0
    rank: int = 0

    def add(self, value: float, step: int | None) -> None:
        self.last, self.last_step = value, step
        if not math.isfinite(value):
            self.non_finite += 1
        elif self.best is None or value < self.best:
            self.best, self.best_step = value, step

    def update(self, later: SeriesStats) -> None:
        self.last, self.last_step = later.last, later.last_step
        self.non_finite += later.non_finite
        if later.best is not None and (self.best is None or later.best < self.best):
            self.best, self.best_step = later.best, later.best_step


def _stats(value: float, step: int | None, seen_at: int = 0, rank: int = 0) -> SeriesStats:
    stats = SeriesStats(value, value, step, seen_at=seen_at, rank=rank)
    if math.isfinite(value):
        stats.best, stats.best_step = value, step
    else:
        stats.non_finite = 1
    return stats


_Fold = Callable[["RunSummary", Record], None]

_OTHER, _LOSS, _LR, _RATE, _EVAL = range(5)
"""What a numeric key is, by ``Roles``: nothing the summary reads, the loss, a learning rate, a
throughput rate, a held-out loss."""

_Plan = list[tuple[str, int, int]]
"""What ``RunSummary._fold_step`` reads of a payload: each key with a role, the role, and for a loss
how preferred its key is (``RunSummary._plan``)."""

_Columns = tuple[
    _Plan, tuple[int, ...], tuple[float, ...], list[tuple[float, ...]], dict[str, tuple[Any, ...]]
]
"""What ``RunSummary._add_steps`` folds in bulk: the plan, the steps, ``elapsed_s``, the values of
each of the plan's keys, and every key's values."""

_TIMES = ("data_wait_s", "compute_s", "step_time_s")
"""The timing keys ``RankTimes`` sums beside ``sync_wait_s``."""

_INT, _FLOAT = frozenset({int}), frozenset({float})

_Keeps = Callable[[int], bool] | None
"""Which ranks' records a fold takes (``RankFilter.keeps``); ``None``: every rank."""

_EVENT = operator.attrgetter("event")
_PAYLOAD_RANK = operator.attrgetter("payload", "rank")

_STEP_BATCH = 256
"""The most consecutive ``train_step`` records ``RunSummary.add_records`` folds at once, as their
payloads and ranks. Few enough that what it holds (three objects a step) stays under the cyclic garbage
collector's first threshold (700 objects): objects that outlived collections would be looked through
again and again. (Holding the records, their notes' dicts and lists with them, would pass it.)"""


_NOT_PAYLOAD = frozenset(("event", "timestamp", NOTE_KEY))
"""The fields of a record that are not its payload (``speedtronic.runs.reader.Record``)."""


@dataclass
class RunSummary:
    """What one run did, as ``summarize_run`` returns it: built record by record with ``add`` over each
    piece of the run, the pieces merged in order with ``update``. ``elapsed_s`` and ``steps_recorded``
    need every piece (segments and steps cross them): ``summarize_run`` sets them once all are in."""

    run: str
    roles: Roles = field(default_factory=Roles)
    """Which keys are the loss, the learning rates and the rates (``speedtronic.runs.roles``)."""
    files: list[str] = field(default_factory=list)
    records: int = 0
    events: Counter[str] = field(default_factory=Counter)
    step_min: int | None = None
    step_max: int | None = None
    target_step: int | None = None
    loss_first: float | None = None
    loss_last: float | None = None
    loss_best: float | None = None
    loss_best_step: int | None = None
    non_finite_losses: int = 0
    loss_key: str | None = None
    """The key read as the loss (``loss``, ``train_loss_step``, ...); ``None`` when no record had one."""
    lrs: dict[str, float] = field(default_factory=dict)
    """The last value of each learning rate (``lr``, ``learning_rate``, ``lr-SGD/pg1``, ...)."""
    evals: dict[str, SeriesStats] = field(default_factory=dict)
    """The held-out loss of each split (``eval``, ``val``, ``test``, ...), in the order first met."""
    peaks: dict[str, float] = field(default_factory=dict)
    """The largest value of each ``system`` record's ``*_bytes`` key (``rss_bytes``,
    ``gpu0_memory_used_bytes``, ...): peak memory; capacities (``*_total_bytes``) are left out."""
    utilisation: dict[str, RateStats] = field(default_factory=dict)
    """The mean of each ``system`` record's ``*_percent`` key (``cpu_percent``, ``gpu0_util_percent``)."""
    end_rates: dict[str, float] = field(default_factory=dict)
    """Throughput rates only ``train_end`` gave (Hugging Face's ``train_samples_per_second``)."""
    eval_loss_last: float | None = None
    """The held-out loss of the first split met that is not ``test``: its last value."""
    eval_loss_last_step: int | None = None
    eval_loss_best: float | None = None
    eval_loss_best_step: int | None = None
    rates: dict[str, RateStats] = field(default_factory=dict)
    elapsed_s: float | None = None
    """Seconds over every segment of the run."""
    segments: int = 0
    """The most ``train_start`` records of one rank: 1 for a run never resumed, however many ranks."""
    steps_recorded: int = 0
    """Distinct steps with a ``train_step`` record (a step recorded again after a restart counts once)."""
    checkpoints: int = 0
    last_checkpoint: dict[str, Any] | None = None
    finished: bool = False
    final_loss: float | None = None
    status: str | None = None
    """The last ``train_end``'s ``status`` (``completed``/``interrupted``/``failed``); ``None`` before it."""
    error: str | None = None
    """The last ``train_end``'s ``error``: why it failed or was interrupted."""
    ends: dict[int, tuple[str | None, str | None] | None] = field(default_factory=dict)
    """How each rank's last segment ended: its ``train_end``'s ``(status, error)``, ``None`` for one
    with no ``train_end`` after its ``train_start`` (killed); ``finished``/``status``/``error`` are those
    of the rank read last."""
    warnings: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    hook_failures: dict[str, int] = field(default_factory=dict)
    """Failures per hook, added up over the run's segments and ranks (each logger counts its own)."""
    undelivered: int = 0
    """Events that never reached the hooks (background delivery timed out at close)."""
    alerts: RecordedAlerts = field(default_factory=RecordedAlerts)
    """The run's ``alert`` records per rank and rule (``speedtronic.runs.alert_records``)."""
    skipped: Skipped = field(default_factory=Skipped)
    rank_times: RankTimes | None = None
    """Each rank's step times, for ``RankTimes.stragglers``: gathered when ``summarize_run`` is asked
    (``stragglers=True``), else ``None``."""
    _read: int = field(default=0, repr=False)
    """Records read in this piece, of any rank (a file with lines and none of them is not a run)."""
    _starts: int = field(default=0, repr=False)
    """``train_start`` records read so far in this piece, of any rank: its records' segment there."""
    _times: dict[int, list[list[Any]]] = field(default_factory=dict, repr=False)
    """Per rank, ``[segment in the piece, longest elapsed_s]`` of each segment with a positive time."""
    _rank_starts: Counter[int] = field(default_factory=Counter, repr=False)
    """``train_start`` records of each rank read in this piece (the rank's segments there)."""
    _failures: dict[tuple[int, str], list[list[int]]] = field(default_factory=dict, repr=False)
    """Per (rank, hook), ``[segment of the rank in the piece, largest failure count]`` of each
    segment the hook failed in: a resumed logger counts its failures from 1 again."""
    _ended: bool = field(default=False, repr=False)
    """Whether a ``train_start`` or ``train_end`` set ``finished``, ``status`` and ``error``."""
    _seen: bytearray = field(default_factory=bytearray, repr=False)
    """One bit per step from byte ``_seen_at`` on: whether a ``train_step`` of it was seen."""
    _seen_at: int = field(default=0, repr=False)
    _far: set[int] = field(default_factory=set, repr=False)
    """The steps off the bitmap's scale (negative, or ``_STEP_BITS`` on: counted in samples or
    tokens) seen in this piece, so that one recorded again counts once here and across pieces."""
    _folds: dict[str, _Fold] = field(default_factory=dict, repr=False)
    _plans: dict[tuple[str, ...], _Plan] = field(default_factory=dict, repr=False)
    """What ``_fold_step`` reads of a payload, per tuple of its keys (``_plan``)."""
    _losses: dict[str, SeriesStats] = field(default_factory=dict, repr=False)
    """Each loss key's series: the run's loss is chosen among them once every piece is in."""
    """What ``add`` does with each event, decided the first time the event is met."""

    def add(self, record: Record) -> None:
        """Fold one record of this piece into the summary."""
        event = record.event
        self._count(event, record.rank, record.payload)
        fold = self._folds.get(event)
        if fold is None:
            fold = self._folds[event] = _fold_for(event)
        fold(self, record)

    def add_records(self, records: Iterable[Record], keeps: _Keeps = None) -> None:
        """``add`` of each of ``records``, this piece's records in order, those of a rank ``keeps``
        takes (``RankFilter.keeps``, which counts the others; ``None``: every rank); every record counts
        towards ``_read``. Runs of consecutive ``train_step`` records are folded a list at a time
        (``_add_steps``), their payloads taken from them by builtins."""
        add, add_steps, batch, read = self.add, self._add_steps, _STEP_BATCH, 0
        for event, group in itertools.groupby(records, _EVENT):
            if event == "train_step":
                # Only each step's payload and rank are held: the record and its note go at once.
                steps_of = map(_PAYLOAD_RANK, group)
                while steps := list(itertools.islice(steps_of, batch)):
                    read += len(steps)
                    add_steps(steps, keeps)
                    del steps  # before the next list is read, not once it is: one list held at a time
                continue
            for record in group:
                read += 1
                if event == "train_start":
                    self._starts += 1
                if keeps is None or keeps(record.rank):
                    add(record)
        self._read += read

    def _add_steps(self, steps: list[tuple[dict[str, Any], int]], keeps: _Keeps) -> None:
        """``add`` of each of these ``train_step`` records, as ``(payload, rank)``, read one after the
        other, those of a rank ``keeps`` takes. In bulk, each figure a builtin over a column, when every
        one has the same keys, one rank, an integer step the bitmap holds and finite floats in
        ``elapsed_s`` and every key the summary reads (held-out losses aside): a run's usual steps. Else
        one by one."""
        payloads, ranks = zip(*steps, strict=True)
        rank = ranks[0]
        alike = ranks.count(rank) == len(ranks)
        if keeps is not None and alike:  # one rank: one question (keeps counts each step left out)
            if not keeps(rank):
                for _ in range(len(ranks) - 1):
                    keeps(rank)
                return
        elif keeps is not None:
            steps = [step for step in steps if keeps(step[1])]
            if not steps:
                return
            payloads, ranks = zip(*steps, strict=True)
            rank = ranks[0]
            alike = ranks.count(rank) == len(ranks)
        columns = self._columns(payloads) if alike else None
        times = self.rank_times
        if columns is None:
            for payload, rank in steps:
                self._count("train_step", rank, payload)
                self._fold_step(payload)
                if times is not None:
                    times.add_step(payload, rank, self._starts)
            return
        plan, numbers, elapsed, values, by_key = columns
        if times is not None:
            self._add_times(times, rank, payloads, by_key)
        first = self.records + 1  # the record of the piece the first step is
        self.records += len(steps)
        self.events["train_step"] += len(steps)
        latest = max(elapsed)
        if latest > 0.0:
            self._add_time(rank, latest)
        self._count_steps(numbers)
        for (key, role, detail), column in zip(plan, values, strict=True):
            if role == _RATE:
                rate = self.rates.get(key)
                if rate is None:
                    rate = self.rates[key] = RateStats()
                rate.total = sum_in_order(column, rate.total)
                rate.count += len(column)
                rate.last = column[-1]
            elif role == _LR:
                self.lrs[key] = column[-1]
            else:
                loss = self._losses.get(key)
                if loss is None:
                    loss = self._losses[key] = _stats(column[0], numbers[0], first, detail)
                loss.last, loss.last_step = column[-1], numbers[-1]
                best = min(column)
                if loss.best is None or best < loss.best:
                    loss.best, loss.best_step = best, numbers[column.index(best)]  # the earliest

    def _columns(self, payloads: tuple[dict[str, Any], ...]) -> _Columns | None:
        """The columns ``_add_steps`` folds in bulk; ``None`` when these steps are not all alike as it
        needs (a sum too large for a float sends them one by one too)."""
        keys = tuple(payloads[0])
        if "step" not in keys or "elapsed_s" not in keys or set(map(len, payloads)) != {len(keys)}:
            return None
        plan = self._plan_of(keys)
        if any(role == _EVAL for _, role, _ in plan):  # two keys can be one split's: one by one
            return None
        try:  # as many keys as the first step, and every one of its keys: the same keys
            columns = list(zip(*map(operator.itemgetter(*keys), payloads), strict=True))
        except KeyError:
            return None
        by_key = dict(zip(keys, columns, strict=True))
        numbers, elapsed = by_key["step"], by_key["elapsed_s"]
        values = [by_key[key] for key, _, _ in plan]
        if set(map(type, numbers)) != _INT or min(numbers) < 0 or max(numbers) >= _STEP_BITS:
            return None
        for column in (elapsed, *values):  # a finite sum: every value finite
            if set(map(type, column)) != _FLOAT or not isfinite(sum(column)):
                return None
        return plan, numbers, elapsed, values, by_key

    def _add_times(
        self,
        times: RankTimes,
        rank: int,
        payloads: tuple[dict[str, Any], ...],
        by_key: dict[str, tuple[Any, ...]],
    ) -> None:
        """``RankTimes.add_step`` of these steps of ``rank`` (every one with the same keys, ``by_key``'s
        columns): a column at a time when each is floats (a missing one is 0.0, as ``add_step`` reads
        it), else one by one."""
        waits = by_key.get("sync_wait_s")
        if waits is None:
            return
        zeros = None
        columns = [waits]
        for key in _TIMES:
            column = by_key.get(key)
            if column is None:
                column = zeros = zeros or (0.0,) * len(waits)
            columns.append(column)
        if all(set(map(type, column)) == _FLOAT for column in columns):
            times.add_steps(rank, self._starts, columns)
            return
        for payload in payloads:
            times.add_step(payload, rank, self._starts)

    def _count(self, event: str, rank: int, payload: dict[str, Any]) -> None:
        self.records += 1
        self.events[event] += 1
        elapsed = payload.get("elapsed_s")
        if type(elapsed) is float or type(elapsed) is int:
            self._add_time(rank, float(elapsed))

    def _add_time(self, rank: int, elapsed: float) -> None:
        if not 0.0 < elapsed < math.inf:  # a segment's clock starts at 0: only later times count
            return
        times = self._times.get(rank)
        if times is None:
            self._times[rank] = [[self._starts, elapsed]]
        elif times[-1][0] != self._starts:
            times.append([self._starts, elapsed])
        elif elapsed > times[-1][1]:
            times[-1][1] = elapsed

    def _add_step(self, record: Record) -> None:
        self._fold_step(record.payload)
        if self.rank_times is not None:
            self.rank_times.add_step(record.payload, record.rank, self._starts)

    def _fold_step(self, payload: dict[str, Any]) -> None:
        """The step, the losses, learning rates, rates and held-out losses of a ``train_step``'s
        payload (its fields: ``event``, ``timestamp`` and the note, when there, are not read). The
        smallest and largest step come from the bitmap at the end of the piece (``_close``)."""
        step = payload.get("step")
        if type(step) is int:
            self._count_step(step)
        else:
            step = None
        for key, role, detail in self._plan_of(tuple(payload)):
            value = payload[key]
            if type(value) is not float and type(value) is not int:
                continue
            if role == _RATE:
                rate = self.rates.get(key)
                if rate is None:  # not setdefault(key, RateStats()): that builds one per record
                    rate = self.rates[key] = RateStats()
                rate.add(value)
            elif role == _LOSS:
                loss = self._losses.get(key)
                if loss is None:
                    self._losses[key] = _stats(value, step, self.records, detail)
                else:
                    loss.add(value, step)
            elif role == _LR:
                self.lrs[key] = value
            else:
                self._add_eval_loss(str(eval_split(key)), value, step)

    def _plan_of(self, keys: tuple[str, ...]) -> _Plan:
        plan = self._plans.get(keys)
        if plan is None:
            plan = self._plans[keys] = self._plan(keys)
        return plan

    def _plan(self, keys: tuple[str, ...]) -> _Plan:
        """What ``_fold_step`` reads of a payload with ``keys``, in their order: each key with a role,
        the role, and for a loss how preferred its key is. Decided once per set of keys in a piece."""
        plan = []
        for key in keys:
            if key in _NOT_PAYLOAD:
                continue
            role = self._role(key)
            if role != _OTHER:
                plan.append((key, role, self.roles.loss_rank(key) or 0))
        return plan

    def _role(self, key: str) -> int:
        roles = self.roles
        if roles.loss_rank(key) is not None:
            return _LOSS
        if roles.is_rate(key):
            return _RATE
        if roles.is_lr(key):
            return _LR
        return _EVAL if eval_split(key) is not None else _OTHER

    def _add_eval_loss(self, split: str, value: float, step: int | None) -> None:
        stats = self.evals.get(split)
        if stats is None:
            self.evals[split] = _stats(value, step)
        else:
            stats.add(value, step)

    def _add_start(self, record: Record) -> None:
        self._rank_starts[record.rank] += 1
        self.finished, self._ended = False, True
        self.status = self.error = None
        self.ends[record.rank] = None
        target = record.payload.get("target_step")
        self.target_step = target if type(target) is int else self.target_step

    def _add_end(self, record: Record) -> None:
        payload = record.payload
        self.finished = self._ended = True
        status, error = payload.get("status"), payload.get("error")
        self.status = status if isinstance(status, str) else None
        self.error = error if isinstance(error, str) else None
        self.ends[record.rank] = (self.status, self.error)
        final = as_number(payload.get("final_loss"))
        self.final_loss = final if final is not None else self.final_loss
        for key, value in payload.items():
            if (type(value) is float or type(value) is int) and self.roles.is_rate(key):
                self.end_rates[key] = value

    def _add_system(self, record: Record) -> None:
        for key, value in record.payload.items():
            if type(value) is not float and type(value) is not int:
                continue
            if key.endswith("_bytes") and not key.endswith("_total_bytes"):  # a capacity is no peak
                if value > self.peaks.get(key, -math.inf):
                    self.peaks[key] = value
            elif key.endswith("_percent"):
                stats = self.utilisation.get(key)
                if stats is None:
                    stats = self.utilisation[key] = RateStats()
                stats.add(value)

    def _add_checkpoint(self, record: Record) -> None:
        self.checkpoints += 1
        self.last_checkpoint = {"step": record.payload.get("step"), "path": record.payload.get("path")}

    def _add_eval(self, record: Record) -> None:
        payload = record.payload
        step = payload.get("step")
        step = step if type(step) is int else None
        split = payload.get("split")
        split = split if type(split) is str and split else "eval"
        for key, value in payload.items():
            if type(value) is float or type(value) is int:
                if key == "loss":
                    self._add_eval_loss(split, float(value), step)
                elif (named := eval_split(key)) is not None:
                    self._add_eval_loss(named, float(value), step)

    def _count_step(self, step: int) -> None:
        if not 0 <= step < _STEP_BITS:  # a step number off the scale is remembered in a set
            if step not in self._far:
                self._far.add(step)
                self.steps_recorded += 1
                self._step_range(step, step)
            return
        index = (step >> 3) - self._seen_at
        if not 0 <= index < len(self._seen):
            index = self._reach(step >> 3)
        self._seen[index] |= 1 << (step & 7)

    def _step_range(self, low: int, high: int) -> None:
        if self.step_min is None or low < self.step_min:
            self.step_min = low
        if self.step_max is None or high > self.step_max:
            self.step_max = high

    def _count_steps(self, numbers: tuple[int, ...]) -> None:
        """``_count_step`` of each of ``numbers`` (steps the bitmap holds): at once when they are every
        step of a range, in any order."""
        low, high = min(numbers), max(numbers)
        if len(set(numbers)) != high - low + 1:
            for step in numbers:
                self._count_step(step)
            return
        self._reach(high >> 3)
        self._reach(low >> 3)
        start, end = (low >> 3) - self._seen_at, (high >> 3) - self._seen_at + 1
        bits = ((1 << (high - low + 1)) - 1) << (low & 7)
        held = int.from_bytes(self._seen[start:end], "little")
        self._seen[start:end] = (held | bits).to_bytes(end - start, "little")

    def _close(self) -> None:
        """End this piece: the smallest and largest step of those the bitmap holds, into
        ``step_min`` and ``step_max``."""
        held = self._seen.rstrip(b"\0")
        if held:
            high = (self._seen_at + len(held) - 1) * 8 + held[-1].bit_length() - 1
            rest = held.lstrip(b"\0")
            first = rest[0]
            low = (self._seen_at + len(held) - len(rest)) * 8 + (first & -first).bit_length() - 1
            self._step_range(low, high)

    def _reach(self, byte: int) -> int:
        """Make room in the bitmap for ``byte`` (growing downwards by doubling, so that steps read in
        falling order cost no more than rising ones); its index there."""
        if not self._seen:
            self._seen_at = byte
        elif byte < self._seen_at:
            start = max(0, min(byte, self._seen_at - len(self._seen)))
            self._seen[:0] = bytes(self._seen_at - start)
            self._seen_at = start
        end = byte - self._seen_at + 1
        if end > len(self._seen):
            self._seen.extend(bytes(end - len(self._seen)))
        return byte - self._seen_at

    def _add_hook_error(self, record: Record) -> None:
        if not record.own:  # a user event of that name is not a hook failure
            self._add_other(record)
            return
        # The logger reports a hook's 1st, 2nd, 4th... failure and a final total: the largest count
        # seen is the number of failures. phase="drain" counts events the hook thread never delivered.
        payload = record.payload
        if payload.get("phase") == "drain":
            undelivered = payload.get("undelivered")
            self.undelivered += undelivered if type(undelivered) is int else 0
            return
        hook, failures = str(payload.get("hook", "?")), payload.get("failures")
        count = failures if type(failures) is int else 1
        segment = self._rank_starts[record.rank]
        counts = self._failures.setdefault((record.rank, hook), [])
        if not counts or counts[-1][0] != segment:
            counts.append([segment, count])
        elif count > counts[-1][1]:
            counts[-1][1] = count

    def _add_other(self, record: Record) -> None:
        level = level_for(record.event)
        if level == "warning":
            self.warnings[record.event] += 1
        elif level == "error":
            self.errors[record.event] += 1

    def _add_nothing(self, record: Record) -> None:
        pass

    def _add_alert(self, record: Record) -> None:
        self.alerts.add(record)

    def update(self, later: RunSummary) -> None:
        """Merge the summary of the piece read after this one's records (``_times``, the bitmap,
        segments and hook failures aside: ``_Merge`` puts them together)."""
        for key, loss in later._losses.items():
            held = self._losses.get(key)
            if held is None:
                loss.seen_at += self.records  # the record of the whole run it was first met in
                self._losses[key] = loss
            else:
                held.update(loss)
        for split, stats in later.evals.items():
            if split in self.evals:
                self.evals[split].update(stats)
            else:
                self.evals[split] = stats
        self.lrs.update(later.lrs)
        for key, peak in later.peaks.items():
            self.peaks[key] = max(self.peaks.get(key, peak), peak)
        for key, usage in later.utilisation.items():
            self.utilisation.setdefault(key, RateStats()).merge(usage)
        self.end_rates.update(later.end_rates)
        self.records += later.records
        self.events.update(later.events)
        if later.step_min is not None and later.step_max is not None:
            self._step_range(later.step_min, later.step_max)
        if later.target_step is not None:
            self.target_step = later.target_step
        for key, rate in later.rates.items():
            self.rates.setdefault(key, RateStats()).merge(rate)
        self.steps_recorded += later.steps_recorded - len(self._far & later._far)
        self._far |= later._far
        self.checkpoints += later.checkpoints
        if later.checkpoints:
            self.last_checkpoint = later.last_checkpoint
        if later._ended:
            self.finished, self.status, self.error = later.finished, later.status, later.error
        self.ends.update(later.ends)  # a rank's later piece says how it ended
        if later.final_loss is not None:
            self.final_loss = later.final_loss
        self.warnings.update(later.warnings)
        self.errors.update(later.errors)
        self.undelivered += later.undelivered
        self.alerts.update(later.alerts)
        self.skipped.update(later.skipped)

    def _settle(self) -> None:
        """Set the loss and the held-out loss from their series, once every piece is in."""
        if self._losses:
            key = min(self._losses, key=lambda name: (self._losses[name].seen_at, self._losses[name].rank))
            loss = self._losses[key]
            self.loss_key, self.loss_first, self.loss_last = key, loss.first, loss.last
            self.loss_best, self.loss_best_step = loss.best, loss.best_step
            self.non_finite_losses = loss.non_finite
        held_out = next((stats for split, stats in self.evals.items() if split != "test"), None)
        if held_out is not None:
            self.eval_loss_last, self.eval_loss_last_step = held_out.last, held_out.last_step
            self.eval_loss_best, self.eval_loss_best_step = held_out.best, held_out.best_step

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``; non-finite floats are ``"NaN"``/``"Infinity"`` as in the JSONL."""
        return {
            "run": self.run,
            "files": self.files,
            "records": self.records,
            "events": dict(self.events),
            "steps": {
                "min": self.step_min,
                "max": self.step_max,
                "target": self.target_step,
                "recorded": self.steps_recorded,
            },
            "segments": self.segments,
            "loss": {
                "first": _json_float(self.loss_first),
                "last": _json_float(self.loss_last),
                "best": _json_float(self.loss_best),
                "best_step": self.loss_best_step,
                "non_finite": self.non_finite_losses,
                "key": self.loss_key,
            },
            "lr": {key: _json_float(value) for key, value in self.lrs.items()},
            "evals": {
                split: {
                    "last": _json_float(stats.last),
                    "last_step": stats.last_step,
                    "best": _json_float(stats.best),
                    "best_step": stats.best_step,
                }
                for split, stats in self.evals.items()
            },
            "eval_loss": {
                "last": _json_float(self.eval_loss_last),
                "last_step": self.eval_loss_last_step,
                "best": _json_float(self.eval_loss_best),
                "best_step": self.eval_loss_best_step,
            },
            "rates": {
                key: {"mean": _json_float(rate.mean), "last": _json_float(rate.last)}
                for key, rate in self.rates.items()
            },
            "end_rates": {key: _json_float(value) for key, value in self.end_rates.items()},
            "system": {
                "peaks": {key: _json_float(value) for key, value in self.peaks.items()},
                "means": {key: _json_float(stats.mean) for key, stats in self.utilisation.items()},
            },
            "elapsed_s": self.elapsed_s,
            "checkpoints": {"count": self.checkpoints, "last": self.last_checkpoint},
            "finished": self.finished,
            "status": self.status,
            "error": self.error,
            "ends": [
                {
                    "rank": rank,
                    "finished": end is not None,
                    "status": end[0] if end else None,
                    "error": end[1] if end else None,
                }
                for rank, end in sorted(self.ends.items())
            ],
            "final_loss": _json_float(self.final_loss),
            "warnings": dict(self.warnings),
            "errors": dict(self.errors),
            "hook_failures": self.hook_failures,
            "undelivered": self.undelivered,
            "alerts": self.alerts.as_dict(),
            "skipped": self.skipped.as_dict(),
        }


def _json_float(value: float | None) -> float | str | None:
    return value if value is None or math.isfinite(value) else non_finite_text(value)


def _fold_for(event: str) -> _Fold:
    """What ``RunSummary.add`` does with a record of ``event``: decided once per event name."""
    folds: dict[str, _Fold] = {
        "train_step": RunSummary._add_step,
        "train_start": RunSummary._add_start,
        "train_end": RunSummary._add_end,
        "checkpoint": RunSummary._add_checkpoint,
        "eval": RunSummary._add_eval,
        "hook_error": RunSummary._add_hook_error,
        "system": RunSummary._add_system,
        "alert": RunSummary._add_alert,
    }
    if event in folds:
        return folds[event]
    return RunSummary._add_other if level_for(event) in ("warning", "error") else RunSummary._add_nothing
