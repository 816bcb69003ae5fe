"""``speedtronic summarize RUN...``: a compact table of what each run did, or ``--json``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from speedtronic.commands._runs import (
    AlertsFile,
    add_alerts_argument,
    add_rank_argument,
    add_role_arguments,
    check_peak_flops,
    rank_choice,
    read_alerts_file,
    report_skipped,
    roles_chosen,
    runs_in,
)
from speedtronic.commands.cli import CommandError
from speedtronic.runs.backtest import run_alerts
from speedtronic.runs.health import format_health, format_stragglers, run_health
from speedtronic.runs.reader import RankChoice, RunError
from speedtronic.runs.summary import available_workers, format_summaries, summarize_run

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "summarize",
        help="summarise recorded runs: events, steps, loss, throughput, checkpoints, trouble",
        description="Summarise one or more runs (JSONL files or run directories), side by side. A folder "
        "of runs (runs/, holding run directories) stands for every run in it.",
    )
    parser.add_argument(
        "runs", nargs="+", metavar="RUN", help="a JSONL file, a run directory or a folder of runs"
    )
    parser.add_argument("--json", action="store_true", help="print a JSON array, one object per run")
    add_rank_argument(parser)
    add_role_arguments(parser)
    add_alerts_argument(parser, "list the alerts each run would have raised (and each rank's)")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="processes that read a run's files and parts of its large files at once (default: one per "
        "CPU this process may use; 1 reads in this process only)",
    )
    parser.add_argument(
        "--health",
        action="store_true",
        help="also where the time went (goodput), tokens/s, MFU, step time and memory, from the timing keys",
    )
    parser.add_argument(
        "--peak-flops",
        type=float,
        default=None,
        metavar="FLOPS",
        help="the device's peak FLOP/s for MFU, over what the run recorded (e.g. 989e12: H100 bf16)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Summarise every run that can be read; list the others. Fails only if none can be read."""
    paths = runs_in(args.runs)
    rank = rank_choice(args.rank, paths)
    roles = roles_chosen(args)
    if args.workers is not None and args.workers < 1:
        raise CommandError(f"--workers: expected a positive integer, got {args.workers}")
    workers = args.workers if args.workers is not None else available_workers()
    alerts = read_alerts_file(args.alerts) if args.alerts is not None else None
    check_peak_flops(args.peak_flops)
    summaries, unreadable = [], []
    for path in paths:
        try:
            stragglers = args.health and rank == "all"  # summed in the summary's pass
            summaries.append(
                summarize_run(path, rank=rank, workers=workers, roles=roles, stragglers=stragglers)
            )
        except RunError as error:
            unreadable.append(str(error))
    if not summaries:
        if len(unreadable) == 1:
            raise CommandError(unreadable[0])
        for problem in unreadable:
            print(f"speedtronic: {problem}", file=sys.stderr)
        raise CommandError(f"none of the {len(unreadable)} runs could be read")
    derived = {s.run: _derived(s.run, alerts, rank) for s in summaries} if alerts is not None else {}
    rows = [s.as_dict() for s in summaries]
    if alerts is not None:
        for row, summary in zip(rows, summaries, strict=True):
            row["derived_alerts"] = derived[summary.run]
    healths = []
    health_lines: dict[str, str] = {}
    if args.health:  # one rank's figures: the one asked for, else the first
        one: RankChoice = rank if isinstance(rank, int) else "first"
        for row, summary in zip(rows, summaries, strict=True):
            health = run_health(summary.run, rank=one, peak_flops=args.peak_flops, roles=roles)
            healths.append(health)
            row["health"] = health.as_dict()
            if rank == "all":  # the ranks that hold the others back
                assert summary.rank_times is not None  # asked for above
                found = summary.rank_times.stragglers()
                row["health"]["stragglers"] = [item.as_dict() for item in found]
                health_lines[summary.run] = format_stragglers(found, len(summary.rank_times.sums))
    if args.json:
        print(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
    else:
        print(format_summaries(summaries))
        if alerts is not None:
            print(_alerts_text(derived, alerts))
        for health in healths:
            print(format_health(health))
            if health.run in health_lines:
                print(health_lines[health.run])
    sys.stdout.flush()  # the table first, then what was skipped, also on a terminal
    for summary in summaries:
        report_skipped(summary.run, summary.skipped)
    for problem in unreadable:
        print(f"speedtronic: warning: not summarised: {problem}", file=sys.stderr)
    return 0


def _derived(run: str, alerts: AlertsFile, rank: RankChoice) -> list[dict[str, Any]]:
    """The alert payloads ``alerts``' rules raise over ``run`` (every rank unless ``--rank`` says)."""
    chosen: RankChoice = "all" if rank == "first" else rank
    try:
        return [payload for _, payload in run_alerts(run, alerts.rules, rank=chosen)]
    except RunError as error:
        raise CommandError(str(error)) from None


def _alerts_text(derived: dict[str, list[dict[str, Any]]], alerts: AlertsFile) -> str:
    """One block per run: its re-derived alerts, one line each, with the rank where the run has several."""
    lines = []
    for run, payloads in derived.items():
        lines.append(f"\nalerts re-derived with {alerts.path}: {run}: {len(payloads)}")
        for payload in payloads:
            rank = f"rank {payload['rank']} " if "rank" in payload else ""
            lines.append(f"  {rank}{payload['severity']:<7} {payload['rule']}: {payload['message']}")
    return "\n".join(lines)
