"""What the run-reading commands share: the ``--rank`` argument, the role overrides (``--loss``,
``--lr``, ``--rates``), folders of runs, and the report of what was skipped."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from speedtronic.commands.cli import CommandError
from speedtronic.runs.reader import RankChoice, Skipped
from speedtronic.runs.roles import Roles

__all__ = [
    "add_rank_argument",
    "add_role_arguments",
    "rank_choice",
    "report_skipped",
    "roles_chosen",
    "runs_in",
]


def add_rank_argument(parser: argparse.ArgumentParser, *, several: bool = False) -> None:
    """``--rank N|all``; with ``several``, ``--rank N,M,...`` too (a comma-separated list, as ``--keys``)."""
    parser.add_argument(
        "--rank",
        default="first",
        metavar="N[,N...]|all" if several else "N|all",
        help=f"read the records of rank N{', of the ranks listed' if several else ''}, or of every rank "
        "(default: the rank of the first record; records without a rank are rank 0)",
    )


def add_role_arguments(parser: argparse.ArgumentParser) -> None:
    """``--loss KEY``, ``--lr KEY[,KEY...]``, ``--rates KEY[,KEY...]``: which keys play those roles
    (default: ``speedtronic.runs.roles``' table: HF, Lightning and torchtune names included)."""
    parser.add_argument("--loss", metavar="KEY", help="the key to read as the loss (default: by role)")
    parser.add_argument(
        "--lr", metavar="KEY[,KEY...]", help="the keys to read as learning rates (default: by role)"
    )
    parser.add_argument(
        "--rates", metavar="KEY[,KEY...]", help="the keys to read as throughput rates (default: by role)"
    )


def roles_chosen(args: argparse.Namespace) -> Roles:
    """The ``Roles`` the role arguments name; a ``CommandError`` for one that names no key."""
    if args.loss is not None and not args.loss.strip():
        raise CommandError("--loss: name a key")
    return Roles(loss=args.loss, lr=_keys(args.lr, "--lr"), rates=_keys(args.rates, "--rates"))


def _keys(text: str | None, option: str) -> list[str] | None:
    if text is None:
        return None
    keys = [key.strip() for key in text.split(",") if key.strip()]
    if not keys:
        raise CommandError(f"{option}: name at least one key")
    return keys


def rank_choice(text: str, *, several: bool = False) -> RankChoice:
    """``--rank``'s value: ``first``, ``all``, a rank, or (with ``several``) ranks separated by commas."""
    if text == "first":
        return "first"
    if text == "all":
        return "all"
    parts = [part.strip() for part in text.split(",")] if several else [text.strip()]
    if all(part.isdecimal() for part in parts):
        ranks = [int(part) for part in parts]
        return ranks if len(ranks) > 1 else ranks[0]
    expected = "a rank (an integer >= 0)" + (", ranks separated by commas" if several else "")
    raise CommandError(f"--rank: expected {expected} or 'all', got {text!r}")


def report_skipped(run: str, skipped: Skipped, stream: IO[str] | None = None) -> None:
    """Say on stderr what a read of ``run`` left out, one line per file and per left-out rank."""
    for line in skipped.describe(run):
        print(f"speedtronic: warning: {line}", file=stream or sys.stderr)


def runs_in(paths: Sequence[str]) -> list[str]:
    """The runs named by ``paths``: each path as given, except a folder of runs (a directory with no
    ``*.jsonl`` file of its own whose subdirectories hold some, such as the ``runs/`` folder that
    ``speedtronic train`` writes into), which stands for those subdirectories, in name order."""
    found: list[str] = []
    for path in paths:
        inside = _runs_inside(Path(path))
        if inside:
            found += [str(Path(path) / name) for name in inside]
        else:
            found.append(path)
    return found


def _runs_inside(folder: Path) -> list[str]:
    try:
        if not folder.is_dir() or any(entry.suffix == ".jsonl" for entry in folder.iterdir()):
            return []
        return sorted(
            entry.name for entry in folder.iterdir()
            if entry.is_dir() and any(child.suffix == ".jsonl" for child in entry.iterdir())
        )  # fmt: skip
    except OSError:
        return []  # reading the path itself says what is wrong with it
