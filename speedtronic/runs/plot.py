"""``plot_runs``: chosen keys of one or more runs as a PNG, PDF or SVG, one panel per key, runs overlaid."""

from __future__ import annotations

import math
import os
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speedtronic.events import Event
from speedtronic.extras import require
from speedtronic.runs.alert_records import AlertMark, alert_mark
from speedtronic.runs.reader import RankChoice, Record, RunClock, Skipped, as_number, read_records, run_files
from speedtronic.runs.roles import Roles, eval_split

__all__ = [
    "DEFAULT_KEYS",
    "FORMATS",
    "MAX_BUCKETS",
    "MAX_RANK_SERIES",
    "Envelope",
    "NothingToPlot",
    "PlotResult",
    "Series",
    "ema",
    "plot_runs",
]

DEFAULT_KEYS = ("loss", "lr")
MAX_RANK_SERIES = 16
"""With ``rank="all"``, the ranks drawn per run: the lowest this many; the others are counted
(``PlotResult.ranks_not_drawn``) and named in a note on the figure."""
FORMATS = ("png", "pdf", "svg")
"""What ``plot_runs`` writes, chosen by the output's suffix."""
_MARKERS_UP_TO = 50
"""Series this short get a marker per point, so a lone point (or one between gaps) is visible."""


class NothingToPlot(ValueError):
    """No run has a single point for any of the keys: no PNG is written."""


MAX_BUCKETS = 4096
"""Points a series keeps as given; a longer one is kept as at most this many buckets of consecutive
points (``Envelope``): a figure a few thousand pixels wide shows no more."""
_OPEN_POINTS = 64
"""Points the bucket being filled holds before it is cut down to the points standing for it."""


