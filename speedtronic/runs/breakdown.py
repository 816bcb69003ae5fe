"""``plot_breakdown``: where each run's wall time went, as one stacked bar per run (PNG, PDF or SVG)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from speedtronic.extras import require
from speedtronic.runs.health import PARTS, RunHealth, run_health

__all__ = ["plot_breakdown"]

_FORMATS = ("png", "pdf", "svg")


def plot_breakdown(
    runs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], *, dpi: int = 120
) -> list[RunHealth]:
    """Draw each run's time breakdown to ``out`` (its suffix picks the format); returns the figures
    drawn. A bad suffix is a ``ValueError``; a run that can't be read a ``RunError``."""
    fmt = Path(out).suffix.lstrip(".").lower()
    if fmt not in _FORMATS:
        raise ValueError(f"{out}: end the name with {', '.join('.' + f for f in _FORMATS)}")
    if not runs:
        raise ValueError("plot_breakdown needs at least one run")
    healths = [run_health(run) for run in runs]
    figure_module = require("matplotlib.figure", "plot", needed_by="speedtronic plot --breakdown")
    agg = require("matplotlib.backends.backend_agg", "plot", needed_by="speedtronic plot --breakdown")
    figure = figure_module.Figure(figsize=(9, 1.0 + 0.6 * len(healths)), dpi=dpi, layout="constrained")
    agg.FigureCanvasAgg(figure)
    ax = figure.subplots()
    names = [health.run for health in healths]
    left = [0.0] * len(healths)
    for index, part in enumerate(PARTS):
        widths = [getattr(health, part) for health in healths]
        bars = ax.barh(names, widths, left=left, color=f"C{index}", label=part.removesuffix("_s"))
        for bar, width, health in zip(bars, widths, healths, strict=True):
            if health.wall_s and width / health.wall_s >= 0.06:
                middle = (bar.get_x() + width / 2, bar.get_y() + bar.get_height() / 2)
                share = f"{100 * width / health.wall_s:.0f}%"
                ax.text(*middle, share, ha="center", va="center", fontsize="small")
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel("seconds of wall time")
    # below the axes and their label, in the room constrained layout makes for it (matplotlib >= 3.7)
    figure.legend(loc="outside lower center", ncol=len(PARTS), fontsize="small")
    ax.set_title("where the time went (goodput: productive / wall time)")
    figure.savefig(Path(out), format=fmt)
    return healths
