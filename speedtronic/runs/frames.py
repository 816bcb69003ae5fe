"""A run as dataframes: one typed table per event, for pandas or polars (the ``frames`` extra)."""

from __future__ import annotations

import io
import os
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from speedtronic.errors import SpeedtronicWarning
from speedtronic.events import EVENT_LEVELS, PAYLOADS
from speedtronic.extras import require
from speedtronic.record import (
    FLOAT_OF_KIND,
    NOTE_KEY,
    NOTE_NON_FINITE,
    NOTE_PARTS,
    NOTE_VERSION_KEY,
    RECORD_PREFIX,
    TIMESTAMP_RFC3339,
    TIMESTAMP_SECONDS,
    TIMESTAMP_WRITTEN,
    part_of,
    pointer_tokens,
)
from speedtronic.runs.reader import (
    MAX_LINE_BYTES,
    RankChoice,
    RankFilter,
    Skipped,
    begins_a_record,
    file_records,
    parse_record,
    run_files,
)

__all__ = ["Library", "UnknownEventWarning", "read_frame", "read_frames"]

Library = Literal["pandas", "polars"]
"""The dataframe library to build tables with."""


class UnknownEventWarning(SpeedtronicWarning):
    """An event asked of ``read_frames`` that the run has no record of and the event catalog does not
    name: most likely a typo (``"evall"``). The warning lists the events the run has."""


_INT64 = (-(2**63), 2**63 - 1)
_TIMESTAMP = "timestamp"
_EVENT = "event"
_RANK = "rank"


def read_frames(
    path: str | os.PathLike[str],
    *,
    library: Library = "pandas",
    events: Iterable[str] | None = None,
    rank: RankChoice = "first",
    skipped: Skipped | None = None,
) -> dict[str, Any]:
    """One DataFrame per event of the run at ``path`` (a run directory or a JSONL file).

    Every event the run holds, in the order each first appears; or, with ``events``, exactly those,
    an empty DataFrame for one the run lacks (with an ``UnknownEventWarning`` listing the events the run
    has when the catalog does not name it either: a typo). ``rank`` (one rank, a list of ranks, ``"first"`` or
    ``"all"``) and ``skipped`` are ``read_records``'s; a bad ``rank`` is a ``ValueError`` before
    anything is read.
    Raises ``ModuleNotFoundError`` naming the extra to install when ``library`` (or pyarrow) isn't
    installed, and ``RunError`` for a run that can't be read.
    """
    build = _builder(library)
    engine = ArrowEngine()
    wanted = None if events is None else list(dict.fromkeys(events))
    skipped = Skipped() if skipped is None else skipped
    files = run_files(path)
    ranks = RankFilter(files, rank, skipped)
    parts: dict[str, list[_Part]] = {name: [] for name in wanted or ()}
    seen: dict[str, None] = {}
    for source in files:
        if not ranks.opens(source):
            continue
        for event, part in _file_parts(source, ranks, skipped, engine):
            seen[event] = None
            if wanted is None or event in parts:
                parts.setdefault(event, []).append(part)
    _warn_unknown(path, wanted or (), seen)
    # Each event's parts are let go once its columns are made, and each column once its series is
    # built: a library that allocates with malloc (numpy, so pandas) reuses that memory for the next.
    return {event: build(engine.columns(parts.pop(event))) for event in list(parts)}


def _warn_unknown(path: str | os.PathLike[str], wanted: Iterable[str], seen: dict[str, None]) -> None:
    catalog = {*map(str, PAYLOADS), *EVENT_LEVELS}
    for event in wanted:
        if event not in seen and event not in catalog:
            has = ", ".join(seen) if seen else "no record"
            warnings.warn(
                UnknownEventWarning(
                    f"{path}: no {event!r} record, and no event of that name is known; the run has {has}"
                ),
                stacklevel=3,
            )


def read_frame(
    path: str | os.PathLike[str],
    event: str,
    *,
    library: Library = "pandas",
    rank: RankChoice = "first",
    skipped: Skipped | None = None,
) -> Any:
    """The DataFrame of one event of the run (empty when the run has none): ``read_frames``'s rules."""
    return read_frames(path, library=library, events=[event], rank=rank, skipped=skipped)[event]


# -- one file: lines grouped by event, each event's parsed by the engine -------------------------

_Part = Any
"""Some of one event's records from one file: a pyarrow Table (the engine's), or a ``LineTable``."""

