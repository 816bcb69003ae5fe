"""Reading recorded runs back: the one reader every tool (summarize, plot, replay) streams through."""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple, cast

import orjson

from speedtronic.events import RATE_SUFFIX
from speedtronic.record import (
    NON_FINITE_KINDS,
    NOTE_CONVERTED,
    NOTE_KEY,
    NOTE_NON_FINITE,
    NOTE_ORIGIN,
    NOTE_PARTS,
    NOTE_TRUNCATED,
    NOTE_VERSION_KEY,
    ORIGIN_OWN,
    note_contract,
    part_of,
    rank_of_name,
    restore_non_finite,
    restore_non_finite_text,
)
from speedtronic.runs.roles import is_rate

__all__ = [
    "CHUNK_BYTES",
    "INCOMPLETE",
    "MAX_LINE_BYTES",
    "RATE_SUFFIX",
    "RankChoice",
    "RankFilter",
    "Record",
    "RunClock",
    "RunError",
    "Skipped",
    "as_number",
    "begins_a_record",
    "begins_later_part",
    "file_rank",
    "file_records",
    "file_spans",
    "not_a_run",
    "parse_record",
    "rate_keys",
    "read_records",
    "run_files",
]


RankChoice = int | Sequence[int] | Literal["first", "all"]
"""Which ranks' records to read: one rank, several (a list of ranks), the rank of the first record
(default), or every rank. A rank is an integer >= 0."""

MAX_LINE_BYTES = 16 * 1024 * 1024
"""Longest line read (16 MiB, newline excluded): a longer one is skipped and counted, never held whole.
The writer's own lines are capped far below this (``DEFAULT_MAX_LINE_BYTES``, 32,000 bytes)."""

CHUNK_BYTES = 256 * 1024
"""How much of a file is read at a time."""

_NON_FINITE_HINTS = (b'"NaN"', b'Infinity"')
_EXAMPLES = 5


class RunError(Exception):
    """A run that can't be read at all: ``"<path>: <reason>"``, fit for a one-line CLI error."""


class Record(NamedTuple):
    """One event read back from a run."""

    event: str
    payload: dict[str, Any]
    """Every key but ``event``, ``timestamp`` and the note: the event's own data."""
    timestamp: str | None
    rank: int
    """The record's integer ``rank`` key; 0 for records without one (a single-process run)."""
    source: Path
    line: int
    notes: dict[str, Any] | None = None
    """The writer's ``_speedtronic`` note: which keys it converted or truncated."""
    segment: int = 0
    """Which segment of its file the record belongs to: 0, then one more at each later ``train_start``."""
    own: bool = False
    """Whether the logger wrote this record about itself (its note says ``"origin": "speedtronic"``):
    a user event named ``hook_error`` is not."""

    @property
    def hook_payload(self) -> dict[str, Any]:
        """What a live hook received: the payload with the record's ``timestamp`` (a new dict)."""
        if self.timestamp is None:
            return dict(self.payload)
        return {**self.payload, "timestamp": self.timestamp}


class RunClock:
    """Elapsed seconds across a run's segments: each segment's ``elapsed_s`` restarts at 0, so a
    record's time since the run first started is the segments before it plus its own ``elapsed_s``.
    Kept per rank; ``total`` is the longest rank's, kept up to date as records are added (so reading a
    run costs the same per record however many ranks it has)."""

    __slots__ = ("_longest", "_ranks")

    def __init__(self) -> None:
        self._ranks: dict[int, list[Any]] = {}
        """rank -> [time of the segments done, current (file, segment), longest elapsed_s in it]"""
        self._longest = 0.0

    def add(self, record: Record) -> float | None:
        """The record's time since the run started; ``None`` when it has no finite ``elapsed_s``."""
        where = (record.source, record.segment)
        return self.add_time(record.rank, where, as_number(record.payload.get("elapsed_s")))

    def add_time(self, rank: int, where: tuple[Path, int], elapsed: float | None) -> float | None:
        """``add`` of a record of ``rank`` in segment ``where`` (its file, its segment there) whose
        ``elapsed_s`` is ``elapsed``: what a reader that counts segments itself calls."""
        clock = self._ranks.get(rank)
        if clock is None:
            clock = self._ranks[rank] = [0.0, None, 0.0]
        if clock[1] != where:
            clock[0], clock[1], clock[2] = clock[0] + clock[2], where, 0.0
        if elapsed is None or not math.isfinite(elapsed):
            return None
        if elapsed > clock[2]:
            clock[2] = elapsed
            # A rank's done + current only grows, so the longest rank's is a running maximum.
            if clock[0] + elapsed > self._longest:
                self._longest = clock[0] + elapsed
        return float(clock[0] + elapsed)

    @property
    def total(self) -> float | None:
        """Seconds over every segment (the longest rank's); ``None`` before any record had a time."""
        return self._longest if self._longest > 0 else None


