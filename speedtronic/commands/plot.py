"""``speedtronic plot RUN... -o out.png``: chosen keys against step or time, runs overlaid."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from speedtronic.commands._runs import (
    add_rank_argument,
    add_role_arguments,
    rank_choice,
    report_skipped,
    roles_chosen,
    runs_in,
)
from speedtronic.commands.cli import CommandError
from speedtronic.runs.plot import DEFAULT_KEYS, MAX_RANK_SERIES, NothingToPlot, plot_runs
from speedtronic.runs.reader import RunError

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plot",
        help="plot keys of recorded runs to a PNG, PDF or SVG",
        description="Plot keys of one or more runs (JSONL files or run directories) to a PNG, PDF or "
        "SVG (by the output's suffix), one panel per key, runs overlaid. A folder of runs (runs/, holding "
        "run directories) stands for every run in it.",
    )
    parser.add_argument(
        "runs", nargs="+", metavar="RUN", help="a JSONL file, a run directory or a folder of runs"
    )
    parser.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="the file to write: .png, .pdf or .svg"
    )
    parser.add_argument(
        "--keys",
        default=",".join(DEFAULT_KEYS),
        help=f"comma-separated payload keys, one panel each; loss and lr are found by role, whatever the "
        f"framework named them (default: {','.join(DEFAULT_KEYS)})",
    )
    parser.add_argument("--x", default="step", help="the x axis: step (default), elapsed_s or any key")
    parser.add_argument("--event", default="train_step", help="which records (default: train_step)")
    parser.add_argument(
        "--smooth",
        type=float,
        default=0.0,
        metavar="W",
        help="TensorBoard-style smoothing weight in [0, 1) (default: 0, none)",
    )
    parser.add_argument(
        "--no-eval",
        action="store_true",
        help="with --event train_step: leave out the eval records' values drawn dashed beside it",
    )
    parser.add_argument("--log-y", action="store_true", help="logarithmic y axes")
    parser.add_argument("--title", help="the figure's title (default: the runs and the event)")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="draw where each run's wall time went instead: a stacked bar per run (goodput's parts)",
    )
    add_rank_argument(parser, several=True)
    add_role_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.breakdown:
        return _breakdown(args)
    keys = [key.strip() for key in args.keys.split(",") if key.strip()]
    if not keys:
        raise CommandError("--keys: name at least one key")
    if not 0 <= args.smooth < 1:
        raise CommandError(f"--smooth: expected a weight in [0, 1), got {args.smooth}")
    runs = runs_in(args.runs)
    rank = rank_choice(args.rank, runs, several=True)
    try:
        result = plot_runs(
            runs,
            args.output,
            keys=keys,
            x=args.x,
            event=args.event,
            smooth=args.smooth,
            log_y=args.log_y,
            title=args.title,
            rank=rank,
            with_eval=not args.no_eval,
            roles=roles_chosen(args),
        )
    except (RunError, NothingToPlot, ModuleNotFoundError, ValueError) as error:
        raise CommandError(str(error)) from None
    except OSError as error:
        raise CommandError(f"{args.output}: can't write the plot: {error.strerror or error}") from None
    for name, skipped in result.skipped.items():
        report_skipped(name, skipped)
    for series in result.series:
        if series.non_finite:
            print(
                f"speedtronic: warning: {series.run}: {series.non_finite:,} non-finite {series.key!r} "
                f"{'' if series.event == args.event else f'({series.event}) '}value(s) drawn as gaps",
                file=sys.stderr,
            )
    for name, count in result.ranks_not_drawn.items():
        print(
            f"speedtronic: warning: {name}: {count:,} more rank(s) not drawn: --rank all draws the first "
            f"{MAX_RANK_SERIES}; choose one with --rank N",
            file=sys.stderr,
        )
    for key in result.empty_keys():
        print(
            f"speedtronic: warning: no run has a number under {key!r} in its {args.event} records",
            file=sys.stderr,
        )
    print(f"wrote {result.path}", file=sys.stderr)
    return 0


def _breakdown(args: argparse.Namespace) -> int:
    """``plot --breakdown``: the time-breakdown bars (``speedtronic.runs.breakdown``)."""
    from speedtronic.runs.breakdown import plot_breakdown

    try:
        plot_breakdown(runs_in(args.runs), args.output)
    except (RunError, ModuleNotFoundError, ValueError) as error:
        raise CommandError(str(error)) from None
    except OSError as error:
        raise CommandError(f"{args.output}: can't write the plot: {error.strerror or error}") from None
    print(f"wrote {args.output}", file=sys.stderr)
    return 0