_PREFIX = RECORD_PREFIX
_CHUNK = 2 * 1024 * 1024  # below MAX_LINE_BYTES: only a line begun in an earlier chunk can be longer
_BATCH = 8 * 1024 * 1024
"""How many bytes of one event's lines the engine parses at a time: memory stays bounded by it, not by
the file (a part per batch, joined when the frames are built). Larger batches are no faster, and
their buffers cost as much again above the tables returned."""
FEW_LINES = 256
"""Fewer lines than this are parsed by ``parse_record``: cheaper than starting the engine (a run of
10,000 ranks holds 10,000 small files)."""


# Which path reads what: a file's lines are grouped by event name as bytes (each begins RECORD_PREFIX)
# and pyarrow's JSON reader parses each event's lines; the line reader (parse_record) takes over where
# the engine can't be exact. For one event's batch: fewer than FEW_LINES lines; a key with values of
# several JSON types; lists or dicts, or a non-finite pointer into one; a float beyond 2**63; a rank
# that isn't an integer; a record without today's note or with a NaN its note doesn't list; a string
# the engine reads as a time. For a whole file (EngineFallback): a record written in parts, a line that
# doesn't begin RECORD_PREFIX or whose event name has an escape, a line over MAX_LINE_BYTES, a corrupt
# line that begins like a record. An event's parts are joined as tables when their types agree, else
# typed again from their Python values, as the line reader types.
class EngineFallback(Exception):
    """The engine can't read this file exactly: the line reader reads all of it."""


def _file_parts(
    source: Path, ranks: RankFilter, skipped: Skipped, engine: ArrowEngine
) -> list[tuple[str, _Part]]:
    """Each event's records in the file, of the rank ``ranks`` takes (others counted in ``skipped``)."""
    try:
        split: FileSplit | None = FileSplit(source, ranks, engine)
    except EngineFallback:
        split = None  # read on after the except block: its traceback would keep the lines read so far
    if split is None:
        return _line_parts(source, ranks, skipped)
    # Nothing was counted before here, so a file read by the line reader after all is counted once.
    for number, reason in split.bad:
        skipped.add_line(source, number, reason)
    skipped.other_ranks.update(split.left_out)
    return [(event, part) for event, parts in split.parts.items() for part in parts]