class Skipped:
    """What a read left out: lines it could not use, and records of ranks not chosen.

    Memory stays constant however many lines are skipped: counts per file and reason, plus the
    first few line numbers of each as examples.
    """

    __slots__ = ("_examples", "lines", "other_rank_files", "other_ranks")

    def __init__(self) -> None:
        self.lines: Counter[tuple[str, str]] = Counter()
        """Skipped lines per ``(file, reason)``."""
        self.other_ranks: Counter[int] = Counter()
        """Records left out because they belong to another rank, per rank (in files that were read)."""
        self.other_rank_files: Counter[int] = Counter()
        """Files not opened because their name says they hold another rank's records, per rank."""
        self._examples: dict[tuple[str, str], list[int]] = {}

    def add_line(self, source: Path, line: int, reason: str) -> None:
        key = (str(source), reason)
        self.lines[key] += 1
        examples = self._examples.setdefault(key, [])
        if len(examples) < _EXAMPLES:
            examples.append(line)

    def update(self, other: Skipped) -> None:
        """Add what ``other`` left out, read after this one's lines (its examples come after)."""
        self.lines.update(other.lines)
        self.other_ranks.update(other.other_ranks)
        self.other_rank_files.update(other.other_rank_files)
        for key, numbers in other._examples.items():
            examples = self._examples.setdefault(key, [])
            examples += numbers[: _EXAMPLES - len(examples)]

    @property
    def total_lines(self) -> int:
        return sum(self.lines.values())

    def __bool__(self) -> bool:
        return bool(self.lines or self.other_ranks or self.other_rank_files)

    @property
    def left_out_ranks(self) -> list[int]:
        """Every rank left out, from the records read and the files not opened."""
        return sorted(set(self.other_ranks) | set(self.other_rank_files))

    def by_reason(self) -> dict[str, int]:
        """Skipped lines per reason, all files together."""
        counts: Counter[str] = Counter()
        for (_, reason), count in self.lines.items():
            counts[reason] += count
        return dict(counts)

    def describe(self, run: str) -> list[str]:
        """One human-readable line per file with skipped lines, and one line for every rank left out
        (however many ranks: their count, the first few, what was read of them)."""
        files: dict[str, list[str]] = {}
        for (source, reason), count in self.lines.items():
            numbers = ", ".join(map(str, self._examples[(source, reason)]))
            more = ", ..." if count > _EXAMPLES else ""
            plural = "s" if count > 1 else ""
            files.setdefault(source, []).append(f"{count} {reason} (line{plural} {numbers}{more})")
        out = [f"{source}: skipped {'; '.join(parts)}" for source, parts in files.items()]
        ranks = self.left_out_ranks
        if len(ranks) == 1 and not self.other_rank_files:
            rank = ranks[0]
            count = self.other_ranks[rank]
            out.append(f"{run}: left out {count:,} record(s) of rank {rank} (read them with --rank {rank})")
        elif ranks:
            shown = ", ".join(map(str, ranks[:_EXAMPLES])) + (", ..." if len(ranks) > _EXAMPLES else "")
            what = []
            if self.other_ranks:
                what.append(f"{self.other_ranks.total():,} record(s) read and left out")
            if self.other_rank_files:
                what.append(f"{self.other_rank_files.total():,} file(s) not opened")
            out.append(
                f"{run}: left out {len(ranks):,} other rank(s) ({shown}): {', '.join(what)} "
                "(read one with --rank N, every one with --rank all)"
            )
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "lines": self.total_lines,
            "by_reason": self.by_reason(),
            "other_ranks": {str(rank): count for rank, count in sorted(self.other_ranks.items())},
            "other_rank_files": {str(rank): count for rank, count in sorted(self.other_rank_files.items())},
        }


