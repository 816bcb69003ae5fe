"""The built-in rules: ``NonFinite``, ``Spike``, ``ThroughputDrop``, ``Memory`` and ``Threshold``."""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from speedtronic.alerts.rule import DEFAULT_COOLDOWN, SEVERITIES, Alert, Severity, as_names
from speedtronic.events import LOSS_KEYS, is_rate

__all__ = ["Memory", "NonFinite", "Spike", "Threshold", "ThroughputDrop"]

_NOTHING: tuple[Alert, ...] = ()
_INF, _NEG_INF = math.inf, -math.inf
_EXACT_EVERY = 1024
"""Values a window adds between two exact recomputations of its running sums."""
_TRAIN_STEP = ("train_step",)


def _figure(value: float) -> str:
    """A number in a message: six significant digits."""
    return f"{value:.6g}"


def _number(value: Any) -> float | None:
    """``value`` as a float when it is a finite ``int`` or ``float`` (a ``bool`` is not a number here)."""
    kind = type(value)
    if (kind is float or kind is int) and math.isfinite(value):
        return float(value)
    return None


def _at(step: int | None) -> str:
    return f" at step {step}" if step is not None else ""


def _step(record: Mapping[str, Any]) -> int | None:
    step = record.get("step")
    return step if type(step) is int else None


def _keys(keys: str | Iterable[str] | None, default: Sequence[str], rule: str) -> tuple[str, ...]:
    chosen = tuple(default) if keys is None else as_names(keys)
    if not chosen or not all(isinstance(key, str) and key for key in chosen):
        raise ValueError(f"{rule}(keys={keys!r}): expected key names")
    return chosen


def _event_names(events: str | Iterable[str] | None, rule: str) -> frozenset[str] | None:
    if events is None:
        return None
    chosen = frozenset(as_names(events))
    if not chosen or not all(isinstance(event, str) and event for event in chosen):
        raise ValueError(f"{rule}(events={events!r}): expected event names, or None for every event")
    return chosen


def _positive_int(value: Any, rule: str, name: str, minimum: int = 1) -> int:
    if type(value) is not int or value < minimum:
        raise ValueError(f"{rule}({name}={value!r}): expected an int >= {minimum}")
    return value


def _positive(value: Any, rule: str, name: str) -> float:
    if type(value) not in (int, float) or not 0 < value < math.inf:
        raise ValueError(f"{rule}({name}={value!r}): expected a number > 0")
    return float(value)


def _severity(value: Any, rule: str) -> Severity:
    if value not in SEVERITIES:
        raise ValueError(f"{rule}(severity={value!r}): expected one of {', '.join(SEVERITIES)}")
    return value  # type: ignore[no-any-return]  # checked just above


class NonFinite:
    """The onset of a NaN or an infinity: one alert (``error``) for a record where a watched key is
    non-finite and was not in the record before that had it; the keys are ``keys`` (default: the loss
    keys, ``LOSS_KEYS``) of ``events`` (default ``train_step`` and ``eval``: a summary at the end, such
    as Hugging Face's ``train_loss`` in ``train_end``, repeats what was alerted; ``None``: every event)."""

    __slots__ = ("_bad", "cooldown", "events", "keys", "name")

    def __init__(
        self,
        keys: str | Iterable[str] | None = None,
        *,
        events: str | Iterable[str] | None = ("train_step", "eval"),
        cooldown: int = DEFAULT_COOLDOWN,
        name: str = "non_finite",
    ) -> None:
        self.name = name
        self.keys = _keys(keys, LOSS_KEYS, "NonFinite")
        self.events = _event_names(events, "NonFinite")
        self.cooldown = cooldown
        self._bad: set[tuple[Any, str]] = set()  # (event, key) non-finite at its last record

    def check(self, record: Mapping[str, Any]) -> Sequence[Alert]:
        event = record.get("event")
        if self.events is not None and event not in self.events:
            return _NOTHING
        onset: list[tuple[str, float]] | None = None
        bad = self._bad
        for key in self.keys:
            value = record.get(key)
            if value is None:
                continue  # a key the record doesn't have: one lookup, nothing else
            if type(value) is float and not _NEG_INF < value < _INF:
                if (event, key) not in bad:
                    bad.add((event, key))
                    onset = onset or []
                    onset.append((key, value))
            elif bad:
                bad.discard((event, key))  # finite again: the next NaN is a new onset
        if onset is None:
            return _NOTHING
        step = _step(record)
        listed = ", ".join(f"{key} ({value})" for key, value in onset)
        message = f"non-finite {listed} in {event}{_at(step)}"
        first_key, first_value = onset[0]
        figures = {"keys": [key for key, _ in onset]}
        return [Alert(self.name, "error", first_key, step, first_value, None, message, figures)]


