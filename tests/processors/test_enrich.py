"""Reading a record's timestamp back: what the OpenTelemetry and MLflow hooks stamp their records with."""

from __future__ import annotations

import pytest

from speedtronic.processors.enrich import iso_timestamp, timestamp_ns


class TestTimestampNs:
    def test_it_reads_iso_timestamp_back_to_the_microsecond(self) -> None:
        """The JSONL record's own stamp comes back exactly, with no float rounding."""
        assert timestamp_ns(iso_timestamp(1_767_268_800.123456)) == 1_767_268_800_123_456_000
        assert timestamp_ns("2026-01-01T12:00:00.123456Z") == 1_767_268_800_123_456_000

    def test_offsets_count_and_a_stamp_without_one_is_utc(self) -> None:
        """RFC 3339 with an offset is that instant; structlog's naive ISO stamps are read as UTC."""
        assert timestamp_ns("2026-01-01T13:00:00+01:00") == 1_767_268_800_000_000_000
        assert timestamp_ns("2026-01-01T12:00:00") == 1_767_268_800_000_000_000

    def test_seconds_since_the_epoch_are_read_as_such(self) -> None:
        """structlog's TimeStamper(fmt=None) writes a float of seconds."""
        assert timestamp_ns(1_767_268_800) == 1_767_268_800_000_000_000
        assert timestamp_ns(1.5) == 1_500_000_000

    @pytest.mark.parametrize("stamp", [None, "yesterday", True, float("nan"), float("inf"), b"2026", [1]])
    def test_anything_else_is_none(self, stamp: object) -> None:
        """No stamp, or one that names no instant: None, so the caller uses the current time."""
        assert timestamp_ns(stamp) is None