def as_number(value: object) -> float | None:
    """``value`` as a float when it is an int or float (bools excluded, NaN kept), else ``None``."""
    return float(value) if type(value) is int or type(value) is float else None


def rate_keys(payload: dict[str, Any]) -> list[str]:
    """The payload's throughput rates: numeric keys the role table calls rates (``_per_s``, and the
    frameworks' ``_per_sec``, ``_per_second``...: ``speedtronic.runs.roles.is_rate``)."""
    return [key for key, value in payload.items() if is_rate(key) and as_number(value) is not None]


def run_files(path: str | os.PathLike[str]) -> list[Path]:
    """The JSONL files of a run: the file itself, or a run directory's ``*.jsonl`` files and its
    ranks' files, whatever their suffix (``m.json`` and ``m.rank1.json``: ``speedtronic.record.rank_path``).

    Raises ``RunError`` naming the path for a path that does not exist, can't be listed, or is a
    directory without a JSONL file.
    """
    path = Path(path)
    try:
        if not path.is_dir():
            path.stat()  # the error to report when it is missing or unreachable
            return [path]
        entries = [entry for entry in path.iterdir() if entry.is_file()]
        ranked = {entry.name: rank_of_name(entry.name) for entry in entries}
        rank_zero = {named[0] for named in ranked.values() if named is not None}
        files = [
            entry
            for entry in entries
            if entry.suffix == ".jsonl" or entry.name in rank_zero or ranked[entry.name] is not None
        ]
    except OSError as error:
        raise RunError(f"{path}: {error.strerror or error}") from None
    if not files:
        raise RunError(f"{path}: no *.jsonl file in this directory")
    return sorted(files, key=_file_order)


def _file_order(path: Path) -> tuple[bool, list[Any]]:
    parts: list[Any] = [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path.name)]
    return path.name != "metrics.jsonl", parts


def file_rank(path: Path, files: list[Path] | None = None) -> int | None:
    """The rank whose records ``path`` holds, by its name: ``r`` for ``<stem>.rank<r><suffix>``; 0 for
    ``<stem><suffix>`` when ``files`` (its run's) holds a ``<stem>.rank<r><suffix>``; else ``None``."""
    named = rank_of_name(path.name)
    if named is not None:
        return named[1]
    for other in files or ():
        match = rank_of_name(other.name)
        if match is not None and match[0] == path.name and other.parent == path.parent:
            return 0
    return None