class Envelope:
    """One line's points in bounded memory, as drawn.

    Up to ``MAX_BUCKETS`` points are kept as given. Past that, the points are grouped in buckets of
    ``width`` consecutive points (in record order), each kept as its first, last, lowest and highest
    point and its first NaN (a gap), in their order: the line's first and last points, its extremes,
    spikes and gaps survive, and the picture is the same to the eye. When there are more than
    ``MAX_BUCKETS`` buckets, neighbours merge pairwise and ``width`` doubles, so at most
    ``5 * MAX_BUCKETS + 64`` points are held however long the line. ``gaps`` is how many NaN values
    each kept point stands for; ``carried`` are columns kept beside each point (``Series`` keeps its
    EMA's state there).
    """

    __slots__ = ("_filled", "_open", "_starts", "carried", "gaps", "width", "x", "y")

    def __init__(self, carried: int = 0) -> None:
        self.x = array("d")
        self.y = array("d")
        self.gaps = array("q")
        self.carried = [array("d") for _ in range(carried)]
        self.width = 1
        """Points given per bucket: 1 until more than ``MAX_BUCKETS`` were given."""
        self._starts = array("q")  # where each full bucket's points begin
        self._open = 0  # where the bucket being filled begins
        self._filled = 0  # points given to the bucket being filled

    def __len__(self) -> int:
        return len(self.x)

    def add(self, x: float, y: float, *carried: float) -> None:
        self.x.append(x)
        self.y.append(y)
        self.gaps.append(y != y)  # NaN
        if carried:
            for column, value in zip(self.carried, carried, strict=True):
                column.append(value)
        self._filled += 1
        if self._filled == self.width:
            if self.width > 1:
                self._cut(self._open)
            self._starts.append(self._open)
            self._open, self._filled = len(self.x), 0
            if len(self._starts) > MAX_BUCKETS:
                self._merge()
        elif len(self.x) - self._open > _OPEN_POINTS:
            self._cut(self._open)

    def rewind(self, x: float) -> int:
        """Drop the points at ``x`` and after (the line's ``x`` only grows); how many NaN values they
        stood for. A bucket cut in two keeps its points before ``x`` and is filled again."""
        keep = len(self.x)
        while keep and self.x[keep - 1] >= x:
            keep -= 1
        if keep == len(self.x):
            return 0
        dropped = sum(self.gaps[keep:])
        for column in self._columns():
            del column[keep:]
        if self._open >= keep:  # the bucket being filled goes whole, and the full ones from keep on
            end = self._open  # where the last full bucket left standing ends
            while self._starts and self._starts[-1] >= keep:
                end = self._starts.pop()
            # A full bucket ending at keep stays full; one the rewind cut in two is filled again.
            self._open = keep if end == keep or not self._starts else self._starts.pop()
        self._filled = len(self.x) - self._open
        return dropped

    def _columns(self) -> list[array[Any]]:
        return [self.x, self.y, self.gaps, *self.carried]

    def _chosen(self, start: int, end: int) -> tuple[list[int], int]:
        """The points standing for ``start:end`` (its first, last, lowest, highest and first NaN), in
        order, and which of them is that NaN (-1: none)."""
        y = self.y
        low = high = gap = -1
        for at in range(start, end):
            value = y[at]
            if math.isnan(value):
                if gap < 0:
                    gap = at
            else:
                if low < 0 or value < y[low]:
                    low = at
                if high < 0 or value > y[high]:
                    high = at
        return sorted({start, end - 1, *(at for at in (low, high, gap) if at >= 0)}), gap

    def _kept(self, start: int, end: int) -> tuple[list[int], list[int]]:
        """The points standing for ``start:end`` and the NaN values each stands for."""
        chosen, gap = self._chosen(start, end)
        total = sum(self.gaps[start:end])
        return chosen, [total if at == gap else 0 for at in chosen]

    def _cut(self, start: int) -> None:
        """Keep, of the points from ``start`` on, those standing for them."""
        chosen, gaps = self._kept(start, len(self.x))
        for column in self._columns():
            kept = [column[at] for at in chosen]
            del column[start:]
            column.extend(kept)
        self.gaps[start:] = array("q", gaps)

    def _merge(self) -> None:
        """Merge neighbouring full buckets pairwise; ``width`` doubles."""
        ends = [*self._starts[1:], self._open]
        chosen: list[int] = []
        gaps: list[int] = []
        starts = array("q")
        for pair in range(0, len(self._starts), 2):
            starts.append(len(chosen))
            kept, counts = self._kept(self._starts[pair], ends[min(pair + 1, len(ends) - 1)])
            chosen += kept
            gaps += counts
        tail = range(self._open, len(self.x))
        self.gaps = array("q", gaps + [self.gaps[at] for at in tail])
        self.x, self.y, *self.carried = (
            array("d", [column[at] for at in (*chosen, *tail)]) for column in (self.x, self.y, *self.carried)
        )
        self._starts, self._open, self.width = starts, len(chosen), self.width * 2