class FileSplit:
    """A file read by the engine: its lines grouped by event name as bytes, each event's parsed a
    batch at a time into ``parts`` (events in the order they first appear; rows of the rank taken,
    the others counted in ``left_out``), ``bad`` the lines that are not records, with
    ``parse_record``'s reason. Raises ``EngineFallback`` for a file the engine can't read exactly."""

    __slots__ = (
        "_engine",
        "_lines",
        "_ranks",
        "_rows",
        "_size",
        "bad",
        "chosen",
        "left_out",
        "parts",
        "source",
    )

    def __init__(self, source: Path, ranks: RankFilter, engine: ArrowEngine) -> None:
        self.source = source
        self.parts: dict[str, list[_Part]] = {}
        self.bad: list[tuple[int, str]] = []
        self.left_out: Counter[int] = Counter()
        self.chosen: frozenset[int] | None = None
        self._ranks: RankFilter | None = ranks  # None once the file's first record has been seen
        self._engine = engine
        self._lines: dict[str, list[bytes]] = {}  # per event, chunks of whole lines not parsed yet
        self._rows: dict[str, int] = {}
        self._size: dict[str, int] = {}
        number = 0
        held: list[bytes] = []  # a line's start, chunk by chunk, until its newline comes
        try:
            with source.open("rb") as file:
                while chunk := file.read(_CHUNK):
                    end = chunk.rfind(b"\n")
                    if end < 0:  # no line ends here: keep the chunk, and never more than a line's limit
                        if sum(map(len, held)) + len(chunk) > MAX_LINE_BYTES:
                            raise EngineFallback
                        held.append(chunk)
                        continue
                    lines = b"".join([*held, chunk[:end]]).split(b"\n")
                    held = [chunk[end + 1 :]]
                    if len(lines[0]) > MAX_LINE_BYTES:
                        raise EngineFallback
                    number = self._add(lines, number)
            rest = b"".join(held)
        except OSError:
            raise EngineFallback from None  # the line reader says what went wrong
        if rest.strip():
            last = parse_record(rest, False, source, number + 1)
            if isinstance(last, str):
                self.bad.append((number + 1, last))
            else:
                self._add([rest], number)
        for event in list(self._lines):
            self._parse(event)
        if self.bad and self._ranks is not None:
            raise EngineFallback  # no record at all: the line reader raises RunError

    def _add(self, lines: list[bytes], number: int) -> int:
        groups: dict[bytes, list[bytes]] = {}
        for line in lines:
            number += 1
            end = line.find(b'"', 10) if line.startswith(_PREFIX) else -1
            if end > 10 and b"\\" not in line[10:end]:
                group = groups.get(name := line[10:end])
                if group is None:
                    groups[name] = group = []
                    if self._ranks is not None:
                        self._first(line, number, self._ranks)
                group.append(line)
            elif line.strip():
                record = parse_record(line, True, self.source, number)
                if not isinstance(record, str):
                    raise EngineFallback  # a record the engine would be given some other way
                if not (groups or self.parts or self.bad or begins_a_record(line)):
                    raise EngineFallback  # not a JSON object first: the line reader raises RunError
                self.bad.append((number, record))
        for name, group in groups.items():
            try:
                event = name.decode()
            except UnicodeDecodeError:
                raise EngineFallback from None
            group.append(b"")  # so the chunk ends in a newline
            joined = b"\n".join(group)
            self.parts.setdefault(event, [])
            self._lines.setdefault(event, []).append(joined)
            self._rows[event] = self._rows.get(event, 0) + len(group) - 1
            self._size[event] = self._size.get(event, 0) + len(joined)
            if self._size[event] >= _BATCH:
                self._parse(event)
        return number

    def _first(self, line: bytes, number: int, ranks: RankFilter) -> None:
        """The file's first record chooses the rank (under ``"first"``, when no file before did): the
        line reader would choose the same, every line before it being no record."""
        record = parse_record(line, True, self.source, number)
        if isinstance(record, str):
            raise EngineFallback
        self.chosen = ranks.choose(record.rank)
        self._ranks = None

    def _parse(self, event: str) -> None:
        lines = self._lines.pop(event)
        rows = self._rows.pop(event)
        del self._size[event]
        table = self._engine.read(lines, rows) if rows >= FEW_LINES else None
        if table is not None:
            part = self._engine.stamped(self._engine.of_rank(table, self.chosen, self.left_out))
        else:
            part = _line_table(event, lines, self.source, self.chosen, self.left_out)
        if len(part):
            self.parts[event].append(part)


def _line_table(
    event: str, lines: list[bytes], source: Path, chosen: frozenset[int] | None, left_out: Counter[int]
) -> LineTable:
    """An event's lines parsed one by one, as ``read_records`` parses them: its rows of the ranks
    ``chosen`` (every rank for ``None``), the others counted in ``left_out``."""
    table = LineTable()
    for chunk in lines:
        for line in chunk.split(b"\n")[:-1]:
            record = parse_record(line, True, source, 0)
            if isinstance(record, str) or record.event != event or part_of(record.notes) != (0, 1):
                raise EngineFallback  # the line reader counts it with its line number, and joins parts
            if chosen is None or record.rank in chosen:
                table.add(record.payload, record.timestamp)
            else:
                left_out[record.rank] += 1
    return table


def _line_parts(source: Path, ranks: RankFilter, skipped: Skipped) -> list[tuple[str, _Part]]:
    """The file read by the line reader, ``read_records``' way."""
    parts: dict[str, LineTable] = {}
    for record in file_records(source, skipped):
        if ranks.keeps(record.rank):
            table = parts.get(record.event)
            if table is None:
                table = parts[record.event] = LineTable()
            table.add(record.payload, record.timestamp)
    return list(parts.items())


class _Joined(io.RawIOBase):
    """Chunks of bytes read as one stream, never joined into one buffer."""

    def __init__(self, chunks: list[bytes]) -> None:
        super().__init__()
        self._chunks = chunks
        self._next = 0
        self._at = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._next < len(self._chunks):
            chunk = memoryview(self._chunks[self._next])[self._at :]
            if chunk:
                size = min(len(buffer), len(chunk))
                buffer[:size] = chunk[:size]
                self._at += size
                return size
            self._next, self._at = self._next + 1, 0
        return 0


# -- the engine: pyarrow's JSON reader, its tables checked, restored and filtered ------------------