def read_records(
    path: str | os.PathLike[str],
    skipped: Skipped | None = None,
    *,
    rank: RankChoice = "first",
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Iterator[Record]:
    """Stream the records of a run, in file order, in memory bounded by ``max_line_bytes``.

    The path is resolved now (``RunError`` for one that can't be read); files are opened as the
    iterator reaches them, and an I/O error there is a ``RunError`` too. Lines that can't be used
    (longer than ``max_line_bytes`` included), and records of ranks other than ``rank``, go into
    ``skipped``; a file whose name says it holds another rank (``file_rank``) is not opened. A
    ``rank`` that isn't a ``RankChoice`` is a ``ValueError`` now, before anything is read.
    """
    files = run_files(path)
    skipped = skipped if skipped is not None else Skipped()
    return _records(files, skipped, RankFilter(files, rank, skipped), max_line_bytes)


class RankFilter:
    """Which files and records of a run one read takes, by ``rank`` (``read_records``' rule).

    ``opens`` says whether to read a file (one whose name says another rank is counted in ``skipped``
    instead); ``keeps`` whether to take a record of a rank, counting the others. Under ``"first"`` the
    first record read chooses the rank (``choose``); ``chosen`` (the ranks taken) is ``None`` until
    then, and always under ``"all"``. Raises ``ValueError`` naming ``rank`` for a value that is none of
    ``RankChoice``'s.
    """

    __slots__ = ("_named", "_skipped", "chosen", "every")

    def __init__(self, files: list[Path], rank: RankChoice, skipped: Skipped) -> None:
        self.chosen: frozenset[int] | None = _ranks_named(rank)
        self.every = rank == "all"
        self._named = {source: file_rank(source, files) for source in files} if not self.every else {}
        self._skipped = skipped

    def opens(self, source: Path) -> bool:
        by_name = self._named.get(source)
        if self.chosen is not None and by_name is not None and by_name not in self.chosen:
            self._skipped.other_rank_files[by_name] += 1
            return False
        return True

    def choose(self, first: int) -> frozenset[int] | None:
        """The ranks taken (``None``: every rank); under ``"first"``, ``first`` when none is chosen yet."""
        if self.chosen is None and not self.every:
            self.chosen = frozenset((first,))
        return self.chosen

    def keeps(self, rank: int) -> bool:
        """Whether a record of ``rank`` is taken; one that is not is counted as left out."""
        if self.every or (self.chosen is not None and rank in self.chosen):
            return True
        if self.chosen is None:  # under "first", the first record read chooses
            self.chosen = frozenset((rank,))
            return True
        self._skipped.other_ranks[rank] += 1
        return False


def _ranks_named(rank: object) -> frozenset[int] | None:
    """The ranks ``rank`` names (``None`` for ``"first"`` and ``"all"``); ``ValueError`` for a value
    that isn't a ``RankChoice``."""
    if rank == "first" or rank == "all":
        return None
    if type(rank) is int and rank >= 0:
        return frozenset((rank,))
    if isinstance(rank, Sequence | set | frozenset) and not isinstance(rank, str | bytes):
        ranks = list(rank)
        if ranks and all(type(one) is int and one >= 0 for one in ranks):
            return frozenset(ranks)
    raise ValueError(
        f"rank: expected a rank (an integer >= 0), a non-empty list of ranks, 'first' or 'all'; got {rank!r}"
    )


def _records(files: list[Path], skipped: Skipped, ranks: RankFilter, limit: int) -> Iterator[Record]:
    for source in files:
        if ranks.opens(source):
            for record in file_records(source, skipped, limit):
                if ranks.keeps(record.rank):
                    yield record


def _lines(file: Any, limit: int, size: int | None = None) -> Iterator[tuple[list[bytes | None], bool]]:
    """The lines of ``file`` (newline removed) a chunk at a time, and whether they ended in a newline:
    all those of a list do, but for a file's last line without one, which comes alone. ``None`` is a
    line over ``limit`` bytes, read past chunk by chunk and never held whole. ``size``: read that many
    bytes at most. Each chunk is cut at its newlines at once (``bytes.split``)."""
    pieces: list[bytes] = []  # the start of a line that runs past the chunk it began in
    held = 0
    too_long = False
    left = size
    while chunk := file.read(CHUNK_BYTES if left is None else min(CHUNK_BYTES, left)):
        left = left - len(chunk) if left is not None else None
        parts = chunk.split(b"\n")
        tail = parts.pop()  # what follows the chunk's last newline: the start of a line
        if parts:
            first = parts[0]
            lines = cast(list[bytes | None], parts)  # the same list: None for a line over the limit
            if too_long or held + len(first) > limit:
                lines[0] = None
            elif pieces:
                lines[0] = b"".join([*pieces, first])
            pieces, held, too_long = [], 0, False
            if len(chunk) > limit:  # only then can a line of one chunk be too long
                lines[1:] = [line if len(line) <= limit else None for line in parts[1:]]
            yield lines, True
        if not too_long and tail:
            pieces.append(tail)
            held += len(tail)
            if held > limit:
                pieces, held, too_long = [], 0, True
    if too_long:
        yield [None], False
    elif pieces:
        yield [b"".join(pieces)], False


def file_records(
    source: Path,
    skipped: Skipped,
    max_line_bytes: int = MAX_LINE_BYTES,
    *,
    span: tuple[int, int | None, int] | None = None,
) -> Iterator[Record]:
    """The records of one JSONL file, whatever their rank, by ``read_records``' rules (``RunError`` for a
    file none of whose lines is a record, or whose first line does not begin a JSON object: a line a
    killed writer tore begins one, a README or a checkpoint does not).

    ``span``, ``(start, stop, first_line)``, reads a part of the file instead: the lines from byte
    ``start`` (the first byte of line ``first_line``) to byte ``stop`` (the end of a line; ``None``:
    the end of the file), as ``file_spans`` cuts it. Its segments are numbered from its start, as if a
    ``train_start`` came before it; whether the whole file holds a record is for the caller to check.
    """
    start, stop, first_line = span if span is not None else (0, None, 1)
    segment, started, records, bad = 0, span is not None and start > 0, 0, 0  # bad: lines skipped
    held = _Held()  # the parts read so far of a record written in parts
    loads = orjson.loads
    try:
        with source.open("rb") as file:
            if start:
                file.seek(start)
            size = stop - start if stop is not None else None
            number = first_line - 1
            for chunk, ended in _lines(file, limit := max_line_bytes, size):
                for raw in chunk:
                    number += 1
                    if raw is None:
                        bad += 1
                        skipped.add_line(source, number, f"line over {limit:,} bytes")
                        continue
                    try:
                        fields = loads(raw)
                    except orjson.JSONDecodeError:
                        if not raw or raw.isspace():  # a blank line is no line
                            continue
                        record: Record | str = "not JSON" if ended else "torn last line"
                        if held.fields is not None:
                            bad += held.give_up(source, skipped)
                    else:
                        # Today's writer's record, whole, its note listing nothing non-finite (most
                        # records): nothing to undo, so _record_of's questions are not asked.
                        if (
                            type(fields) is dict
                            and type(note := fields.get(NOTE_KEY)) is dict
                            and note.get(NOTE_PARTS, 1) == 1  # today's writer's note says "parts":1
                            and held.fields is None
                            and note.get(NOTE_NON_FINITE) == _NOTHING
                            and NOTE_VERSION_KEY in note
                            and type(event := fields.get("event")) is str  # else: no event name
                            and event
                        ):
                            timestamp = fields.pop("timestamp", None)
                            del fields["event"], fields[NOTE_KEY]
                            record = _record(event, fields, timestamp, note, source, number, segment)
                        else:
                            at = number  # the record's line: its first part's, for one written in parts
                            if held.fields is not None or (
                                type(fields) is dict
                                and type(note := fields.get(NOTE_KEY)) is dict
                                and note.get(NOTE_PARTS, 1) != 1
                            ):
                                fields, at, lost = held.take(fields, number, source, skipped)
                                bad += lost
                                if fields is None:
                                    continue
                            record = _record_of(fields, raw, source, at, segment)
                    if isinstance(record, str):
                        if not records and not bad and not start and not begins_a_record(raw):
                            raise not_a_run(source, f"line {number} is not a JSON object")
                        bad += 1
                        skipped.add_line(source, number, record)
                        continue
                    if record.event == "train_start":
                        if started:
                            segment += 1
                            record = record._replace(segment=segment)
                        started = True
                    records += 1
                    yield record
            if held.fields is not None:
                bad += held.give_up(source, skipped)
    except OSError as error:
        raise RunError(f"{source}: {error.strerror or error}") from None
    if bad and not records and span is None:
        raise not_a_run(source)


INCOMPLETE = "part of an incomplete record"
"""``Skipped``'s reason for the lines of a record written in parts whose other parts are missing (a
writer killed between them, a file cut by hand): such lines are never read as a record."""


_LATER_PART = re.compile(rb',"part":[1-9][0-9]*,"parts":[0-9]+\}')
"""A later part's note, as the writer writes it (the note's last keys, just before the timestamp)."""


def begins_later_part(data: bytes, start: int, end: int) -> bool:
    """Whether the line ``data[start:end]`` (the writer's) is a later part of a record written in
    parts: a reader that cuts a file into pieces cuts before such a line never, so each piece holds
    whole records. Looks only at the line's last 256 bytes, where the writer puts the note's part."""
    return _LATER_PART.search(data, max(start, end - 256), end) is not None


def file_spans(source: Path, size: int) -> Iterator[tuple[int, int | None, int]]:
    """The parts of ``source`` to read one at a time (``file_records(..., span=...)``), each
    ``(start, stop, first_line)``: about ``size`` bytes each, each ending after a newline but never
    between a record's parts (``begins_later_part``), the last one at the end of the file; the whole
    file when it is no larger than ``size``. Read in chunks: a long line is read past, never held.
    ``RunError`` for a file that can't be read."""
    try:
        if source.stat().st_size <= size:
            yield 0, None, 1
            return
        start, first_line, offset, lines = 0, 1, 0, 0
        with source.open("rb") as file:
            while chunk := file.read(CHUNK_BYTES):
                spans = []
                look = max(0, start + size - 1 - offset)
                while look < len(chunk) and (end := chunk.find(b"\n", look)) >= 0:
                    after = chunk.find(b"\n", end + 1)
                    if after < 0:  # the next line ends in the next chunk: the cut is looked for there
                        break
                    if begins_later_part(chunk, end + 1, after):  # a record's parts stay in one piece
                        look = end + 1
                        continue
                    cut = offset + end + 1
                    spans.append((start, cut, first_line))
                    start, first_line = cut, lines + chunk.count(b"\n", 0, end + 1) + 1
                    look = end + size
                lines += chunk.count(b"\n")
                offset += len(chunk)
                chunk = b""  # not held while the parts are read
                yield from spans
    except OSError as error:
        raise RunError(f"{source}: {error.strerror or error}") from None
    yield start, None, first_line


class _Held:
    """The parts read so far of a record written in parts (``speedtronic.record``), joined into one
    record's fields when its last part comes. Parts are consecutive lines (one ``write(2)``): any other
    line between them, a torn line or the end of the file gives the held parts up, counted in
    ``Skipped`` as ``INCOMPLETE``."""

    __slots__ = ("fields", "lines", "parts")

    def __init__(self) -> None:
        self.fields: dict[str, Any] | None = None
        self.lines: list[int] = []
        self.parts = 1

    def take(self, fields: Any, number: int, source: Path, skipped: Skipped) -> tuple[Any | None, int, int]:
        """Line ``number`` parsed to ``fields``: ``(fields to read, their line, lines given up)``;
        ``None`` as the fields while the record's parts are not all read."""
        part, parts = part_of(fields.get(NOTE_KEY)) if type(fields) is dict else (0, 1)
        held, lost = self.fields, 0
        if held is not None and not (
            part == len(self.lines)
            and parts == self.parts
            and fields.get("event") == held.get("event")
            and fields.get("timestamp") == held.get("timestamp")
        ):
            lost, held = self.give_up(source, skipped), None
        if parts == 1:
            return fields, number, lost
        if held is None:
            if part != 0:  # a part whose first part is missing
                skipped.add_line(source, number, INCOMPLETE)
                return None, number, lost + 1
            self.fields, self.lines, self.parts = fields, [number], parts
            return None, number, lost
        _join(held, fields)
        self.lines.append(number)
        if part + 1 < parts:
            return None, number, lost
        first = self.lines[0]
        self.fields, self.lines = None, []
        held[NOTE_KEY] = held.pop(NOTE_KEY)  # the note and the timestamp last, as in a whole record
        if "timestamp" in held:
            held["timestamp"] = held.pop("timestamp")
        return held, first, lost

    def give_up(self, source: Path, skipped: Skipped) -> int:
        """Count the held parts as ``INCOMPLETE`` lines; how many they were."""
        for line in self.lines:
            skipped.add_line(source, line, INCOMPLETE)
        lost = len(self.lines)
        self.fields, self.lines = None, []
        return lost


def _join(held: dict[str, Any], part: dict[str, Any]) -> None:
    """Add a later part's fields and note entries to the fields of the parts before it (each part's
    note lists its own fields' entries, and the head's again)."""
    note, more = held[NOTE_KEY], part.pop(NOTE_KEY)
    lists, found = note.get(NOTE_NON_FINITE), more.get(NOTE_NON_FINITE)
    pairs = [(note, more, name) for name in (NOTE_CONVERTED, NOTE_TRUNCATED)]
    if type(lists) is dict and type(found) is dict:
        pairs += [(lists, found, kind) for kind in NON_FINITE_KINDS]
    for into, source, name in pairs:
        have, add = into.get(name), source.get(name)
        if type(have) is list and type(add) is list and add:
            known = {entry for entry in have if type(entry) is str}
            into[name] = have + [entry for entry in add if type(entry) is not str or entry not in known]
    for key, value in part.items():
        if key not in held:  # the head (event, step, rank, world_size) and timestamp: every part's
            held[key] = value


def begins_a_record(line: bytes) -> bool:
    """Whether ``line`` begins a JSON object, as a run's first line does (a line a killed writer tore
    does too): a file whose first line does not (a README, a text log, a checkpoint) is no run
    (``not_a_run``), refused at that line by the readers and by ``speedtronic tail``."""
    return line.lstrip().startswith(b"{")


def not_a_run(source: Path, why: str = "no line is a JSON record with an event") -> RunError:
    """The error for a file that is not a run: none of its lines is a record, or its first line is
    not even the start of a JSON object (a README, a text log, a checkpoint)."""
    return RunError(f"{source}: not a speedtronic JSONL file ({why})")


def parse_record(raw: bytes, ended: bool, source: Path, number: int, segment: int = 0) -> Record | str:
    """Line ``number`` of ``source`` (newline removed; ``ended``: whether it had one) as a ``Record``,
    the writer's conventions undone; or, for a line that is not a record, why (the reason ``Skipped``
    counts)."""
    try:
        fields = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "not JSON" if ended else "torn last line"
    return _record_of(fields, raw, source, number, segment)


def _record_of(fields: Any, raw: bytes, source: Path, number: int, segment: int) -> Record | str:
    """``parse_record`` of a line that parsed to ``fields``."""
    if type(fields) is not dict:
        return "not a JSON object"
    notes = fields.get(NOTE_KEY)
    # Today's writer's note listing nothing non-finite (most records): nothing to undo, no more to ask.
    if type(notes) is not dict or NOTE_VERSION_KEY not in notes or notes.get(NOTE_NON_FINITE) != _NOTHING:
        contract = note_contract(notes)
        if contract and _lists_non_finite(notes):  # the writer's nulls for NaN and infinities
            restore_non_finite(fields)
        notes = notes if type(notes) is dict else None
    else:
        contract = 2
    event = fields.pop("event", None)
    if type(event) is not str or not event:
        return "no event name"
    timestamp = fields.pop("timestamp", None)
    if NOTE_KEY in fields:
        del fields[NOTE_KEY]
    if not contract and any(hint in raw for hint in _NON_FINITE_HINTS):
        # An older writer's, or another writer's, strings for NaN and infinities.
        converted = notes.get(NOTE_CONVERTED) if notes is not None else None
        if type(converted) is not list:
            fields = restore_non_finite_text(fields)
        for key in converted or ():
            if type(key) is str and key in fields:
                fields[key] = restore_non_finite_text(fields[key])
    return _record(event, fields, timestamp, notes, source, number, segment)


def _record(
    event: str,
    fields: dict[str, Any],
    timestamp: Any,
    notes: dict[str, Any] | None,
    source: Path,
    number: int,
    segment: int,
) -> Record:
    """The ``Record`` of a line's ``fields``, its event, timestamp and note taken out."""
    rank = fields.get("rank")
    # tuple.__new__: a Record without the keyword handling of its generated __new__ (this runs per line).
    return _new(
        Record,
        (
            event,
            fields,
            timestamp if type(timestamp) is str else None,
            rank if type(rank) is int else 0,
            source,
            number,
            notes,
            segment,
            notes is not None and notes.get(NOTE_ORIGIN) == ORIGIN_OWN,  # is_own_note, without a call
        ),
    )


_new = tuple.__new__
_NOTHING: dict[str, list[Any]] = {kind: [] for kind in NON_FINITE_KINDS}
"""A note's ``non_finite`` that lists nothing."""


def _lists_non_finite(note: Any) -> bool:
    listed = note.get(NOTE_NON_FINITE)
    if type(listed) is not dict:
        return False
    if NOTE_VERSION_KEY not in note:
        return bool(listed)
    return any(map(listed.get, NON_FINITE_KINDS))  # no generator: this runs for every record read
