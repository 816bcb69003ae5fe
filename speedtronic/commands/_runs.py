"""What the run-reading commands share: the ``--rank`` argument and the report of what was skipped."""

from __future__ import annotations

import argparse
import sys
from typing import IO

from speedtronic.commands.cli import CommandError
from speedtronic.runs import RankChoice, Skipped

__all__ = ["add_rank_argument", "rank_choice", "report_skipped"]


def add_rank_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rank",
        default="first",
        metavar="N|all",
        help="read the records of rank N, or of every rank (default: the rank of the first record; "
        "records without a rank are rank 0)",
    )


def rank_choice(text: str) -> RankChoice:
    if text == "first":
        return "first"
    if text == "all":
        return "all"
    try:
        return int(text)
    except ValueError:
        raise CommandError(f"--rank: expected an integer or 'all', got {text!r}") from None


def report_skipped(run: str, skipped: Skipped, stream: IO[str] | None = None) -> None:
    """Say on stderr what a read of ``run`` left out, one line per file and per left-out rank."""
    for line in skipped.describe(run):
        print(f"speedtronic: warning: {line}", file=stream or sys.stderr)
