"""Reading recorded runs back: the one reader every tool (summarize, plot, replay) streams through.

A run is a JSONL file written by ``MetricLogger(json_file=...)``, or a run directory holding one or
more ``*.jsonl`` files (``metrics.jsonl`` first, then per-rank files such as ``metrics.rank1.jsonl``
in numeric order). ``read_records`` yields one ``Record`` per line, lazily, in constant memory, and
never raises because of what a line holds: a torn last line (a killed writer), a line that is not
JSON, a JSON value that is not an object, or an object without an ``"event"`` name is skipped and
counted in a ``Skipped`` with its line number. A path that can't be read, and a file none of whose
lines is a record (not speedtronic JSONL: a README, a checkpoint), raise ``RunError``.

A run that was resumed holds several *segments* in one file: each ``train_start`` begins one, which
lasts until its ``train_end`` or the end of the file. ``Record.segment`` numbers them (from 0, per
file), and ``RunClock`` turns each segment's ``elapsed_s`` (its logger's clock, restarting at 0) into
the time since the run first started.

The writer's conventions are undone here, once: the ``null`` its note's ``"non_finite"`` pointers
name become NaN or infinities again (``speedtronic.processors.convert.restore_non_finite``); in older
files, ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` become floats again: exactly in the keys the
record's ``"_speedtronic": {"converted": [...]}`` note names when it has one (so a string that
happens to read "NaN" stays a string), everywhere in a record without one (JSONL from another
writer). ``timestamp`` and the note are set apart from the payload,
so ``Record.payload`` is exactly what a live hook received.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, NamedTuple

import orjson

from speedtronic.processors.convert import restore_non_finite

__all__ = [
    "RATE_SUFFIX",
    "RankChoice",
    "Record",
    "RunClock",
    "RunError",
    "Skipped",
    "as_number",
    "rate_keys",
    "read_records",
    "run_files",
]

RATE_SUFFIX = "_per_s"
"""A numeric payload key ending in this is a throughput rate (``samples_per_s``, ``tokens_per_s``)."""

RankChoice = int | Literal["first", "all"]
"""Which rank's records to read: one rank, the rank of the first record (default), or every rank."""

_NON_FINITE: dict[str, float] = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_NON_FINITE_HINTS = (b'"NaN"', b'Infinity"')
_EXAMPLES = 5


class RunError(Exception):
    """A run that can't be read at all: ``"<path>: <reason>"``, fit for a one-line CLI error."""


class Record(NamedTuple):
    """One event read back from a run."""

    event: str
    payload: dict[str, Any]
    """Every key but ``event`` and ``timestamp``: what the live hooks received."""
    timestamp: str | None
    rank: int
    """The record's integer ``rank`` key; 0 for records without one (a single-process run)."""
    source: Path
    line: int
    notes: dict[str, Any] | None = None
    """The writer's ``_speedtronic`` note: which keys it converted or truncated."""
    segment: int = 0
    """Which segment of its file the record belongs to: 0, then one more at each later ``train_start``."""


class RunClock:
    """Elapsed seconds across a run's segments: each segment's ``elapsed_s`` restarts at 0, so a
    record's time since the run first started is the segments before it plus its own ``elapsed_s``.
    Kept per rank; ``total`` is the longest rank's."""

    __slots__ = ("_ranks",)

    def __init__(self) -> None:
        self._ranks: dict[int, list[Any]] = {}
        """rank -> [time of the segments done, current (file, segment), longest elapsed_s in it]"""

    def add(self, record: Record) -> float | None:
        """The record's time since the run started; ``None`` when it has no finite ``elapsed_s``."""
        clock = self._ranks.setdefault(record.rank, [0.0, None, 0.0])
        where = (record.source, record.segment)
        if clock[1] != where:
            clock[0], clock[1], clock[2] = clock[0] + clock[2], where, 0.0
        elapsed = as_number(record.payload.get("elapsed_s"))
        if elapsed is None or not math.isfinite(elapsed):
            return None
        clock[2] = max(clock[2], elapsed)
        return float(clock[0] + elapsed)

    @property
    def total(self) -> float | None:
        """Seconds over every segment (the longest rank's); ``None`` before any record had a time."""
        totals = [done + current for done, _, current in self._ranks.values()]
        return max(totals) if totals and max(totals) > 0 else None


class Skipped:
    """What a read left out: lines it could not use, and records of ranks not chosen.

    Memory stays constant however many lines are skipped: counts per file and reason, plus the
    first few line numbers of each as examples.
    """

    __slots__ = ("_examples", "lines", "other_ranks")

    def __init__(self) -> None:
        self.lines: Counter[tuple[str, str]] = Counter()
        """Skipped lines per ``(file, reason)``."""
        self.other_ranks: Counter[int] = Counter()
        """Records left out because they belong to another rank, per rank."""
        self._examples: dict[tuple[str, str], list[int]] = {}

    def add_line(self, source: Path, line: int, reason: str) -> None:
        key = (str(source), reason)
        self.lines[key] += 1
        examples = self._examples.setdefault(key, [])
        if len(examples) < _EXAMPLES:
            examples.append(line)

    @property
    def total_lines(self) -> int:
        return sum(self.lines.values())

    def __bool__(self) -> bool:
        return bool(self.lines or self.other_ranks)

    def by_reason(self) -> dict[str, int]:
        """Skipped lines per reason, all files together."""
        counts: Counter[str] = Counter()
        for (_, reason), count in self.lines.items():
            counts[reason] += count
        return dict(counts)

    def describe(self, run: str) -> list[str]:
        """One human-readable line per file and per left-out rank of ``run``, naming line numbers."""
        files: dict[str, list[str]] = {}
        for (source, reason), count in self.lines.items():
            numbers = ", ".join(map(str, self._examples[(source, reason)]))
            more = ", ..." if count > _EXAMPLES else ""
            plural = "s" if count > 1 else ""
            files.setdefault(source, []).append(f"{count} {reason} (line{plural} {numbers}{more})")
        out = [f"{source}: skipped {'; '.join(parts)}" for source, parts in files.items()]
        for rank, count in sorted(self.other_ranks.items()):
            out.append(f"{run}: left out {count:,} record(s) of rank {rank} (read them with --rank {rank})")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "lines": self.total_lines,
            "by_reason": self.by_reason(),
            "other_ranks": {str(rank): count for rank, count in sorted(self.other_ranks.items())},
        }


