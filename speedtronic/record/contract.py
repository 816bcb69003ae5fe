"""The JSONL record contract: what one line of a speedtronic run is, for its writer and every reader
(reserved keys, the note, parts, the timestamp, rank file names; ``docs/shipping.md``)."""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Container, Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

__all__ = [
    "FLOAT_OF_KIND",
    "FLOAT_OF_TEXT",
    "NON_FINITE_KINDS",
    "NOTE_CONVERTED",
    "NOTE_KEY",
    "NOTE_NON_FINITE",
    "NOTE_ORIGIN",
    "NOTE_PART",
    "NOTE_PARTS",
    "NOTE_TRUNCATED",
    "NOTE_VERSION",
    "NOTE_VERSION_KEY",
    "ORIGIN_OWN",
    "ORIGIN_USER",
    "PART_HEAD",
    "RECORD_PREFIX",
    "RESERVED_KEYS",
    "TIMESTAMP_RFC3339",
    "TIMESTAMP_SECONDS",
    "TIMESTAMP_WRITTEN",
    "empty_note",
    "event_fields",
    "free_name",
    "is_own_note",
    "is_own_record",
    "iso_timestamp",
    "merged_note",
    "non_finite_kind",
    "non_finite_text",
    "note_contract",
    "own_note",
    "part_of",
    "payload_key",
    "pointer_token",
    "pointer_tokens",
    "rank_of_name",
    "rank_path",
    "restore_non_finite",
    "restore_non_finite_text",
    "second_text",
    "split_time",
    "timestamp_ns",
    "timestamp_text",
]

NOTE_KEY = "_speedtronic"
"""The field saying the record's contract and what was converted, truncated or non-finite."""

NOTE_VERSION_KEY = "v"
NOTE_ORIGIN = "origin"
NOTE_CONVERTED = "converted"
NOTE_TRUNCATED = "truncated"
NOTE_NON_FINITE = "non_finite"
NOTE_PART = "part"
NOTE_PARTS = "parts"
"""The note's fields: its contract version, whose record it is, the keys converted to text and cut
short, the JSON Pointers of the non-finite numbers (by kind: ``NON_FINITE_KINDS``), and which part of its
record a line is (``part`` of ``parts``)."""

NOTE_VERSION = 3
"""The record contract a note's ``"v"`` names: every key always present, non-finite numbers ``null``
and listed by kind, strings always the trainer's (since 2); a record may be written in parts, which
its note numbers (``"part"``, ``"parts"``: since 3). Records without it are older (see
``note_contract``)."""

PART_HEAD = ("step", "rank", "world_size")
"""The fields every part of a record written in parts repeats after its ``event`` (when the record
has them): readers choose records by rank, and a part read alone still says its step."""

ORIGIN_USER = "user"
"""The note's ``"origin"`` on a record of an event the program emitted."""

ORIGIN_OWN = "speedtronic"
"""The note's ``"origin"`` on a record the logger wrote about itself (``hook_error``, ``logging_error``)."""

RESERVED_KEYS: frozenset[str] = frozenset({"event", "timestamp", NOTE_KEY, "rank", "world_size"})
"""Keys a record owns: the event's name, its timestamp, the note, and the process's ``rank`` and
``world_size`` (which the readers choose records by; the logger adds them in a job of several
processes). A payload key of one of those names (a LoRA ``rank``, say) is kept under
``payload_<key>`` instead (``payload_key``)."""

# A reader may split a file by event from the raw bytes (speedtronic.runs.frames) because of this.
RECORD_PREFIX = b'{"event":"'
"""How every record the writer produces begins: its event's name comes first."""

NON_FINITE_KINDS = ("nan", "inf", "neg_inf")
"""The note's ``non_finite`` lists, by kind of number."""

FLOAT_OF_KIND: Mapping[str, float] = {"nan": math.nan, "inf": math.inf, "neg_inf": -math.inf}
"""The number each of the note's ``non_finite`` lists stands for."""

FLOAT_OF_TEXT: Mapping[str, float] = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
"""The number each of strict JSON's neighbours' names stands for (``non_finite_text``): what records
without a note (older writers, other writers) hold instead of ``null``."""

TIMESTAMP_SECONDS = "%Y-%m-%dT%H:%M:%S"
"""The ``strftime`` form of a record's ``timestamp`` up to its seconds (``iso_timestamp`` adds the
microseconds and ``Z``)."""

TIMESTAMP_WRITTEN = r"^\d{4}-\d\d-\d\dT([01]\d|2[0-3]):[0-5]\d:[0-5]\d\.\d{6}Z$"
"""A regular expression matching exactly the writer's ``timestamp`` (``iso_timestamp``)."""