_Kind = Literal["int", "float", "bool", "str", "datetime", "object"]
_Column = tuple[str, _Kind, Any]
"""A column to build: its name, its kind, and its values (a pyarrow array; a list for ``object``)."""

_NOT_PAYLOAD = frozenset({_EVENT, _TIMESTAMP, NOTE_KEY})
_RFC3339 = TIMESTAMP_RFC3339
"""The writer's timestamps (``iso_timestamp``), which pyarrow converts as ``_utc`` does; others
are converted by ``_utc``."""
_WRITTEN = TIMESTAMP_WRITTEN
"""Exactly the writer's form, microseconds included: a time converted in a part (``stamped``) is
written back as the same text (``_texts``) where another part's times keep the event's as text."""
_WRITTEN_BACK = f"{TIMESTAMP_SECONDS}Z"  # pyarrow's %S writes a microsecond time's seconds as 05.123456


class ArrowEngine:
    """pyarrow, imported once per read: its JSON reader, and the columns built from its tables."""

    __slots__ = ("_pool", "json", "pa", "pc")

    def __init__(self) -> None:
        self.pa = _import("pyarrow")
        self.json = _import("pyarrow.json")
        self.pc = _import("pyarrow.compute")
        # The parser's buffers come from malloc, which hands a freed batch's back (pyarrow's default
        # pool, mimalloc or jemalloc, keeps them, and the process's peak grows with every batch).
        self._pool = self.pa.system_memory_pool()

    def read(self, lines: list[bytes], rows: int) -> Any | None:
        """One event's lines as a table of its payload and ``timestamp``, non-finite values restored;
        ``None`` when the engine can't type them exactly (the line reader reads them)."""
        pa = self.pa
        schema = pa.schema([(_EVENT, pa.string()), (_TIMESTAMP, pa.string())])
        try:
            table = self.json.read_json(
                _Joined(lines),
                parse_options=self.json.ParseOptions(explicit_schema=schema),
                memory_pool=self._pool,
            )
            table.validate(full=True)  # strings are UTF-8, as orjson requires
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        if table.num_rows != rows or not self._noted(table) or not self._typed(table):
            return None
        if self._in_parts(table):
            raise EngineFallback  # records written in parts: the line reader joins them
        return self._restored(table)

    def _in_parts(self, table: Any) -> bool:
        """Whether a row is one of a record's parts (its note's ``"parts"`` above 1)."""
        note = table.column(NOTE_KEY)
        if note.type.get_field_index(NOTE_PARTS) < 0:
            return False
        return bool(self.pc.max(self.pc.struct_field(note, NOTE_PARTS)).as_py() not in (None, 1))

    def _noted(self, table: Any) -> bool:
        """Whether every record carries today's note (``"v": 2`` or later): ``null`` only for the
        non-finite numbers it lists, and every string the trainer's."""
        pa, pc = self.pa, self.pc
        if NOTE_KEY not in table.column_names:
            return False
        note = table.column(NOTE_KEY)
        if not pa.types.is_struct(note.type) or note.type.get_field_index(NOTE_VERSION_KEY) < 0:
            return False
        version = pc.struct_field(note, NOTE_VERSION_KEY)
        if not pa.types.is_int64(version.type) or version.null_count:
            return False
        return bool(pc.min(version).as_py() >= 2)  # the rules of 2 hold in every later contract

    def _typed(self, table: Any) -> bool:
        """Whether every column has a type whose values are the JSON values as read."""
        pa, pc = self.pa, self.pc
        for field in table.schema:
            if field.name in _NOT_PAYLOAD:
                continue
            kind = field.type
            if field.name == _RANK and not _is_int_or_null(pa, kind):
                return False  # Record.rank is 0 for a rank that isn't an integer
            if pa.types.is_floating(kind):
                column = table.column(field.name)
                if pc.all(pc.is_finite(column)).as_py() is False:
                    return False  # NaN or Infinity written as such: not JSON to orjson
                low, high = (bound.as_py() for bound in pc.min_max(column).values())
                if low is not None and not -(2.0**63) < low <= high < 2.0**63:
                    return False  # perhaps an integer beyond 64 bits, which pyarrow reads as a float
            elif not (pa.types.is_boolean(kind) or _is_text(pa, kind) or _is_int_or_null(pa, kind)):
                return False  # lists, dicts, strings pyarrow read as times
        stamps = table.column(_TIMESTAMP).type
        return _is_text(pa, stamps) or pa.types.is_null(stamps)

    def _restored(self, table: Any) -> Any | None:
        """The table without event and note, NaN and infinities put back where the note lists a
        top-level key's pointer; ``None`` for a pointer into a list or dict, or into a column that
        isn't numeric."""
        pa, pc = self.pa, self.pc
        note = table.column(NOTE_KEY)
        table = table.drop_columns([_EVENT, NOTE_KEY])
        if note.type.get_field_index(NOTE_NON_FINITE) < 0:
            return table
        listed = pc.struct_field(note, NOTE_NON_FINITE)
        found: dict[str, dict[int, float]] = {}
        for kind, number in FLOAT_OF_KIND.items():
            if not pa.types.is_struct(listed.type) or listed.type.get_field_index(kind) < 0:
                continue
            pointers = pc.struct_field(listed, kind)
            if not pa.types.is_list(pointers.type):
                return None
            start = 0
            for chunk in pointers.chunks:
                flat = chunk.flatten()
                if len(flat):
                    rows = pc.list_parent_indices(chunk).to_pylist()
                    for row, pointer in zip(rows, flat.to_pylist(), strict=True):
                        tokens = pointer_tokens(pointer)
                        if tokens is None:
                            continue  # leads nowhere: restore_non_finite ignores it too
                        if len(tokens) > 1:
                            return None
                        key = tokens[0]
                        found.setdefault(key, {}).setdefault(start + row, number)
                start += len(chunk)
        for key, numbers in found.items():
            if key in _NOT_PAYLOAD or key not in table.column_names:
                continue  # a value that isn't null, or isn't a payload value: nothing to restore
            column = table.column(key)
            if not (pa.types.is_floating(column.type) or _is_int_or_null(pa, column.type)):
                return None
            gaps = column.is_null()
            rows = sorted(row for row in numbers if gaps[row].as_py())
            if not rows:
                continue
            mask = [False] * len(column)
            for row in rows:
                mask[row] = True
            values = column.cast(pa.float64(), safe=False).combine_chunks()
            restored = pc.replace_with_mask(values, pa.array(mask), pa.array([numbers[r] for r in rows]))
            table = table.set_column(table.column_names.index(key), key, restored)
        return table

    def of_rank(self, table: Any, chosen: frozenset[int] | None, left_out: Counter[int]) -> Any:
        """The table's rows of the ranks ``chosen`` (every row for ``None``), the others counted in
        ``left_out``; a row without an integer ``rank`` is rank 0, as in ``Record.rank``."""
        if chosen is None:
            return table
        pa, pc = self.pa, self.pc
        if _RANK in table.column_names and not pa.types.is_null(table.column(_RANK).type):
            ranks = table.column(_RANK).fill_null(0)
        else:
            ranks = pa.repeat(0, table.num_rows)
        kept = pc.is_in(ranks, value_set=pa.array(sorted(chosen), pa.int64()))
        if pc.all(kept).as_py() is not False:
            return table
        for other in pc.value_counts(pc.filter(ranks, pc.invert(kept))).to_pylist():
            left_out[other["values"]] += other["counts"]
        return table.filter(kept)

    def columns(self, parts: list[_Part]) -> list[_Column]:
        """An event's columns from its parts (in run order), ``timestamp`` last."""
        pa = self.pa
        parts = self._joined(parts)
        if parts and not any(isinstance(part, LineTable) for part in parts):
            try:
                table = pa.concat_tables(parts, promote_options="permissive")
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                pass  # types that differ between parts (an int and a str column): typed from the values
            else:
                return self._table_columns(table)
        values = LineTable()
        for part in parts:
            if isinstance(part, LineTable):
                values.extend(part.columns, part.stamps)
            else:
                names = [name for name in part.column_names if name != _TIMESTAMP]
                values.extend({name: part.column(name).to_pylist() for name in names}, self._texts(part))
        return [(name, kind, self._array(kind, column)) for name, kind, column in values.typed()]

    def _joined(self, parts: list[_Part]) -> list[_Part]:
        """The parts with each run of the line reader's made one, and a table where its kinds allow."""
        out: list[_Part] = []
        for part in parts:
            if isinstance(part, LineTable) and out and isinstance(out[-1], LineTable):
                out[-1].extend(part.columns, part.stamps)
            else:
                out.append(part)
        return [self._table(part) if isinstance(part, LineTable) else part for part in out]

    def _table(self, values: LineTable) -> Any:
        """The line reader's values as a table like ``read``'s (each column typed by ``_kind``), or
        as they are when a column can't be one (``object``: lists, dicts, several types)."""
        pa = self.pa
        arrays = {}
        for name, column in values.columns.items():
            kind = _kind(column)
            if kind == "object" and any(value is not None for value in column):
                return values
            arrays[name] = pa.nulls(len(column)) if kind == "object" else self._array(kind, column)
        arrays[_TIMESTAMP] = pa.array(values.stamps, pa.string())
        return self.stamped(pa.table(arrays))

    def stamped(self, table: Any) -> Any:
        """The table with its ``timestamp`` as UTC times when every one is in the writer's exact form
        (``_WRITTEN``), so a part held until the frames are built costs 8 bytes a time, not its text."""
        pa, pc = self.pa, self.pc
        stamps = table.column(_TIMESTAMP)
        if not _is_text(pa, stamps.type):
            return table
        if pc.all(pc.match_substring_regex(stamps, _WRITTEN)).as_py() is False:  # None: all missing
            return table
        try:
            times = stamps.cast(pa.timestamp("us", "UTC"))
        except pa.ArrowInvalid:
            return table  # a date that doesn't exist, say: typed with the others when the frame is built
        return table.set_column(table.column_names.index(_TIMESTAMP), _TIMESTAMP, times)

    def _table_columns(self, table: Any) -> list[_Column]:
        pa, pc = self.pa, self.pc
        out: list[_Column] = []
        for field in table.schema:
            if field.name == _TIMESTAMP:
                continue
            column = table.column(field.name)
            kind = _arrow_kind(pa, field.type)
            out.append((field.name, kind, column.to_pylist() if kind == "object" else column))
        stamps = table.column(_TIMESTAMP)
        if pa.types.is_timestamp(stamps.type):  # every part's converted (``stamped``)
            out.append((_TIMESTAMP, "datetime", stamps))
            return out
        written = pc.all(pc.match_substring_regex(stamps, _RFC3339)) if _is_text(pa, stamps.type) else None
        if written is not None and written.as_py() is not False:  # every one the writer's (nulls aside)
            try:
                out.append((_TIMESTAMP, "datetime", stamps.cast(pa.timestamp("us", "UTC"))))
                return out
            except pa.ArrowInvalid:
                pass  # a date that doesn't exist, say: _utc's verdict
        kind, values = _stamps(self._texts(table))
        out.append((_TIMESTAMP, kind, self._array(kind, values)))
        return out

    def _texts(self, table: Any) -> list[Any]:
        """The ``timestamp`` of each row as ``Record.timestamp`` has it: its text, or ``None``."""
        stamps = table.column(_TIMESTAMP)
        if self.pa.types.is_timestamp(stamps.type):  # converted from the writer's exact text: the same
            return self.pc.strftime(stamps, format=_WRITTEN_BACK).to_pylist()  # type: ignore[no-any-return]
        return stamps.to_pylist() if _is_text(self.pa, stamps.type) else [None] * table.num_rows

    def _array(self, kind: _Kind, values: list[Any]) -> Any:
        pa = self.pa
        if kind == "object":
            return values
        if kind == "float":
            values = [None if v is None else float(v) for v in values]
        types = {
            "int": pa.int64(),
            "float": pa.float64(),
            "bool": pa.bool_(),
            "str": pa.string(),
            "datetime": pa.timestamp("us", "UTC"),
        }
        return pa.array(values, type=types[kind])