@dataclass
class Series:
    """One key of one run: its points in record order, bounded (``Envelope``), and with ``smooth``
    its EMA (``ema``) over every point, bounded the same way."""

    run: str
    key: str
    event: str = "train_step"
    """The records the points come from."""
    non_finite: int = 0
    """Points whose value was NaN or infinite: drawn as a gap."""
    rank: int | None = None
    """The rank drawn, with ``rank="all"`` or a list of ranks (the series' ``run`` then says
    ``<run> rank <r>``)."""
    smooth: float = 0.0
    """The EMA's weight; 0: none."""
    split: str | None = None
    """The held-out split the points come from (``val``, ``test``, ...); ``None``: training."""
    source: str = ""
    """The key read (``train_loss_step`` for the ``loss`` panel, ``lr-SGD/pg1`` for ``lr``); ``key``
    when empty."""
    points: Envelope = field(default_factory=Envelope)
    smoothed: Envelope = field(default_factory=lambda: Envelope(carried=2))
    """The EMA's points, each with the EMA's state after it (its sum and the values seen)."""

    @property
    def x(self) -> array[float]:
        return self.points.x

    @property
    def y(self) -> array[float]:
        return self.points.y

    _last: float = field(default=0.0, init=False, repr=False)  # the EMA's state: its sum ...
    _seen: float = field(default=0.0, init=False, repr=False)  # ... and the values it has seen

    def rewind(self, x: float) -> None:
        """Drop the points at ``x`` and after: a restarted run records them again."""
        xs = self.points.x
        if not xs or xs[-1] < x:
            return  # the usual case: a step after the last one
        self.non_finite -= self.points.rewind(x)
        if self.smooth:
            self.smoothed.rewind(x)
            state = self.smoothed.carried
            self._last, self._seen = (state[0][-1], state[1][-1]) if len(self.smoothed) else (0.0, 0.0)

    def add(self, x: float, y: float) -> None:
        if not math.isfinite(y):
            self.non_finite += 1
            y = math.nan
        self.points.add(x, y)
        if not self.smooth:
            return
        if y == y:  # not NaN: NaN leaves the EMA as it was, a gap
            weight = self.smooth
            self._last = last = self._last * weight + (1 - weight) * y
            self._seen += 1
            self.smoothed.add(x, last / (1 - weight**self._seen), last, self._seen)
        else:
            self.smoothed.add(x, y, self._last, self._seen)


@dataclass
class PlotResult:
    """What ``plot_runs`` drew: every series (empty ones included) and what each read skipped."""

    path: Path
    series: list[Series]
    skipped: dict[str, Skipped]
    ranks_not_drawn: dict[str, int] = field(default_factory=dict)
    """Per run, with ``rank="all"``: ranks beyond ``MAX_RANK_SERIES`` that had points but were not drawn."""
    alerts: list[AlertMark] = field(default_factory=list)
    """The alerts marked (``speedtronic.runs.alert_records``), in record order, every run's."""

    def empty_keys(self) -> list[str]:
        """Keys for which no run had a single point."""
        keys = dict.fromkeys(s.key for s in self.series)
        return [key for key in keys if not any(len(s.y) for s in self.series if s.key == key)]


def ema(values: Sequence[float], weight: float) -> list[float]:
    """TensorBoard's smoothing: a debiased exponential moving average; NaN stays a gap."""
    out, last, seen = [], 0.0, 0
    for value in values:
        if math.isnan(value):
            out.append(value)
            continue
        last = last * weight + (1 - weight) * value
        seen += 1
        out.append(last / (1 - weight**seen))
    return out


_Group = dict[tuple[str, str], Series]
"""One rank's series of one event and split, by (panel key, key read)."""


