"""``speedtronic replay RUN --tensorboard DIR | --wandb PROJECT``: a recorded run, as if logged live."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from speedtronic.commands._runs import add_rank_argument, rank_choice, report_skipped
from speedtronic.commands.cli import CommandError
from speedtronic.runs import RunError, run_files
from speedtronic.runs.replay import ReplayRefused, replay_run, tensorboard_hook, wandb_hook

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="push a recorded run into TensorBoard or W&B, as the live hooks would have",
        description="Replay a recorded run (a JSONL file or run directory) through speedtronic's "
        "TensorBoard and/or W&B hooks: same tags, steps and values as a live run.",
    )
    parser.add_argument("run", metavar="RUN", help="a JSONL file or a run directory")
    parser.add_argument("--tensorboard", metavar="DIR", help="write a TensorBoard event file in DIR")
    parser.add_argument(
        "--append", action="store_true", help="write into a TensorBoard DIR that already holds events"
    )
    parser.add_argument("--wandb", metavar="PROJECT", help="log a new W&B run in PROJECT")
    parser.add_argument(
        "--wandb-mode", choices=("online", "offline"),
        help="W&B mode (default: W&B's own, e.g. WANDB_MODE); offline writes a run to sync later",
    )
    parser.add_argument("--wandb-dir", metavar="DIR", help="where W&B keeps its files (wandb.init dir=)")
    parser.add_argument("--name", help="the W&B run's name (default: W&B's)")
    add_rank_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.tensorboard is None and args.wandb is None:
        raise CommandError("replay: name a target, --tensorboard DIR and/or --wandb PROJECT")
    rank = rank_choice(args.rank)
    hooks: list[Any] = []
    try:
        run_files(args.run)  # a run that can't be read creates no target
        if args.tensorboard is not None:
            hooks.append(tensorboard_hook(args.tensorboard, append=args.append))
        if args.wandb is not None:
            init = {"mode": args.wandb_mode, "dir": args.wandb_dir, "name": args.name}
            hooks.append(wandb_hook(args.wandb, **{k: v for k, v in init.items() if v is not None}))
        result = replay_run(args.run, hooks, rank=rank)
    except (RunError, ReplayRefused, ModuleNotFoundError) as error:
        for hook in hooks:  # a target created before the failure is closed, not left half-open
            hook.close()
        raise CommandError(str(error)) from None
    report_skipped(args.run, result.skipped)
    if result.not_replayed:
        counts = ", ".join(f"{event} {n:,}" for event, n in result.not_replayed.items())
        print(f"speedtronic: not replayed (the logger's own records, never sent to hooks): {counts}",
              file=sys.stderr)
    targets = [f"TensorBoard {args.tensorboard}"] if args.tensorboard is not None else []
    targets += [f"W&B project {args.wandb}"] if args.wandb is not None else []
    print(f"replayed {result.replayed.total():,} records of {args.run} to {' and '.join(targets)}",
          file=sys.stderr)
    return 0
