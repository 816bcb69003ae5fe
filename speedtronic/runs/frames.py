"""A run as dataframes: one typed table per event, for pandas or polars (the ``frames`` extra).

Reading a whole JSONL file into one table mixes events whose keys differ, so every integer column
with a gap becomes float (pandas) and keys that appear late are dropped (polars infers its schema
from the first 100 rows). ``read_frames`` reads the run through ``read_records`` (so torn lines are
skipped, NaN and infinities are restored from the record's note, a resumed run's segments are all
there) and builds one table per event, each column typed from every value it holds:

- integers: ``int64`` (pandas ``Int64``, nullable, where some records lack the key); polars ``Int64``
- numbers with a float among them: ``float64`` with NaN and infinities as written; in pandas a missing
  value is NaN too, polars keeps it ``null``
- booleans: ``bool`` (pandas ``boolean`` where there are gaps); strings: the library's string type
- ``timestamp``: the record's time as a UTC datetime (kept as text if any value isn't RFC 3339)
- anything else (lists, dicts, a key holding values of several types, integers beyond 64 bits): the
  Python values as read, NaN restored, in an ``object`` column (polars ``Object``)

Columns come in the order their keys first appear in that event's records, ``timestamp`` last. The
record's ``_speedtronic`` note is not a column: its non-finite values are already restored.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from types import ModuleType
from typing import Any, Literal

from speedtronic.runs.reader import RankChoice, Skipped, read_records

__all__ = ["Library", "read_frame", "read_frames"]

Library = Literal["pandas", "polars"]
"""The dataframe library to build tables with."""

_INT64 = (-(2**63), 2**63 - 1)
_TIMESTAMP = "timestamp"


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
    an empty DataFrame for one the run lacks. ``rank`` and ``skipped`` are ``read_records``'s.
    Raises ``ModuleNotFoundError`` naming the extra to install when ``library`` isn't installed, and
    ``RunError`` for a run that can't be read.
    """
    build = _builder(library)
    wanted = None if events is None else list(dict.fromkeys(events))
    tables: dict[str, _Table] = {name: _Table() for name in wanted or ()}
    for record in read_records(path, skipped, rank=rank):
        table = tables.get(record.event)
        if table is None:
            if wanted is not None:
                continue
            table = tables[record.event] = _Table()
        table.add(record.payload, record.timestamp)
    return {event: build(table.typed()) for event, table in tables.items()}


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


# -- columns: typed once, from every value -----------------------------------------------------

_Kind = Literal["int", "float", "bool", "str", "datetime", "object"]


class _Table:
    """One event's values, a list per key (``None`` where a record lacks it): no dict per row."""

    __slots__ = ("columns", "rows", "stamps")

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {}
        self.stamps: list[str | None] = []
        self.rows = 0

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

    def typed(self) -> list[tuple[str, _Kind, list[Any]]]:
        """Each key (``timestamp`` last) with its kind and one value per row."""
        out: list[tuple[str, _Kind, list[Any]]] = [
            (name, _kind(values), values) for name, values in self.columns.items()
        ]
        texts = self.stamps
        stamps = [_utc(text) for text in texts]
        if all(stamp is not None or text is None for stamp, text in zip(stamps, texts, strict=True)):
            out.append((_TIMESTAMP, "datetime", stamps))
        else:
            out.append((_TIMESTAMP, _kind(texts), texts))
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

_Build = Callable[[list[tuple[str, _Kind, list[Any]]]], Any]


def _builder(library: str) -> _Build:
    if library == "pandas":
        return _pandas_frame(_import("pandas"))
    if library == "polars":
        return _polars_frame(_import("polars"))
    raise ValueError(f"library must be 'pandas' or 'polars', got {library!r}")


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            f"speedtronic.runs.frames requires {name}: pip install 'speedtronic[frames]'", name=name
        ) from None


def _pandas_frame(pd: Any) -> _Build:
    def series(kind: _Kind, values: list[Any]) -> Any:
        gaps = any(value is None for value in values)
        if kind == "int":
            return pd.Series(values, dtype="Int64" if gaps else "int64")
        if kind == "float":
            return pd.Series([float("nan") if v is None else float(v) for v in values], dtype="float64")
        if kind == "bool":
            return pd.Series(values, dtype="boolean" if gaps else "bool")
        if kind == "datetime":
            return pd.Series(pd.to_datetime(values, utc=True))
        if kind == "str":
            return pd.Series(values)
        return pd.Series(values, dtype=object)

    def build(columns: list[tuple[str, _Kind, list[Any]]]) -> Any:
        return pd.DataFrame({name: series(kind, values) for name, kind, values in columns})

    return build


def _polars_frame(pl: Any) -> _Build:
    dtypes = {
        "int": pl.Int64,
        "float": pl.Float64,
        "bool": pl.Boolean,
        "str": pl.String,
        "datetime": pl.Datetime("us", "UTC"),
        "object": pl.Object,
    }

    def series(name: str, kind: _Kind, values: list[Any]) -> Any:
        if kind == "float":
            values = [None if v is None else float(v) for v in values]
        return pl.Series(name, values, dtype=dtypes[kind])

    def build(columns: list[tuple[str, _Kind, list[Any]]]) -> Any:
        return pl.DataFrame([series(name, kind, values) for name, kind, values in columns])

    return build