def _collect(
    path: str | os.PathLike[str],
    label: str,
    keys: Sequence[str],
    x: str,
    events: Sequence[str],
    rank: RankChoice,
    smooth: float = 0.0,
    roles: Roles | None = None,
    alerts: list[AlertMark] | None = None,
) -> tuple[list[Series], Skipped, int]:
    """The run's series, one per key read, event and split (per rank too with ``rank="all"`` or a list
    of ranks, up to ``MAX_RANK_SERIES`` ranks), read in one pass; what the read skipped, and how many
    more ranks had points but are not drawn. The keys ``loss`` and ``lr`` are roles
    (``speedtronic.runs.roles``): the run's loss, whatever its name, and each of its learning rates.
    The run's ``alert`` records that can be placed on ``x`` are added to ``alerts``, when given."""
    finder = _KeyFinder(keys, roles if roles is not None else Roles(), held_out="eval" in events)
    per_rank: dict[int, dict[tuple[str, str | None], _Group]] = {}
    by_rank = rank == "all" or not isinstance(rank, int | str)  # every rank, or a list: a series each
    not_drawn: set[int] = set()
    skipped = Skipped()
    clock = RunClock()
    for record in read_records(path, skipped, rank=rank):
        since_start = clock.add(record)  # every record: a segment's time counts even without points
        if record.event == Event.ALERT and alerts is not None:
            _add_mark(alerts, record, label, x, since_start)
        if record.event not in events:
            continue
        xv = since_start if x == "elapsed_s" else as_number(record.payload.get(x))
        if xv is None or not math.isfinite(xv):
            continue
        values = finder.values(record.event, record.payload)
        key = record.rank if by_rank else 0
        groups = per_rank.get(key)
        if groups is None:
            if len(per_rank) >= MAX_RANK_SERIES:
                if values:
                    not_drawn.add(key)
                continue
            groups = per_rank[key] = {(events[0], None): {}}
        name = f"{label} rank {key}" if by_rank else label
        for event, split, panel, source, value in values:
            group = groups.setdefault((event, split), {})
            one = group.get((panel, source))
            if one is None:
                main = event == events[0] and split is None
                one = group[(panel, source)] = Series(
                    name, panel, event, rank=key if by_rank else None, smooth=smooth if main else 0.0,
                    split=split, source=source,
                )  # fmt: skip
            elif x == "step":  # a step given again (after a restart) replaces the line from it on
                one.rewind(xv)
            one.add(xv, value)
    if not per_rank:
        per_rank[0] = {(events[0], None): {}}
    drawn: list[Series] = []
    for key, groups in sorted(per_rank.items()):
        trained = groups[(events[0], None)]
        name = f"{label} rank {key}" if by_rank else label
        for panel in keys:  # the chosen event's series always (a key without points gets its panel)
            if not any(one.key == panel for one in trained.values()):
                trained[(panel, panel)] = Series(name, panel, events[0], rank=key if by_rank else None)
        drawn += sorted(trained.values(), key=lambda one: keys.index(one.key))
        drawn += [  # the held-out series with points, each split its own
            one for where, group in groups.items() if where != (events[0], None)
            for one in group.values() if len(one.y)
        ]  # fmt: skip
    return drawn, skipped, len(not_drawn)


def _add_mark(alerts: list[AlertMark], record: Record, label: str, x: str, since_start: float | None) -> None:
    """An alert's mark, on a ``step`` or ``elapsed_s`` axis (no other x places it)."""
    if x == "step" or (x == "elapsed_s" and since_start is not None):
        mark = alert_mark(record, label, since_start if x == "elapsed_s" else None)
        if mark is not None:
            alerts.append(mark)


class _KeyFinder:
    """Which payload keys a plot reads, by panel: a key as named, or by role for ``loss`` (the run's
    loss key, chosen at the first record that has one) and ``lr`` (every learning-rate key)."""

    __slots__ = ("_held_out", "_keys", "_loss", "_roles")

    def __init__(self, keys: Sequence[str], roles: Roles, *, held_out: bool) -> None:
        self._keys = keys
        self._roles = roles
        self._held_out = held_out  # whether a held-out loss logged in a training record is drawn
        self._loss: str | None = roles.loss

    def values(self, event: str, payload: dict[str, Any]) -> list[tuple[str, str | None, str, str, float]]:
        """``(event, split, panel, key read, value)`` of each point the record gives (``split``:
        ``None`` but for a held-out loss)."""
        out: list[tuple[str, str | None, str, str, float]] = []
        split: str | None = None
        if event == "eval":
            named = payload.get("split")
            split = named if type(named) is str and named else "eval"
        for panel in self._keys:
            if panel == "loss" and event == "eval":
                found = [("loss", split)] + [(key, eval_split(key)) for key in payload if key != "loss"]
                out += [
                    (event, where, panel, key, value) for key, where in found
                    if where is not None and (value := as_number(payload.get(key))) is not None
                ]  # fmt: skip
                continue
            if panel == "loss" and self._held_out:
                for key in payload:  # a held-out loss logged beside the training loss: its own series
                    where = eval_split(key)
                    if where is not None and (value := as_number(payload[key])) is not None:
                        out.append(("eval", where, panel, key, value))
            for key in self._read(panel, payload):
                value = as_number(payload.get(key))
                if value is not None:
                    out.append((event, split, panel, key, value))
        return out

    def _read(self, panel: str, payload: dict[str, Any]) -> list[str]:
        if panel == "lr" and self._roles.lr is not None:
            return list(self._roles.lr)
        if panel == "lr":
            return [key for key in payload if self._roles.is_lr(key)]
        if panel != "loss":
            return [panel]
        if self._loss is None:
            ranked = [(rank, key) for key in payload if (rank := self._roles.loss_rank(key)) is not None
                      and as_number(payload[key]) is not None]  # fmt: skip
            if not ranked:
                return []
            self._loss = min(ranked)[1]
        return [self._loss]