def _is_text(pa: Any, kind: Any) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _is_int_or_null(pa: Any, kind: Any) -> bool:
    return bool(pa.types.is_int64(kind) or pa.types.is_null(kind))


def _arrow_kind(pa: Any, kind: Any) -> _Kind:
    if pa.types.is_int64(kind):
        return "int"
    if pa.types.is_floating(kind):
        return "float"
    if pa.types.is_boolean(kind):
        return "bool"
    if _is_text(pa, kind):
        return "str"
    return "object"  # null: a key only ever null


# -- columns typed from Python values: the line reader's records -------------------------------


class LineTable:
    """One event's values, a list per key (``None`` where a record lacks it): no dict per row."""

    __slots__ = ("columns", "rows", "stamps")

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {}
        self.stamps: list[str | None] = []
        self.rows = 0

    def __len__(self) -> int:
        return self.rows

    def add(self, payload: dict[str, Any], timestamp: str | None) -> None:
        columns = self.columns
        for key, value in payload.items():
            column = columns.get(key)
            if column is None:
                column = columns[key] = [None] * self.rows
            column.append(value)
        self.rows += 1
        if len(payload) < len(columns):
            for column in columns.values():
                if len(column) < self.rows:
                    column.append(None)
        self.stamps.append(timestamp)

    def extend(self, columns: dict[str, list[Any]], stamps: list[str | None]) -> None:
        """Rows given as a list per key (each as long as ``stamps``)."""
        for key, values in columns.items():
            column = self.columns.get(key)
            if column is None:
                column = self.columns[key] = [None] * self.rows
            column += values
        self.rows += len(stamps)
        for column in self.columns.values():
            column += [None] * (self.rows - len(column))
        self.stamps += stamps

    def typed(self) -> list[tuple[str, _Kind, list[Any]]]:
        """Each key (``timestamp`` last) with its kind and one value per row."""
        out: list[tuple[str, _Kind, list[Any]]] = [
            (name, _kind(values), values) for name, values in self.columns.items()
        ]
        out.append((_TIMESTAMP, *_stamps(self.stamps)))
        return out