class _Window:
    """The last ``size`` values of a key, with their running sum and sum of squares (recomputed
    exactly every ``_EXACT_EVERY`` values, so rounding never builds up)."""

    __slots__ = ("left", "size", "squares", "total", "values")

    def __init__(self, size: int) -> None:
        self.size = size
        self.values: deque[float] = deque()
        self.total = 0.0
        self.squares = 0.0
        self.left = _EXACT_EVERY  # values to add before the next exact recomputation

    def exact(self) -> None:
        """The running sums recomputed from the values (``Spike.check`` adds each value itself)."""
        self.left = _EXACT_EVERY
        self.total = math.fsum(self.values)
        self.squares = math.fsum(v * v for v in self.values)

    def figures(self) -> tuple[float, float]:
        """The window's mean and (population) standard deviation."""
        n = len(self.values)
        mean = self.total / n
        return mean, math.sqrt(max(self.squares / n - mean * mean, 0.0))


class Spike:
    """A value above ``mean + k * std`` of its last ``window`` values (below ``mean - k * std`` for a
    rate: a key ``is_rate`` names), once ``warmup`` values are in; ``warning``.

    ``keys``: default the loss keys and ``grad_norm``; ``events``: default ``train_step`` only (an
    ``eval`` loss is another series). ``std`` is at least ``min_std`` times ``|mean|``, so a flat
    series does not alert on its last digit. A steady trend, up or down, never alerts: the newest
    value of a straight line is 1.7 standard deviations from its window's mean."""

    __slots__ = ("_k2", "_watched", "cooldown", "events", "k", "keys", "min_std", "name", "warmup",
                 "window")  # fmt: skip

    def __init__(
        self,
        keys: str | Iterable[str] | None = None,
        *,
        k: float = 6.0,
        window: int = 128,
        warmup: int = 32,
        min_std: float = 0.001,
        events: str | Iterable[str] | None = _TRAIN_STEP,
        cooldown: int = DEFAULT_COOLDOWN,
        name: str = "spike",
    ) -> None:
        self.name = name
        self.keys = _keys(keys, (*LOSS_KEYS, "grad_norm"), "Spike")
        self.k = _positive(k, "Spike", "k")
        self._k2 = self.k * self.k
        self.window = _positive_int(window, "Spike", "window", 2)
        self.warmup = _positive_int(warmup, "Spike", "warmup", 2)
        self.min_std = _positive(min_std, "Spike", "min_std")
        self.events = _event_names(events, "Spike")
        self.cooldown = cooldown
        self._watched = [(key, _Window(self.window), is_rate(key)) for key in self.keys]

    def check(self, record: Mapping[str, Any]) -> Sequence[Alert]:
        if self.events is not None and record.get("event") not in self.events:
            return _NOTHING
        found: list[Alert] | None = None
        warmup, k2, floor = self.warmup, self._k2, self.min_std
        for key, window, down in self._watched:
            value = record.get(key)
            if value is None:
                continue  # a key the record doesn't have: one lookup, nothing else
            kind = type(value)
            if (kind is not float and kind is not int) or not _NEG_INF < value < _INF:
                continue  # not a number, or not finite (NonFinite's)
            values = window.values
            n = len(values)
            total, squares = window.total, window.squares
            if n >= warmup:  # the test, without a square root: (value - mean)^2 > k^2 variance
                mean = total / n
                deviation = mean - value if down else value - mean
                if deviation > 0.0:
                    variance = squares / n - mean * mean
                    least = floor * mean
                    if least * least > variance:
                        variance = least * least
                    if deviation * deviation > k2 * variance:
                        found = found if found is not None else []
                        found.append(self._alert(key, float(value), window, down, record))
            # the window takes the value (_Window's running sums, inline: this runs for every
            # logged step; O(1): the value in, the oldest out)
            values.append(value)
            if n >= window.size:
                old = values.popleft()
                window.total, window.squares = total + value - old, squares + value * value - old * old
            else:
                window.total, window.squares = total + value, squares + value * value
            left = window.left - 1
            if left:
                window.left = left
            else:
                window.exact()
        return found or _NOTHING

    def _alert(self, key: str, value: float, window: _Window, down: bool, record: Mapping[str, Any]) -> Alert:
        mean, spread = window.figures()
        std = max(spread, self.min_std * abs(mean))
        threshold = mean - self.k * std if down else mean + self.k * std
        step = _step(record)
        side = "below" if down else "above"
        message = (
            f"{key} {_figure(value)} {side} mean {_figure(mean)} {'-' if down else '+'} {_figure(self.k)} "
            f"sigma ({_figure(std)}) of its last {len(window.values)} values{_at(step)}"
        )
        figures = {"window": len(window.values), "mean": mean, "std": std, "k": self.k}
        return Alert(self.name, "warning", key, step, value, threshold, message, figures)