TIMESTAMP_RFC3339 = r"^\d{4}-\d\d-\d\dT([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{6})?Z$"
"""A regular expression matching the writer's ``timestamp`` and the same without microseconds."""

_NON_FINITE_TEXT = {math.inf: "Infinity", -math.inf: "-Infinity"}
_KIND_OF_TEXT = {"NaN": "nan", "Infinity": "inf", "-Infinity": "neg_inf"}
_STR = frozenset({str})
_RANK_NAME = re.compile(r"(?P<stem>.+)\.rank(?P<rank>\d+)(?P<suffix>(?:\.[^.]*)?)")


# -- the note -------------------------------------------------------------------------------------


def empty_note(origin: str = ORIGIN_USER) -> dict[str, Any]:
    """The note of a record with nothing to say, in the one shape every note has (a new dict)."""
    return {
        NOTE_VERSION_KEY: NOTE_VERSION,
        NOTE_ORIGIN: origin,
        NOTE_CONVERTED: [],
        NOTE_TRUNCATED: [],
        NOTE_NON_FINITE: {"nan": [], "inf": [], "neg_inf": []},
        NOTE_PART: 0,
        NOTE_PARTS: 1,
    }


def merged_note(
    given: dict[str, Any] | None, converted: list[str], truncated: list[str], found: list[tuple[str, str]]
) -> dict[str, Any]:
    """The note of a record written with ``converted`` and ``truncated`` keys and the non-finite
    numbers ``found`` (``(JSON Pointer, non_finite_text)`` pairs), added to the lists of a note the
    record already held (``given``: the logger's own records' origin and lists are kept)."""
    origin = given.get(NOTE_ORIGIN) if given is not None else None
    note = empty_note(origin if type(origin) is str else ORIGIN_USER)
    lists = note[NOTE_NON_FINITE]
    if given is not None:
        for name in (NOTE_CONVERTED, NOTE_TRUNCATED):
            note[name] += [key for key in _list(given.get(name)) if type(key) is str]
        earlier = given.get(NOTE_NON_FINITE)
        if isinstance(earlier, dict):
            for kind in NON_FINITE_KINDS:
                lists[kind] += [at for at in _list(earlier.get(kind)) if type(at) is str]
    note[NOTE_CONVERTED] += converted
    note[NOTE_TRUNCATED] += truncated
    for pointer, text in found:
        lists[non_finite_kind(text)].append(pointer)
    return note


def _list(value: Any) -> list[Any]:
    return value if type(value) is list else []


def own_note() -> dict[str, Any]:
    """What the logger puts under ``NOTE_KEY`` in a record of its own, before it is written."""
    return {NOTE_ORIGIN: ORIGIN_OWN}


def is_own_record(event_dict: Mapping[str, Any]) -> bool:
    """Whether a record (an event dict, or a record read back) is one the logger wrote about itself:
    its note says ``"origin": "speedtronic"``. A payload can't forge it: ``event_fields`` renames a
    payload's ``_speedtronic`` key."""
    return is_own_note(event_dict.get(NOTE_KEY))


def is_own_note(note: Any) -> bool:
    """Whether a record's note (its ``NOTE_KEY`` value) names it as the logger's own record."""
    return isinstance(note, dict) and note.get(NOTE_ORIGIN) == ORIGIN_OWN


def note_contract(note: Any) -> int:
    """Which record contract a record's ``NOTE_KEY`` value says it follows.

    ``NOTE_VERSION`` (3) or 2 for a note with ``"v"`` (3: the line may be one of a record's parts);
    1 for the pointer-keyed note of the writer before it (``{"non_finite": {"/loss": "NaN"}}``) and
    for one naming the record as the logger's own; 0 for
    anything else, no note included: an older writer's record, or another writer's, whose
    ``"NaN"``/``"Infinity"``/``"-Infinity"`` strings stood for the numbers.
    """
    if type(note) is not dict:
        return 0
    version = note.get(NOTE_VERSION_KEY)
    if type(version) is int and version >= 2:
        return version
    if isinstance(note.get(NOTE_NON_FINITE), dict) or NOTE_ORIGIN in note:
        return 1
    return 0


def part_of(note: Any) -> tuple[int, int]:
    """``(part, parts)`` of a line whose note is ``note``: ``(0, 1)`` for a whole record, whatever
    its contract (older notes have no parts); ``(i, n)`` for part ``i`` (from 0) of a record written
    in ``n`` lines."""
    if type(note) is not dict:
        return 0, 1
    part, parts = note.get(NOTE_PART, 0), note.get(NOTE_PARTS, 1)
    if type(part) is not int or type(parts) is not int or parts < 1 or not 0 <= part < parts:
        return 0, 1
    return part, parts