def _kind(values: list[Any]) -> _Kind:
    kinds = {type(value) for value in values if value is not None}
    if kinds == {int}:
        low, high = _INT64
        return "int" if all(low <= v <= high for v in values if v is not None) else "object"
    if kinds and kinds <= {int, float}:
        return "float"
    if kinds == {bool}:
        return "bool"
    if kinds == {str}:
        return "str"
    return "object"


def _stamps(texts: list[Any]) -> tuple[_Kind, list[Any]]:
    """The timestamps as UTC datetimes when every one is RFC 3339 (or missing), else as read."""
    stamps = [_utc(text) for text in texts]
    if all(stamp is not None or text is None for stamp, text in zip(stamps, texts, strict=True)):
        return "datetime", stamps
    return _kind(texts), texts


def _utc(text: object) -> datetime | None:
    """An RFC 3339 timestamp as an aware UTC datetime; ``None`` for anything else."""
    if type(text) is not str:
        return None
    try:
        moment = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return None
    return moment.astimezone(timezone.utc) if moment.tzinfo is not None else None


# -- building: one function per library --------------------------------------------------------

_Build = Callable[[list[_Column]], Any]


def _each(columns: list[_Column], make: Callable[[str, _Kind, Any], Any]) -> list[tuple[str, Any]]:
    """Each column's name and what ``make`` makes of it, ``columns`` emptied as it goes (a column's
    values are let go once made)."""
    made = []
    columns.reverse()
    while columns:
        name, kind, values = columns.pop()
        made.append((name, make(name, kind, values)))
        del values
    return made