class ThroughputDrop:
    """A rate below ``fraction`` of its window's median for ``consecutive`` logged steps in a row; one
    alert (``warning``) per drop, again once the rate has recovered. ``keys``: default every rate key
    (``is_rate``) of a ``train_step``; the window holds the last ``window`` values, ``warmup`` of
    them before it can fire."""

    __slots__ = ("_below", "_keys", "_sorted", "_windows", "consecutive", "cooldown", "events",
                 "fraction", "keys", "name", "warmup", "window")  # fmt: skip

    def __init__(
        self,
        keys: str | Iterable[str] | None = None,
        *,
        fraction: float = 0.5,
        consecutive: int = 3,
        window: int = 128,
        warmup: int = 16,
        events: str | Iterable[str] | None = _TRAIN_STEP,
        cooldown: int = DEFAULT_COOLDOWN,
        name: str = "throughput_drop",
    ) -> None:
        self.name = name
        self.keys = _keys(keys, (), "ThroughputDrop") if keys is not None else None
        self.fraction = _positive(fraction, "ThroughputDrop", "fraction")
        if self.fraction >= 1:
            raise ValueError(f"ThroughputDrop(fraction={fraction!r}): expected a number between 0 and 1")
        self.consecutive = _positive_int(consecutive, "ThroughputDrop", "consecutive")
        self.window = _positive_int(window, "ThroughputDrop", "window", 2)
        self.warmup = _positive_int(warmup, "ThroughputDrop", "warmup")
        self.events = _event_names(events, "ThroughputDrop")
        self.cooldown = cooldown
        self._windows: dict[str, deque[float]] = {}
        self._sorted: dict[str, list[float]] = {}
        self._below: dict[str, int] = {}

    def check(self, record: Mapping[str, Any]) -> Sequence[Alert]:
        if self.events is not None and record.get("event") not in self.events:
            return _NOTHING
        keys: Iterable[str] = self.keys if self.keys is not None else [k for k in record if is_rate(k)]
        found: list[Alert] = []
        for key in keys:
            value = _number(record.get(key))
            if value is None:
                continue
            alert = self._one(key, value, record)
            if alert is not None:
                found.append(alert)
        return found

    def _one(self, key: str, value: float, record: Mapping[str, Any]) -> Alert | None:
        window = self._windows.setdefault(key, deque())
        ordered = self._sorted.setdefault(key, [])
        alert = None
        if len(window) >= self.warmup:
            median = _median(ordered)
            threshold = self.fraction * median
            below = self._below.get(key, 0) + 1 if value < threshold else 0
            self._below[key] = below
            if below == self.consecutive:
                step = _step(record)
                message = (
                    f"{key} {_figure(value)} below {_figure(self.fraction)} x its median {_figure(median)} "
                    f"for {below} logged steps{_at(step)}"
                )
                figures = {"window": len(window), "median": median, "consecutive": below}
                alert = Alert(self.name, "warning", key, step, value, threshold, message, figures)
        window.append(value)
        bisect.insort(ordered, value)
        if len(window) > self.window:
            ordered.pop(bisect.bisect_left(ordered, window.popleft()))
        return alert


def _median(ordered: list[float]) -> float:
    n = len(ordered)
    middle = n // 2
    return ordered[middle] if n % 2 else (ordered[middle - 1] + ordered[middle]) / 2


_COUNTERS = (("alloc_retries", "warning", "allocator retries"), ("ooms", "error", "out-of-memory errors"))