def non_finite_kind(text: str) -> str:
    """The note's list (``"nan"``, ``"inf"``, ``"neg_inf"``) for strict JSON's name of a number."""
    return _KIND_OF_TEXT.get(text, "nan")


def non_finite_text(value: float) -> str:
    """How strict JSON's neighbours name a non-finite float: ``"NaN"``, ``"Infinity"`` or
    ``"-Infinity"`` (the note's lists are ``non_finite_kind`` of these)."""
    return _NON_FINITE_TEXT.get(value, "NaN")


def restore_non_finite(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` (as read from a JSONL line) with the non-finite numbers its note lists put back.

    Each JSON Pointer in the note's ``non_finite`` lists (``"nan"``, ``"inf"``, ``"neg_inf"``; or, in
    files of the writer before, its pointer-keyed map to ``"NaN"``/``"Infinity"``/``"-Infinity"``) that
    leads to a ``null`` gets ``float("nan")``, ``float("inf")`` or ``float("-inf")`` again; the record
    is changed in place and returned. Pointers that lead nowhere are ignored.
    """
    note = record.get(NOTE_KEY)
    listed = note.get(NOTE_NON_FINITE) if isinstance(note, dict) else None
    if not isinstance(listed, dict):
        return record
    if isinstance(note, dict) and NOTE_VERSION_KEY in note:
        for kind in NON_FINITE_KINDS:
            pointers = listed.get(kind)
            for pointer in pointers if type(pointers) is list else ():
                _put_back(record, pointer, FLOAT_OF_KIND[kind])
    else:
        for pointer, text in listed.items():
            kind = non_finite_kind(text) if type(text) is str else "nan"
            _put_back(record, pointer, FLOAT_OF_KIND[kind])
    return record


def restore_non_finite_text(value: Any) -> Any:
    """``value`` (read from a record without a note: an older writer's, another writer's) with the
    strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (``FLOAT_OF_TEXT``) as the numbers they
    stand for, at any depth (a new value)."""
    if type(value) is str:
        return FLOAT_OF_TEXT.get(value, value)
    if type(value) is dict:
        return {key: restore_non_finite_text(item) for key, item in value.items()}
    if type(value) is list:
        return [restore_non_finite_text(item) for item in value]
    return value


def pointer_token(key: str) -> str:
    """``key`` as one token of a JSON Pointer (RFC 6901: ``~`` as ``~0``, ``/`` as ``~1``)."""
    return key.replace("~", "~0").replace("/", "~1")


def pointer_tokens(pointer: object) -> list[str] | None:
    """The keys a JSON Pointer of the note names (``"/a~1b/0"`` gives ``["a/b", "0"]``); ``None`` for
    anything that is not one (not a string, not starting with ``/``)."""
    if not isinstance(pointer, str) or not pointer.startswith("/"):
        return None
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _put_back(record: dict[str, Any], pointer: object, number: float) -> None:
    tokens = pointer_tokens(pointer)
    if tokens is None:
        return
    container: Any = record
    try:
        for token in tokens[:-1]:
            container = container[int(token)] if isinstance(container, list) else container[token]
        last: Any = int(tokens[-1]) if isinstance(container, list) else tokens[-1]
        if container[last] is None:
            container[last] = number
    except (KeyError, IndexError, ValueError, TypeError):
        return


# -- time -----------------------------------------------------------------------------------------


def iso_timestamp(seconds: float) -> str:
    """``seconds`` since the epoch as RFC 3339 UTC with microseconds: ``2026-01-01T12:00:00.123456Z``
    (what structlog's ``TimeStamper(fmt="iso", utc=True)`` writes): a record's ``timestamp``."""
    whole, micros = split_time(seconds)
    return timestamp_text(second_text(whole), micros)


def timestamp_text(second: str, micros: int) -> str:
    """A record's ``timestamp`` from its text up to the second (``second_text``) and its microseconds."""
    return f"{second}.{micros:06d}Z"


def second_text(whole: int) -> str:
    """A timestamp's text up to its seconds (``TIMESTAMP_SECONDS``), for whole seconds since the epoch:
    ``AddTimestamp`` keeps the last one and adds the microseconds."""
    return time.strftime(TIMESTAMP_SECONDS, time.gmtime(whole))


def split_time(seconds: float) -> tuple[int, int]:
    """Whole seconds and microseconds, rounded as ``datetime.fromtimestamp`` rounds them."""
    whole = math.floor(seconds)
    micros = round((seconds - whole) * 1_000_000)
    return (whole + 1, 0) if micros == 1_000_000 else (whole, micros)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def timestamp_ns(stamp: object) -> int | None:
    """A record's ``timestamp`` read back as nanoseconds since the epoch: an RFC 3339 string
    (``iso_timestamp``'s, exact to the microsecond; one without an offset is UTC) or a finite number of
    seconds (structlog's ``TimeStamper(fmt=None)``); ``None`` for anything else."""
    if isinstance(stamp, int | float) and not isinstance(stamp, bool):
        return int(stamp * 1_000_000_000) if math.isfinite(stamp) else None
    if not isinstance(stamp, str):
        return None
    try:
        moment = datetime.fromisoformat(stamp[:-1] + "+00:00" if stamp.endswith(("Z", "z")) else stamp)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1000


# -- keys -----------------------------------------------------------------------------------------


def free_name(taken: Container[Any], name: str, counters: dict[str, int] | None = None) -> str:
    """``name``, or ``name#2``, ``name#3``... : the first not in ``taken``. The one rule every renamed
    key follows (reserved payload keys, keys that collide once made strings, credential keys).

    ``counters`` (one dict per mapping being renamed) remembers the last suffix given for each name,
    so renaming ``n`` keys that all collide on one name costs ``O(n)``, not ``O(n**2)``."""
    if name not in taken:
        return name
    n = counters.get(name, 1) if counters is not None else 1
    candidate = name
    while candidate in taken:
        n += 1
        candidate = f"{name}#{n}"
    if counters is not None:
        counters[name] = n
    return candidate


def payload_key(
    key: str,
    taken: Container[Any],
    counters: dict[str, int] | None = None,
    reserved: Container[str] = RESERVED_KEYS,
) -> str:
    """The name a payload key is kept under: itself, or ``payload_<key>`` for a reserved key
    (``payload_<key>#2``, ``#3``... if the payload has that name too). ``reserved``: the record's keys,
    or more where a payload meets another logger's own keys (``StructlogHook``)."""
    return free_name(taken, f"payload_{key}", counters) if key in reserved else key


def event_fields(payload: Mapping[Any, Any], key_text: Any = str) -> dict[str, Any]:
    """A payload as a record's fields: a new dict, read once through ``payload.items()``.

    String keys stay as they are, others become their text (``key_text``, the writer's; ``1`` and
    ``"1"`` become ``"1#2"`` and ``"1"``), and reserved ones are renamed (``timestamp`` becomes
    ``payload_timestamp``). What the payload's ``keys()`` or ``__iter__`` say plays no part, so no
    mapping can hide a key from the renaming. When a key was not a string, the fields carry the start
    of the record's note, ``{"converted": [its new names]}``: the writer lists them there, as it lists
    keys converted one level down.
    """
    fields = dict(payload.items()) if type(payload) is not dict else payload.copy()
    # str keys, none reserved (keys() first: a lookup per reserved name, not a visit of every key)
    if fields.keys().isdisjoint(RESERVED_KEYS) and _STR.issuperset(map(type, fields)):
        return fields
    taken: dict[str, None] = dict.fromkeys(key for key in fields if type(key) is str)
    out: dict[str, Any] = {}
    counters: dict[str, int] = {}
    converted: list[str] = []
    for key, value in fields.items():
        name = key if type(key) is str else free_name(taken, key_text(key), counters)
        if name in RESERVED_KEYS:
            name = payload_key(name, taken, counters)
        if type(key) is not str:
            converted.append(name)
        taken[name] = None
        out[name] = value
    if converted:
        out[NOTE_KEY] = {NOTE_CONVERTED: converted}
    return out


# -- files ----------------------------------------------------------------------------------------


def rank_path(path: str | os.PathLike[str], rank: int) -> Path:
    """The file of ``rank``'s records: rank 0 keeps ``path``; rank 2 of ``m.jsonl`` writes
    ``m.rank2.jsonl``, of ``m.json`` ``m.rank2.json``, of ``m`` ``m.rank2`` (the suffix is kept)."""
    path = Path(path)
    return path if rank == 0 else path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def rank_of_name(name: str) -> tuple[str, int] | None:
    """For a file named by ``rank_path`` for a rank above 0: rank 0's file name and the rank
    (``"m.rank2.json"`` gives ``("m.json", 2)``); ``None`` for any other name."""
    match = _RANK_NAME.fullmatch(name)
    if match is None:
        return None
    return match["stem"] + match["suffix"], int(match["rank"])