def as_number(value: object) -> float | None:
    """``value`` as a float when it is an int or float (bools excluded, NaN kept), else ``None``."""
    return float(value) if type(value) is int or type(value) is float else None


def rate_keys(payload: dict[str, Any]) -> list[str]:
    """The payload's throughput rates: numeric keys ending in ``RATE_SUFFIX``."""
    return [
        key for key, value in payload.items() if key.endswith(RATE_SUFFIX) and as_number(value) is not None
    ]


def run_files(path: str | os.PathLike[str]) -> list[Path]:
    """The JSONL files of a run: the file itself, or a run directory's ``*.jsonl`` files.

    Raises ``RunError`` naming the path for a path that does not exist, can't be listed, or is a
    directory without a JSONL file.
    """
    path = Path(path)
    try:
        if not path.is_dir():
            path.stat()  # the error to report when it is missing or unreachable
            return [path]
        files = [entry for entry in path.iterdir() if entry.suffix == ".jsonl" and entry.is_file()]
    except OSError as error:
        raise RunError(f"{path}: {error.strerror or error}") from None
    if not files:
        raise RunError(f"{path}: no *.jsonl file in this directory")
    return sorted(files, key=_file_order)


def _file_order(path: Path) -> tuple[bool, list[Any]]:
    parts: list[Any] = [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path.name)]
    return path.name != "metrics.jsonl", parts


def read_records(
    path: str | os.PathLike[str],
    skipped: Skipped | None = None,
    *,
    rank: RankChoice = "first",
) -> Iterator[Record]:
    """Stream the records of a run, one line at a time, in file order.

    The path is resolved now (``RunError`` for one that can't be read); files are opened as the
    iterator reaches them, and an I/O error there is a ``RunError`` too. Lines that can't be used, and
    records of ranks other than ``rank``, go into ``skipped``.
    """
    files = run_files(path)
    return _records(files, skipped if skipped is not None else Skipped(), rank)


def _records(files: list[Path], skipped: Skipped, rank: RankChoice) -> Iterator[Record]:
    chosen: int | None = rank if isinstance(rank, int) else None
    for source in files:
        for record in _file_records(source, skipped):
            if rank == "all":
                yield record
                continue
            if chosen is None:
                chosen = record.rank
            if record.rank == chosen:
                yield record
            else:
                skipped.other_ranks[record.rank] += 1


def _file_records(source: Path, skipped: Skipped) -> Iterator[Record]:
    segment, started, lines, records = 0, False, 0, 0
    try:
        with source.open("rb") as file:
            for number, raw in enumerate(file, 1):
                lines += bool(raw.strip())
                record = _parse(raw, source, number, skipped, segment)
                if record is None:
                    continue
                if record.event == "train_start":
                    if started:
                        segment += 1
                        record = record._replace(segment=segment)
                    started = True
                records += 1
                yield record
    except OSError as error:
        raise RunError(f"{source}: {error.strerror or error}") from None
    if lines and not records:
        raise RunError(f"{source}: not a speedtronic JSONL file (no line is a JSON record with an event)")


def _parse(raw: bytes, source: Path, number: int, skipped: Skipped, segment: int) -> Record | None:
    if not raw.strip():
        return None
    try:
        fields = orjson.loads(raw)
    except orjson.JSONDecodeError:
        torn = not raw.endswith(b"\n")
        skipped.add_line(source, number, "torn last line" if torn else "not JSON")
        return None
    if type(fields) is not dict:
        skipped.add_line(source, number, "not a JSON object")
        return None
    if b'"non_finite"' in raw:  # the writer's nulls for NaN and infinities, noted by JSON Pointer
        restore_non_finite(fields)
    event = fields.pop("event", None)
    if type(event) is not str or not event:
        skipped.add_line(source, number, "no event name")
        return None
    timestamp = fields.pop("timestamp", None)
    notes = fields.pop("_speedtronic", None)
    notes = notes if type(notes) is dict else None
    older = notes is None or "non_finite" not in notes  # an older writer's, or another writer's, strings
    if older and any(hint in raw for hint in _NON_FINITE_HINTS):
        converted = notes.get("converted") if notes is not None else None
        if type(converted) is not list:
            fields = _restore_non_finite(fields)
        for key in converted or ():
            if type(key) is str and key in fields:
                fields[key] = _restore_non_finite(fields[key])
    rank = fields.get("rank")
    return Record(
        event,
        fields,
        timestamp if type(timestamp) is str else None,
        rank if type(rank) is int else 0,
        source,
        number,
        notes,
        segment,
    )


def _restore_non_finite(value: Any) -> Any:
    if type(value) is str:
        return _NON_FINITE.get(value, value)
    if type(value) is dict:
        return {key: _restore_non_finite(item) for key, item in value.items()}
    if type(value) is list:
        return [_restore_non_finite(item) for item in value]
    return value
