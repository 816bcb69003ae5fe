"""The record's timestamp: ``AddTimestamp`` writes it, ``timestamp_ns`` reads it back (the OpenTelemetry
and MLflow hooks stamp their records with it)."""

from __future__ import annotations

import orjson
import pytest
import structlog

from speedtronic.processors import AddTimestamp, JSONLRenderer
from speedtronic.record import iso_timestamp, timestamp_ns


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


class TestAddTimestamp:
    def test_it_stamps_the_clocks_instant_in_utc(self) -> None:
        """Called directly, it adds the record's one timestamp: the clock's instant, RFC 3339 UTC."""
        stamp = AddTimestamp(clock=lambda: 1_767_268_800.25)
        assert stamp(None, "info", {"event": "x"}) == {
            "event": "x",
            "timestamp": "2026-01-01T12:00:00.250000Z",
        }

    def test_a_second_reading_in_the_same_second_gets_its_own_microseconds(self) -> None:
        """The date is formatted once per second; each event keeps its own microseconds."""
        times = iter([1_767_268_800.000001, 1_767_268_800.999999, 1_767_268_801.5])
        stamp = AddTimestamp(clock=lambda: next(times))
        assert [stamp(None, "info", {})["timestamp"] for _ in range(3)] == [
            "2026-01-01T12:00:00.000001Z",
            "2026-01-01T12:00:00.999999Z",
            "2026-01-01T12:00:01.500000Z",
        ]

    def test_an_event_with_a_timestamp_keeps_it(self) -> None:
        """A timestamp set earlier (structlog's TimeStamper in your chain) is the record's."""
        stamp = AddTimestamp(clock=lambda: 0.0)
        assert stamp(None, "info", {"timestamp": "mine"}) == {"timestamp": "mine"}

    def test_in_a_stock_structlog_chain(self) -> None:
        """In a stock chain it stamps every event for the renderers after it."""
        log = structlog.wrap_logger(
            structlog.ReturnLogger(),
            processors=[AddTimestamp(clock=lambda: 1_767_268_800.0), JSONLRenderer()],
        )
        assert orjson.loads(log.info("x"))["timestamp"] == "2026-01-01T12:00:00.000000Z"