def plot_runs(
    runs: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    keys: Sequence[str] = DEFAULT_KEYS,
    x: str = "step",
    event: str = "train_step",
    smooth: float = 0.0,
    log_y: bool = False,
    title: str | None = None,
    labels: Sequence[str] | None = None,
    rank: RankChoice = "first",
    dpi: int = 100,
    with_eval: bool = True,
    roles: Roles | None = None,
) -> PlotResult:
    """Draw ``keys`` of the ``event`` records of each run against ``x`` and save the figure to ``out``,
    in the format its suffix names (``FORMATS``).

    ``smooth`` (0 <= smooth < 1) is TensorBoard's smoothing weight: the smoothed line is drawn over
    the raw one, which is kept faint. Keys are plotted even when some runs lack them; a key no run has
    gets a panel saying so. With ``rank="all"`` or a list of ranks (whose files alone are opened) each
    rank of a run is its own series (``<run> rank <r>``,
    in the legend), up to ``MAX_RANK_SERIES`` ranks per run; the rest are counted in
    ``PlotResult.ranks_not_drawn`` and named in a note on the figure. With ``event="train_step"`` and
    ``with_eval``, the ``eval`` records' values of the same keys are drawn dashed beside each run's
    line. Raises
    ``speedtronic.runs.RunError`` for a run that can't be read,
    ``NothingToPlot`` (before writing anything) when no run has a single point, ``ValueError`` for bad
    arguments (a suffix that names no format among them), ``OSError`` when ``out`` can't be written.
    """
    fmt = Path(out).suffix.lower().removeprefix(".")
    if fmt not in FORMATS:
        raise ValueError(
            f"{out}: can't tell the format from the suffix {Path(out).suffix or '(none)'!r}; "
            f"end the name with {', '.join('.' + f for f in FORMATS)}"
        )
    if not runs:
        raise ValueError("plot_runs needs at least one run")
    if not keys:
        raise ValueError("plot_runs needs at least one key")
    if not 0 <= smooth < 1:
        raise ValueError(f"smooth must be in [0, 1), got {smooth!r}")
    names = list(labels) if labels is not None else [str(run) for run in runs]
    if len(names) != len(runs):
        raise ValueError(f"{len(names)} labels for {len(runs)} runs")
    for run in runs:
        run_files(run)  # every path is checked before the first is read
    figure_cls, canvas_cls = _matplotlib()

    series: list[Series] = []
    skipped: dict[str, Skipped] = {}
    not_drawn: dict[str, int] = {}
    alerts: list[AlertMark] = []
    events = [event, "eval"] if with_eval and event == "train_step" else [event]
    for run, name in zip(runs, names, strict=True):
        run_series, skipped[name], more = _collect(run, name, keys, x, events, rank, smooth, roles, alerts)
        series += run_series
        if more:
            not_drawn[name] = more
    if not any(len(one.y) for one in series):
        raise NothingToPlot(
            f"no {event} record in {', '.join(names)} has a numeric {x!r} and any of {', '.join(keys)}"
        )

    figure = figure_cls(figsize=(8, 2.6 * len(keys) + 0.6), dpi=dpi, layout="constrained")
    canvas_cls(figure)
    axes = figure.subplots(len(keys), 1, sharex=True, squeeze=False)[:, 0]
    labels_drawn = list(dict.fromkeys(one.run for one in series))  # a run's (or rank's) colour in every panel
    colors = {name: f"C{index % 10}" for index, name in enumerate(labels_drawn)}
    for ax, key in zip(axes, keys, strict=True):
        _panel(ax, key, [s for s in series if s.key == key], event, colors, smooth, log_y)
        _mark_alerts(ax, key, alerts, roles if roles is not None else Roles())
    axes[-1].set_xlabel(x)
    figure.suptitle(title if title is not None else _title(names, event))
    if not_drawn:
        figure.text(
            0.01, 0.005, _not_drawn_note(not_drawn), fontsize="small", ha="left", va="bottom", color="0.4"
        )
    path = Path(out)
    figure.savefig(path, format=fmt)
    return PlotResult(path, series, skipped, not_drawn, alerts)


