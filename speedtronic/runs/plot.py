"""``plot_runs``: chosen keys of one or more runs as a PNG, PDF or SVG, one panel per key, runs overlaid.

A resumed run is drawn as one line: against ``elapsed_s`` the time is cumulative over the run's
segments (``speedtronic.runs.RunClock``), and against ``step`` a step recorded again after a restart
replaces the points recorded from it on before (the latest record of a step wins).

Plotting ``train_step`` records, the ``eval`` records' values of the same keys (the held-out ``loss``)
are drawn in the same panel, dashed, in the run's colour (``with_eval=False`` leaves them out; an
``eval`` of ``split="test"`` is never drawn there).

matplotlib is imported only here, and only its object-oriented API is used (``Figure`` rendered by the
Agg canvas): no display, no pyplot, and the caller's matplotlib backend is left alone. Records are
streamed; only the points themselves are kept, as arrays of doubles (16 bytes a point).
"""

from __future__ import annotations

import math
import os
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speedtronic.runs.reader import RankChoice, RunClock, Skipped, as_number, read_records, run_files

__all__ = ["DEFAULT_KEYS", "FORMATS", "NothingToPlot", "PlotResult", "Series", "ema", "plot_runs"]

DEFAULT_KEYS = ("loss", "lr")
FORMATS = ("png", "pdf", "svg")
"""What ``plot_runs`` writes, chosen by the output's suffix."""
_MARKERS_UP_TO = 50
"""Series this short get a marker per point, so a lone point (or one between gaps) is visible."""


class NothingToPlot(ValueError):
    """No run has a single point for any of the keys: no PNG is written."""


@dataclass
class Series:
    """One key of one run: its points in record order."""

    run: str
    key: str
    event: str = "train_step"
    """The records the points come from."""
    x: array[float] = field(default_factory=lambda: array("d"))
    y: array[float] = field(default_factory=lambda: array("d"))
    non_finite: int = 0
    """Points whose value was NaN or infinite: drawn as a gap."""

    def rewind(self, x: float) -> None:
        """Drop the points at ``x`` and after: a restarted run records them again."""
        keep = len(self.x)
        while keep and self.x[keep - 1] >= x:
            keep -= 1
        if keep < len(self.x):
            self.non_finite -= sum(1 for y in self.y[keep:] if math.isnan(y))
            del self.x[keep:]
            del self.y[keep:]

    def add(self, x: float, y: float) -> None:
        if not math.isfinite(y):
            self.non_finite += 1
            y = math.nan
        self.x.append(x)
        self.y.append(y)


@dataclass
class PlotResult:
    """What ``plot_runs`` drew: every series (empty ones included) and what each read skipped."""

    path: Path
    series: list[Series]
    skipped: dict[str, Skipped]

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


def _collect(
    path: str | os.PathLike[str],
    label: str,
    keys: Sequence[str],
    x: str,
    events: Sequence[str],
    rank: RankChoice,
) -> tuple[list[Series], Skipped]:
    """The series of ``keys`` for each of ``events`` (the first one's first), read in one pass."""
    series = {event: [Series(label, key, event) for key in keys] for event in events}
    skipped = Skipped()
    clock = RunClock()
    for record in read_records(path, skipped, rank=rank):
        since_start = clock.add(record)  # every record: a segment's time counts even without points
        if record.event not in series:
            continue
        if record.event == "eval" and record.payload.get("split") == "test":
            continue
        xv = since_start if x == "elapsed_s" else as_number(record.payload.get(x))
        if xv is None or not math.isfinite(xv):
            continue
        for one in series[record.event]:
            if x == "step":
                one.rewind(xv)
            yv = as_number(record.payload.get(one.key))
            if yv is not None:
                one.add(xv, yv)
    return [one for event in events for one in series[event]], skipped


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
) -> PlotResult:
    """Draw ``keys`` of the ``event`` records of each run against ``x`` and save the figure to ``out``,
    in the format its suffix names (``FORMATS``).

    ``smooth`` (0 <= smooth < 1) is TensorBoard's smoothing weight: the smoothed line is drawn over
    the raw one, which is kept faint. Keys are plotted even when some runs lack them; a key no run has
    gets a panel saying so. With ``event="train_step"`` and ``with_eval``, the ``eval`` records' values
    of the same keys are drawn dashed beside each run's line. Raises ``speedtronic.runs.RunError``
    for a run that can't be read,
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

    events = [event, "eval"] if with_eval and event == "train_step" else [event]
    series: list[Series] = []
    skipped: dict[str, Skipped] = {}
    for run, name in zip(runs, names, strict=True):
        run_series, skipped[name] = _collect(run, name, keys, x, events, rank)
        series += [one for one in run_series if one.event == event or len(one.y)]  # eval: only if any
    if not any(len(one.y) for one in series):
        raise NothingToPlot(
            f"no {event} record in {', '.join(names)} has a numeric {x!r} and any of {', '.join(keys)}"
        )

    figure = figure_cls(figsize=(8, 2.6 * len(keys) + 0.6), dpi=dpi, layout="constrained")
    canvas_cls(figure)
    axes = figure.subplots(len(keys), 1, sharex=True, squeeze=False)[:, 0]
    colors = {name: f"C{index % 10}" for index, name in enumerate(names)}  # a run's colour in every panel
    for ax, key in zip(axes, keys, strict=True):
        _panel(ax, key, [s for s in series if s.key == key], event, colors, smooth, log_y)
    axes[-1].set_xlabel(x)
    figure.suptitle(title if title is not None else _title(names, event))
    path = Path(out)
    figure.savefig(path, format=fmt)
    return PlotResult(path, series, skipped)


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
        if one.event != event:  # eval beside train_step
            ax.plot(one.x, one.y, linewidth=1.5, linestyle="--", label=f"{one.run} (eval)", **style)
        elif smooth:
            ax.plot(one.x, one.y, alpha=0.25, linewidth=1, color=style["color"])
            ax.plot(one.x, ema(one.y, smooth), linewidth=1.5, label=one.run, **style)
        else:
            ax.plot(one.x, one.y, linewidth=1.5, label=one.run, **style)
    if log_y:
        ax.set_yscale("log")
    ax.legend(loc="best", fontsize="small")


def _title(names: list[str], event: str) -> str:
    shown = ", ".join(names) if len(names) <= 3 else f"{names[0]} and {len(names) - 1} more runs"
    return f"{shown} ({event})"


def _matplotlib() -> tuple[Any, Any]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "speedtronic plot requires matplotlib: pip install 'speedtronic[plot]'", name="matplotlib"
        ) from error
    return Figure, FigureCanvasAgg
