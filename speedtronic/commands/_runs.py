"""What the run-reading commands share: the ``--rank`` argument, the role overrides (``--loss``,
``--lr``, ``--rates``), folders of runs, and the report of what was skipped."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from speedtronic.alerts import AlertConfigError, Rule, alerts_section, rules_from_config
from speedtronic.commands.cli import CommandError
from speedtronic.runs.reader import RankChoice, RunError, Skipped, read_records
from speedtronic.runs.roles import Roles
from speedtronic.runs.table import ranks_text

__all__ = [
    "AlertsFile",
    "add_alerts_argument",
    "add_rank_argument",
    "add_role_arguments",
    "check_peak_flops",
    "rank_choice",
    "read_alerts_file",
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


def add_alerts_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """``--alerts RULES``: a YAML file with an ``alerts:`` section (docs/alerts.md)."""
    parser.add_argument(
        "--alerts",
        metavar="RULES",
        help=f"a YAML file with an 'alerts:' list of rules (as in a train config): {what}",
    )


@dataclass(frozen=True)
class AlertsFile:
    """An ``--alerts`` file, read and checked: its entries, and its ``on_alert``."""

    path: str
    entries: list[Any]
    on_alert: str

    def rules(self) -> list[Rule]:
        """New rules for the file's entries (each rank and segment of a run gets its own)."""
        return rules_from_config(self.entries, self.path)


def read_alerts_file(path: str) -> AlertsFile:
    """The ``--alerts`` file at ``path``, every rule built once to check it; a ``CommandError`` (one
    line, exit 2) naming the file and what is wrong: an unknown rule or key lists what exists."""
    import yaml

    from speedtronic.training.config import yaml_loader, yaml_problem

    try:
        data = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=yaml_loader())
    except OSError as error:
        raise CommandError(f"--alerts {path}: can't read it: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise CommandError(f"--alerts {path}: can't read it: expected UTF-8 text ({error.reason})") from None
    except yaml.YAMLError as error:  # where, as a --config's: PyYAML's first line names no place
        where, problem = yaml_problem(error)
        raise CommandError(f"--alerts {path}: {where + ': ' if where else ''}{problem}") from None
    try:
        _, on_alert = alerts_section(data, path)
    except AlertConfigError as error:
        raise CommandError(f"--alerts {error}") from None
    return AlertsFile(path, list(data["alerts"]), on_alert)


def check_peak_flops(value: float | None) -> None:
    """A ``CommandError`` for a ``--peak-flops`` that is not a positive, finite number (``0``, ``nan``,
    ``inf``: an MFU of 0% or nan is no figure)."""
    if value is not None and not 0 < value < math.inf:
        raise CommandError(f"--peak-flops: expected a positive, finite number of FLOP/s, got {value}")


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


def rank_choice(text: str, runs: Sequence[str], *, several: bool = False) -> RankChoice:
    """``--rank``'s value: ``first``, ``all``, a rank, or (with ``several``) ranks separated by commas;
    a ``CommandError`` (one line, exit 2) for another value, and for a rank one of ``runs`` has no
    record of, naming the run and the ranks it has (``runs/a: --rank 5: the run has no rank 5; it has
    ranks 0-3``). A run that can't be read is left to the command, which says why."""
    if text == "first":
        return "first"
    if text == "all":
        return "all"
    parts = [part.strip() for part in text.split(",")] if several else [text.strip()]
    if not all(part.isdecimal() for part in parts):
        expected = "a rank (an integer >= 0)" + (", ranks separated by commas" if several else "")
        raise CommandError(f"--rank: expected {expected} or 'all', got {text!r}")
    ranks = [int(part) for part in parts]
    for run in runs:
        _check_ranks(run, text, ranks)
    return ranks if len(ranks) > 1 else ranks[0]


def _check_ranks(run: str, text: str, wanted: list[int]) -> None:
    """A ``CommandError`` when ``run`` holds no record of one of the ``wanted`` ranks. The read stops
    at the first record of each (a rank's own file, by its name, first); only a rank that is missing
    costs a read of the files that could hold it. The ranks the run has: those read, and those of
    the records and files the read left out."""
    skipped = Skipped()
    found: set[int] = set()
    try:
        for record in read_records(run, skipped, rank=wanted):
            found.add(record.rank)
            if found.issuperset(wanted):
                return
    except RunError:
        return
    has = sorted(found | set(skipped.left_out_ranks))
    if not has:  # no record at all: the command's read says so
        return
    missing = sorted({rank for rank in wanted if rank not in found})
    raise CommandError(
        f"{run}: --rank {text}: the run has no {ranks_text(missing)}; it has {ranks_text(has)}"
    )


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