def _not_drawn_note(not_drawn: dict[str, int]) -> str:
    parts = [f"{name}: {count:,} more rank(s) not drawn" for name, count in not_drawn.items()]
    return f"{'; '.join(parts)} (the first {MAX_RANK_SERIES} are; choose one with --rank N)"


def _panel(
    ax: Any, key: str, series: list[Series], event: str, colors: dict[str, str], smooth: float, log_y: bool
) -> None:
    ax.set_ylabel(key)
    ax.grid(True, alpha=0.3)
    drawn = [s for s in series if len(s.y)]
    if not drawn:
        ax.text(0.5, 0.5, f"no {key!r} in any run", ha="center", va="center", transform=ax.transAxes)
        return
    for one in drawn:
        style = {"color": colors[one.run], "marker": "." if len(one.y) <= _MARKERS_UP_TO else None}
        label = one.run if one.source in ("", key) else f"{one.run} {one.source}"
        if one.split is not None and (one.event != event or one.split != "eval"):  # held out, dashed
            ax.plot(one.x, one.y, linewidth=1.5, linestyle="--", label=f"{label} ({one.split})", **style)
        elif smooth:
            ax.plot(one.x, one.y, alpha=0.25, linewidth=1, color=style["color"])
            ax.plot(one.smoothed.x, one.smoothed.y, linewidth=1.5, label=label, **style)
        else:
            ax.plot(one.x, one.y, linewidth=1.5, label=label, **style)
    if log_y:
        ax.set_yscale("log")
    ax.legend(loc="best", fontsize="small")


_ALERT_COLORS = {"warning": "tab:orange", "error": "tab:red"}


def _mark_alerts(ax: Any, key: str, alerts: list[AlertMark], roles: Roles) -> None:
    """A dotted vertical line at each alert on the loss panel, the rate panels and the panel of the
    alert's own key; orange for a warning, red for an error; ``gid`` ``alert-<rule>-<x>`` (in an SVG)."""
    if not alerts:
        return
    every = key == "loss" or roles.is_rate(key)
    labelled: set[str] = set()
    for mark in alerts:
        if every or mark.key == key:
            label = None if mark.severity in labelled else f"alert ({mark.severity})"
            labelled.add(mark.severity)
            line = ax.axvline(
                mark.x, color=_ALERT_COLORS.get(mark.severity, "tab:orange"), linestyle=":", linewidth=1,
                alpha=0.8, label=label,
            )  # fmt: skip
            line.set_gid(f"alert-{mark.rule}-{mark.x:g}")
    if labelled:
        ax.legend(loc="best", fontsize="small")


def _title(names: list[str], event: str) -> str:
    shown = ", ".join(names) if len(names) <= 3 else f"{names[0]} and {len(names) - 1} more runs"
    return f"{shown} ({event})"


def _matplotlib() -> tuple[Any, Any]:
    agg = require("matplotlib.backends.backend_agg", "plot", needed_by="speedtronic plot")
    figure = require("matplotlib.figure", "plot", needed_by="speedtronic plot")
    return figure.Figure, agg.FigureCanvasAgg
