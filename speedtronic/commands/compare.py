"""``speedtronic compare A B [C ...]``: runs side by side (loss, tokens/s, MFU, goodput, memory, step
time), and with ``--max-regression 5%`` a CI gate: exit 1 when a later run's step time or tokens/s is
worse than the first run's by more than that at 95% confidence (``speedtronic.runs.health.slowdown``).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import orjson

from speedtronic.commands._runs import add_role_arguments, check_peak_flops, roles_chosen, runs_in
from speedtronic.commands.cli import CommandError
from speedtronic.runs.health import DEFAULT_WARMUP_STEPS, RunHealth, Slowdown, run_health, slowdown
from speedtronic.runs.reader import RunError

__all__ = ["add_parser", "parse_percent", "run"]


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="runs side by side (loss, tokens/s, MFU, goodput, memory, step time); a regression gate for CI",
        description="Compare runs with the first one (the baseline): final and best loss, tokens/s, MFU, "
        "goodput, peak memory and median step time. With --max-regression, exit 1 when a run's step time "
        "or tokens/s is worse than the baseline's by more than the limit at 95%% confidence (bootstrap "
        "over per-step values, each segment's warm-up left out, seeded: the same runs give the same "
        "answer).",
    )
    parser.add_argument(
        "runs", nargs="+", metavar="RUN", help="a JSONL file or a run directory; the first is A"
    )
    parser.add_argument(
        "--max-regression",
        default=None,
        metavar="PCT",
        help="the slowdown allowed, e.g. 5%% or 0.05: exit 1 when a run is worse by more, at 95%% confidence",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=DEFAULT_WARMUP_STEPS,
        metavar="N",
        help=f"steps left out at the start of each segment (default {DEFAULT_WARMUP_STEPS})",
    )
    parser.add_argument("--peak-flops", type=float, default=None, metavar="FLOPS", help="peak FLOP/s for MFU")
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object: the runs and the verdicts"
    )
    add_role_arguments(parser)
    parser.set_defaults(func=run)


def parse_percent(text: str) -> float:
    """``"5%"`` -> 0.05, ``"0.05"`` -> 0.05; anything else, or a negative limit, is a ``ValueError``."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise ValueError(f"expected a percentage such as 5% or 0.05, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise ValueError(f"expected a percentage >= 0, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    if len(args.runs) < 2:
        raise CommandError(f"compare needs at least two runs (A B [C ...]), got {len(args.runs)}")
    if args.warmup < 0:
        raise CommandError(f"--warmup: expected an integer >= 0, got {args.warmup}")
    check_peak_flops(args.peak_flops)
    limit = None
    if args.max_regression is not None:
        try:
            limit = parse_percent(args.max_regression)
        except ValueError as error:
            raise CommandError(f"--max-regression: {error}") from None
    roles = roles_chosen(args)
    for path in args.runs:
        inside = runs_in([path])
        if inside != [path]:  # a folder of runs: which is the baseline is the user's choice
            shown = " ".join(inside[:3]) + (" ..." if len(inside) > 3 else "")
            raise CommandError(f"{path}: a folder of runs; compare takes runs, the baseline first: {shown}")
    healths = []
    for path in args.runs:
        try:
            healths.append(
                run_health(path, peak_flops=args.peak_flops, warmup_steps=args.warmup, roles=roles)
            )
        except RunError as error:
            raise CommandError(str(error)) from None
    baseline = healths[0]
    verdicts = [(health, _slowdowns(baseline, health)) for health in healths[1:]]
    regressed = limit is not None and any(item.regressed(limit) for _, found in verdicts for item in found)
    if args.json:
        document = {
            "runs": [health.as_dict() for health in healths],
            "comparisons": [
                {"baseline": baseline.run, "run": health.run, "slowdowns": [_slowdown_dict(s) for s in found]}
                for health, found in verdicts
            ],
            "max_regression": limit,
            "regressed": regressed,
        }
        print(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode())
    else:
        print(_table(healths))
        for health, found in verdicts:
            print(_verdict(baseline, health, found, limit))
    ungated = next((health for health, found in verdicts if not found), None)
    if limit is not None and ungated is not None:  # a gate that can't look must not pass
        raise CommandError(
            f"--max-regression: {ungated.run} vs {baseline.run}: no per-step times or rates in both runs "
            f"after each segment's warm-up (--warmup {args.warmup}): nothing to gate on"
        )
    return 1 if regressed else 0


def _slowdowns(baseline: RunHealth, candidate: RunHealth) -> list[Slowdown]:
    found = [
        slowdown("step time", baseline.step_times, candidate.step_times),
        slowdown("tokens/s", baseline.rates, candidate.rates, higher_is_better=True),
    ]
    return [item for item in found if item is not None]


def _slowdown_dict(found: Slowdown) -> dict[str, Any]:
    return {"figure": found.figure, "ratio": found.ratio, "low": found.low, "high": found.high}


def _verdict(baseline: RunHealth, candidate: RunHealth, found: list[Slowdown], limit: float | None) -> str:
    lines = [f"{candidate.run} vs {baseline.run}:"]
    if not found:
        lines.append("  no per-step times or rates in both runs: nothing to compare")
    for item in found:
        change, low, high = _change(item)
        line = (
            f"  {item.figure:<9} {change:+.1f}% ({_word(item.ratio)})"
            f" (95% interval {low:+.1f}% to {high:+.1f}%)"
        )
        if limit is not None:
            if item.regressed(limit):
                line += f": REGRESSION over {100 * limit:g}%"
            elif item.ratio > 1:  # worse, but the interval reaches below the limit
                line += f": not shown to be over {100 * limit:g}% at 95% confidence"
            else:
                line += ": no regression"
        lines.append(line)
    return "\n".join(lines)


def _word(ratio: float) -> str:
    return "slower" if ratio > 1 else "faster" if ratio < 1 else "the same"


def _change(item: Slowdown) -> tuple[float, float, float]:
    """The change of the figure itself, in percent, and its interval: the step time's ratio as it is;
    for tokens/s (``Slowdown.ratio`` is baseline over candidate: worse above 1) the rate's own change,
    so a run with 2.2 times the rate reads +120%, not -55%."""
    if item.figure == "step time":
        return 100 * (item.ratio - 1), 100 * (item.low - 1), 100 * (item.high - 1)
    return _rate_change(item.ratio), _rate_change(item.high), _rate_change(item.low)


def _rate_change(ratio: float) -> float:
    """The rate's change in percent for a ``Slowdown.ratio`` of tokens/s (baseline over candidate)."""
    return 100 * (1 / ratio - 1) if ratio > 0 else math.inf


def _table(healths: list[RunHealth]) -> str:
    rows: list[tuple[str, list[str]]] = [
        ("run", [h.run for h in healths]),
        ("loss final", [_number(h.final_loss) for h in healths]),
        ("loss best", [_number(h.best_loss) for h in healths]),
        ("tokens/s", [_number(h.tokens_per_s, ",.1f") for h in healths]),
        ("MFU", [_percent(h.mfu, ".2f") for h in healths]),
        ("goodput", [_percent(h.goodput, ".1f") for h in healths]),
        ("peak memory", [_mib(h.peak_allocated_bytes) for h in healths]),
        ("step time (median)", [_milliseconds(h.median_step_s) for h in healths]),
        ("steps", [str(h.steps) for h in healths]),
    ]
    width = max(len(name) for name, _ in rows) + 2
    columns = [max(len(values[i]) for _, values in rows) + 2 for i in range(len(healths))]
    return "\n".join(
        name.ljust(width) + "".join(value.ljust(columns[i]) for i, value in enumerate(values)).rstrip()
        for name, values in rows
    )


def _number(value: float | None, spec: str = ".4g", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def _milliseconds(value: float | None) -> str:
    return "-" if value is None else f"{1000 * value:.3f} ms"


def _percent(value: float | None, spec: str) -> str:
    return "-" if value is None else f"{100 * value:{spec}}%"


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.1f} MiB"