class Memory:
    """The accelerator's memory in trouble: the allocator's retries (``alloc_retries``, ``warning``)
    or its out-of-memory count (``ooms``, ``error``) higher than in the record before, or
    ``memory_bytes`` climbing: never lower than the value before for ``climb`` logged steps in a row
    and up by at least ``rise`` (a share of where it started; ``warning``).

    ``alloc_retries`` and ``ooms`` are in the records of a logger given this rule on CUDA (read from
    ``torch.cuda.memory_stats`` on the host, no device sync); ``memory_bytes`` wherever an
    accelerator is in use."""

    __slots__ = ("_counts", "_run", "_start", "climb", "cooldown", "events", "name", "rise")

    reads_allocator = True
    """The logger adds ``alloc_retries`` and ``ooms`` to its records when a rule says so."""

    def __init__(
        self,
        *,
        climb: int = 50,
        rise: float = 0.1,
        events: str | Iterable[str] | None = _TRAIN_STEP,
        cooldown: int = DEFAULT_COOLDOWN,
        name: str = "memory",
    ) -> None:
        self.name = name
        self.climb = _positive_int(climb, "Memory", "climb", 2)
        self.rise = _positive(rise, "Memory", "rise")
        self.events = _event_names(events, "Memory")
        self.cooldown = cooldown
        self._counts: dict[str, int] = {}
        self._run = 0  # logged steps in a row without a fall of memory_bytes
        self._start = 0.0  # memory_bytes where that run began

    def check(self, record: Mapping[str, Any]) -> Sequence[Alert]:
        if self.events is not None and record.get("event") not in self.events:
            return _NOTHING
        found: list[Alert] = []
        for key, severity, what in _COUNTERS:
            count = record.get(key)
            if type(count) is not int:
                continue
            before = self._counts.get(key)
            self._counts[key] = count
            if before is not None and count > before:
                step = _step(record)
                message = f"{what} rose from {before} to {count}{_at(step)}"
                found.append(Alert(self.name, severity, key, step, float(count), float(before), message))  # type: ignore[arg-type]  # one of SEVERITIES
        used = record.get("memory_bytes")
        if type(used) is int:
            alert = self._climbing(used, record)
            if alert is not None:
                found.append(alert)
        return found

    def _climbing(self, used: int, record: Mapping[str, Any]) -> Alert | None:
        last = self._counts.get("memory_bytes")
        self._counts["memory_bytes"] = used
        if last is None or used < last:
            self._run, self._start = 1, float(used)
            return None
        self._run += 1
        threshold = self._start * (1 + self.rise)
        if self._run < self.climb or used < threshold:
            return None
        step = _step(record)
        message = (
            f"memory_bytes climbed from {int(self._start)} to {used} over {self._run} logged steps "
            f"without falling{_at(step)}"
        )
        figures = {"window": self._run, "start": self._start}
        self._run, self._start = 1, float(used)  # the next climb starts here
        return Alert(self.name, "warning", "memory_bytes", step, float(used), threshold, message, figures)


class Threshold:
    """A key above ``above`` or below ``below``: one alert (``severity``) when it crosses, again once
    it has come back. In every event, or those of ``events``."""

    __slots__ = ("_out", "above", "below", "cooldown", "events", "key", "name", "severity")

    def __init__(
        self,
        key: str,
        *,
        above: float | None = None,
        below: float | None = None,
        severity: Severity = "warning",
        events: str | Iterable[str] | None = None,
        cooldown: int = DEFAULT_COOLDOWN,
        name: str = "threshold",
    ) -> None:
        if not isinstance(key, str) or not key:
            raise ValueError(f"Threshold(key={key!r}): expected a key name")
        if above is None and below is None:
            raise ValueError(f"Threshold({key!r}): give above=, below= or both")
        for label, bound in (("above", above), ("below", below)):
            if bound is not None and (type(bound) not in (int, float) or not math.isfinite(bound)):
                raise ValueError(f"Threshold({label}={bound!r}): expected a finite number")
        self.name = name
        self.key = key
        self.above = None if above is None else float(above)
        self.below = None if below is None else float(below)
        self.severity = _severity(severity, "Threshold")
        self.events = _event_names(events, "Threshold")
        self.cooldown = cooldown
        self._out = False

    def check(self, record: Mapping[str, Any]) -> Sequence[Alert]:
        value = _number(record.get(self.key))
        if value is None:
            return _NOTHING
        if self.events is not None and record.get("event") not in self.events:
            return _NOTHING
        side, bound = None, None
        if self.above is not None and value > self.above:
            side, bound = "above", self.above
        elif self.below is not None and value < self.below:
            side, bound = "below", self.below
        was_out, self._out = self._out, side is not None
        if side is None or was_out:
            return _NOTHING
        step = _step(record)
        message = f"{self.key} {_figure(value)} {side} {_figure(bound)}{_at(step)}"  # type: ignore[arg-type]  # set with side
        return [Alert(self.name, self.severity, self.key, step, value, bound, message)]