def _builder(library: str) -> _Build:
    if library == "pandas":
        return _pandas_frame(_import("pandas"))
    if library == "polars":
        return _polars_frame(_import("polars"))
    raise ValueError(f"library must be 'pandas' or 'polars', got {library!r}")


def _import(name: str) -> ModuleType:
    return require(name, "frames", needed_by="speedtronic.runs.frames")


def _pandas_frame(pd: Any) -> _Build:
    nullable = {"int": pd.Int64Dtype(), "bool": pd.BooleanDtype()}

    def series(kind: _Kind, values: Any) -> Any:
        if kind == "object":
            return pd.Series(values, dtype=object)
        if kind == "str":
            return pd.Series(values.to_pylist())
        if kind in nullable and values.null_count:
            return values.to_pandas(types_mapper=lambda _: nullable[kind])
        return values.to_pandas()

    def build(columns: list[_Column]) -> Any:
        return pd.DataFrame(dict(_each(columns, lambda name, kind, values: series(kind, values))))

    return build


def _polars_frame(pl: Any) -> _Build:
    def series(name: str, kind: _Kind, values: Any) -> Any:
        if kind == "object":
            return pl.Series(name, values, dtype=pl.Object)
        return pl.Series(name, values)

    def build(columns: list[_Column]) -> Any:
        return pl.DataFrame([made for _, made in _each(columns, series)])

    return build
