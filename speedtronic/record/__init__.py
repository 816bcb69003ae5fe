"""The record floor: what a record is and how its values are made, below every stage that writes one.

``contract`` (the JSONL line), ``values`` (plain and strict-JSON data), ``secrets`` (what a secret is),
``text`` (``key=value`` tokens), ``safe_text`` (any object's text, never raising)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from speedtronic.record.contract import (
    FLOAT_OF_KIND,
    FLOAT_OF_TEXT,
    NON_FINITE_KINDS,
    NOTE_CONVERTED,
    NOTE_KEY,
    NOTE_NON_FINITE,
    NOTE_ORIGIN,
    NOTE_PART,
    NOTE_PARTS,
    NOTE_TRUNCATED,
    NOTE_VERSION,
    NOTE_VERSION_KEY,
    ORIGIN_OWN,
    ORIGIN_USER,
    PART_HEAD,
    RECORD_PREFIX,
    RESERVED_KEYS,
    TIMESTAMP_RFC3339,
    TIMESTAMP_SECONDS,
    TIMESTAMP_WRITTEN,
    empty_note,
    event_fields,
    free_name,
    is_own_note,
    is_own_record,
    iso_timestamp,
    merged_note,
    non_finite_kind,
    non_finite_text,
    note_contract,
    own_note,
    part_of,
    payload_key,
    pointer_token,
    pointer_tokens,
    rank_of_name,
    rank_path,
    restore_non_finite,
    restore_non_finite_text,
    second_text,
    split_time,
    timestamp_ns,
    timestamp_text,
)

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


if not TYPE_CHECKING:  # hidden from mypy, which would take any name of this module for a real one

    def __getattr__(name: str) -> Any:
        """``speedtronic.record.RenameReserved``, the stage's path before it moved to
        ``speedtronic.processors.reserved`` (a stage is not part of the floor: imported on first use)."""
        if name == "RenameReserved":
            return importlib.import_module("speedtronic.processors.reserved").RenameReserved
        raise AttributeError(f"module 'speedtronic.record' has no attribute {name!r}")
