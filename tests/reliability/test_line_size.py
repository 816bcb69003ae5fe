"""Every line below a log shipper's limit: long values truncated with a marker, the line still valid."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import pytest

from speedtronic.processors import DEFAULT_MAX_LINE_BYTES, CapLine, JSONLRenderer, TextRenderer
from speedtronic.profiling import MetricLogger
from speedtronic.runs import read_records as read_run
from tests.reliability.conftest import read_records, strict_loads

HOSTILE: dict[str, dict[Any, Any]] = {
    "huge_string": {"step": 5, "loss": 0.25, "blob": "x" * 3_000_000},
    "huge_list": {"step": 5, "ids": list(range(200_000))},
    "huge_dict": {"step": 5, "table": {f"k{i}": i for i in range(50_000)}},
    "many_medium_fields": {f"f{i}": "y" * 1_000 for i in range(100)},
    "thousands_of_fields": {f"f{i}": i for i in range(20_000)},
    "huge_key": {"k" * 100_000: 1, "step": 5},
    "emoji": {"step": 5, "text": "\N{GRINNING FACE}" * 200_000},
    "escapes_expand": {"step": 5, "nul": "\x00" * 100_000, "esc": "\x1b" * 50_000},
    "two_big_values": {"a": "a" * 40_000, "b": "b" * 40_000, "step": 5},
}


def emit_all(tmp_path: Path, payload: dict[Any, Any], **options: Any) -> tuple[bytes, bytes, list[Any]]:
    text, jsonl = tmp_path / "t.log", tmp_path / "m.jsonl"
    seen: list[Any] = []
    with MetricLogger(file=text, json_file=jsonl, hooks=[lambda e, p: seen.append(p)], **options) as log:
        log.emit("custom", payload)
        log.emit("after", {"ok": True})
    return text.read_bytes(), jsonl.read_bytes(), seen


WIDE_ONLY = {"many_medium_fields", "thousands_of_fields"}
"""Payloads wider than the cap whose every value fits in a line: nothing of them is cut."""


def jsonl_records(jsonl: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file as the reader joins them, with the event and the note."""
    return [
        {"event": r.event, **r.payload, "_speedtronic": r.notes}
        for r in read_run(jsonl)
        if r.notes is not None
    ]


class TestDefaultCap:
    @pytest.mark.parametrize("case", list(HOSTILE))
    def test_every_line_fits_and_stays_valid(self, case: str, tmp_path: Path) -> None:
        """Each hostile payload: every text line and JSONL line is <= 32,000 bytes and strict JSON; the
        reader reads two records back."""
        text, jsonl, _ = emit_all(tmp_path, HOSTILE[case])
        for data in (text, jsonl):
            lines = data.split(b"\n")
            assert lines.pop() == b""
            assert all(len(line) + 1 <= DEFAULT_MAX_LINE_BYTES for line in lines), [len(x) for x in lines]
            assert all(strict_loads(line) for line in lines) if data is jsonl else len(lines) == 2
        first, second = jsonl_records(tmp_path / "m.jsonl")
        assert first["event"] == "custom"
        assert second["event"] == "after"
        if case in WIDE_ONLY:  # split into parts, every value kept
            assert first["_speedtronic"]["truncated"] == []
            assert {key: first[key] for key in HOSTILE[case]} == HOSTILE[case]
            assert b"_dropped=" in text.split(b"\n")[0]
        else:
            assert first["_speedtronic"]["truncated"] or "_dropped" in first
            assert b"<truncated: " in text.split(b"\n")[0]

    def test_other_fields_are_kept(self, tmp_path: Path) -> None:
        """Only the long value is cut: step and loss keep their values, the marker says what was cut."""
        _, jsonl, hooked = emit_all(tmp_path, HOSTILE["huge_string"])
        assert len(jsonl.splitlines()) == 2  # what is left of the record fits in one line
        record = strict_loads(jsonl.splitlines()[0])
        assert (record["step"], record["loss"]) == (5, 0.25)
        assert record["blob"].startswith("<truncated: str of 3,000,000 chars; first ")
        assert record["blob"].endswith("xxx>")
        assert record["_speedtronic"]["truncated"] == ["blob"]
        # hooks get more than a line holds: the text as redaction leaves it (MAX_REDACTED_CHARS of it)
        assert hooked[0]["blob"].startswith("<truncated: str of 3,000,000 chars; first 1,000,000 chars: xxx")

    def test_a_value_wider_than_the_cap_is_cut_to_fill_the_line(self, tmp_path: Path) -> None:
        """A single value larger than the cap keeps as many characters as fit beside the other fields
        (about 31,000 of 3,000,000), and the record stays one line."""
        _, jsonl, _ = emit_all(tmp_path, HOSTILE["huge_string"])
        blob = strict_loads(jsonl.splitlines()[0])["blob"]
        kept = int(blob.split("; first ")[1].split(" chars")[0].replace(",", ""))
        assert 30_000 < kept < DEFAULT_MAX_LINE_BYTES

    def test_the_largest_value_goes_first(self, tmp_path: Path) -> None:
        """Of two long values, only the one wider than the cap is cut."""
        _, jsonl, _ = emit_all(tmp_path, {"small": "s" * 2_000, "big": "b" * 100_000, "step": 1})
        record = strict_loads(jsonl.splitlines()[0])
        assert record["small"] == "s" * 2_000
        assert record["_speedtronic"]["truncated"] == ["big"]

    def test_thousands_of_fields_are_all_kept(self, tmp_path: Path) -> None:
        """20,000 fields: the record comes in parts, and the reader gives every field back."""
        emit_all(tmp_path, HOSTILE["thousands_of_fields"])
        jsonl = tmp_path / "m.jsonl"
        lines = jsonl.read_bytes().splitlines()
        assert len(lines) > 3
        notes = [strict_loads(line)["_speedtronic"] for line in lines[:-1]]
        assert [(note["part"], note["parts"]) for note in notes] == [
            (i, len(notes)) for i in range(len(notes))
        ]
        first, _after = jsonl_records(jsonl)
        assert {key: first[key] for key in HOSTILE["thousands_of_fields"]} == HOSTILE["thousands_of_fields"]

    def test_the_text_line_keeps_the_first_fields_and_counts_the_rest(self, tmp_path: Path) -> None:
        """The text log line of 20,000 fields: its first fields in order, then ``_dropped`` saying how
        many did not fit (the JSONL record holds them)."""
        text, _, _ = emit_all(tmp_path, HOSTILE["thousands_of_fields"])
        line = text.split(b"\n")[0].decode()
        kept = line.count("=") - 1
        assert f" custom {' '.join(f'f{i}={i}' for i in range(kept))} _dropped=" in line
        # the 20,000 fields and the logger's elapsed_s
        assert line.endswith(f'_dropped="<truncated: {20_001 - kept:,} fields did not fit in 32,000 bytes>"')
        assert kept > 1_000


class TestConfiguration:
    def test_smaller_cap(self, tmp_path: Path) -> None:
        """max_line_bytes=4096: every line is at most 4,096 bytes."""
        text, jsonl, _ = emit_all(tmp_path, HOSTILE["two_big_values"], max_line_bytes=4096)
        assert max(len(line) + 1 for line in (text + jsonl).splitlines()) <= 4096

    @pytest.mark.parametrize("off", [None, 0])
    def test_cap_disabled(self, off: Any, tmp_path: Path) -> None:
        """max_line_bytes=None (or 0) writes the record whole."""
        text, jsonl, _ = emit_all(tmp_path, {"blob": "x" * 100_000}, max_line_bytes=off)
        assert strict_loads(jsonl.splitlines()[0])["blob"] == "x" * 100_000
        assert len(text.splitlines()[0]) > 100_000

    @pytest.mark.parametrize("bad", [100, -1, 2.5, True])
    def test_bad_cap_refused_at_construction(self, bad: Any, tmp_path: Path) -> None:
        """A cap below 1,024 bytes or not an int fails at construction, before any file is created."""
        with pytest.raises(ValueError, match="max_line_bytes"):
            MetricLogger(file=tmp_path / "t.log", json_file=tmp_path / "m.jsonl", max_line_bytes=bad)
        assert list(tmp_path.iterdir()) == []


class TestCapLineProcessor:
    def test_wraps_any_renderer(self) -> None:
        """CapLine works on str and bytes renderers in any structlog chain."""
        event = {"event": "x", "v": "é" * 5_000}
        line = CapLine(JSONLRenderer(), 2_000)(None, "info", dict(event))
        assert len(line.encode()) < 2_000
        assert strict_loads(line)["_speedtronic"]["truncated"] == ["v"]
        assert len(CapLine(JSONLRenderer(as_bytes=True), 2_000)(None, "info", dict(event))) < 2_000
        text = CapLine(TextRenderer(), 2_000)(None, "info", dict(event))
        assert len(text.encode()) < 2_000
        assert 'v="<truncated: str of 5,000 chars' in text

    def test_a_renderers_own_cap_cuts_as_capline_does(self) -> None:
        """``max_line_bytes=`` on the text renderer gives the line ``CapLine`` gives."""
        event = {"event": "x", "v": "é" * 5_000, "step": 1, "timestamp": "t"}
        own_renderer, plain = (
            TextRenderer(clock=lambda: 0.0, max_line_bytes=2_000),
            TextRenderer(clock=lambda: 0.0),
        )
        own = own_renderer(None, "info", dict(event))
        assert own == CapLine(plain, 2_000)(None, "info", dict(event))
        assert len(own.encode()) < 2_000

    @pytest.mark.parametrize("as_bytes", [False, True])
    def test_the_jsonl_renderers_own_cap_keeps_more_of_a_huge_value(self, as_bytes: bool) -> None:
        """``JSONLRenderer(max_line_bytes=...)``: a value wider than the cap keeps as much as fits beside
        the others (``CapLine`` alone cuts it to its marker), in one strict-JSON line."""
        event = {"event": "x", "v": "é" * 5_000, "step": 1, "timestamp": "t"}
        own = JSONLRenderer(as_bytes=as_bytes, max_line_bytes=2_000)(None, "info", dict(event))
        data = own if isinstance(own, bytes) else own.encode()
        assert len(data) < 2_000
        assert b"\n" not in data
        record = strict_loads(data)
        assert record["v"].startswith("<truncated: str of 5,000 chars; first ")
        assert record["step"] == 1
        assert record["_speedtronic"]["truncated"] == ["v"]
        assert len(record["v"]) > 500

    def test_a_renderers_own_cap_refuses_a_bad_size(self) -> None:
        """The same check as ``CapLine``'s, at construction."""
        with pytest.raises(ValueError, match="max_line_bytes"):
            JSONLRenderer(max_line_bytes=10)
        with pytest.raises(ValueError, match="max_line_bytes"):
            TextRenderer(max_line_bytes=10)

    def test_fitting_line_is_unchanged(self) -> None:
        """A line within the cap is the renderer's own output."""
        renderer = JSONLRenderer()
        event = {"event": "x", "step": 1, "timestamp": "t"}
        assert CapLine(renderer)(None, "info", dict(event)) == renderer(None, "info", dict(event))


def test_jsonl_file_has_no_line_over_the_cap_after_many_events(tmp_path: Path) -> None:
    """Mixed sizes over many events: no line over the cap, every record readable."""
    jsonl = tmp_path / "m.jsonl"
    with MetricLogger(stream=io.StringIO(), json_file=jsonl) as logger:
        for i in range(200):
            logger.emit("train_step", {"step": i, "blob": "z" * (i * 397)})
    assert [r["step"] for r in read_records(jsonl)] == list(range(200))
    assert max(len(line) for line in jsonl.read_bytes().split(b"\n")) < DEFAULT_MAX_LINE_BYTES


RSYSLOG_CAP = 8192
"""rsyslog's default maxMessageSize (8 KiB): what docs/shipping.md tells its users to set."""

NON_FINITE: dict[str, dict[Any, Any]] = {
    "many_nan_fields": {f"m{i}": math.nan for i in range(5_000)},
    "nan_list": {"step": 5, "losses": [math.nan] * 1_000},
    "nested_nan": {"step": 5, "layers": {f"l{i}": {"g": math.nan, "w": -math.inf} for i in range(400)}},
    "long_keys_nan": {"k" * 200 + str(i): math.inf for i in range(30)},
}


class TestRsyslogCap:
    @pytest.mark.parametrize("case", [*HOSTILE, *NON_FINITE])
    def test_every_line_fits_in_8_kib_and_stays_strict_json(self, case: str, tmp_path: Path) -> None:
        """max_line_bytes=8192: every text line and JSONL record, newline included, fits in 8 KiB."""
        payload = HOSTILE.get(case) or NON_FINITE[case]
        text, jsonl, _ = emit_all(tmp_path, payload, max_line_bytes=RSYSLOG_CAP)
        for data in (text, jsonl):
            assert data.endswith(b"\n")
            lines = data.split(b"\n")[:-1]
            assert max(len(line) + 1 for line in lines) <= RSYSLOG_CAP
            assert all(line.decode("utf-8") for line in lines)
            assert all(strict_loads(line) for line in lines) if data is jsonl else len(lines) == 2
        first, second = jsonl_records(tmp_path / "m.jsonl")
        assert (first["event"], second["event"]) == ("custom", "after")

    def test_non_finite_values_that_fit_are_restored(self, tmp_path: Path) -> None:
        """A capped record keeps the non-finite notes of the values it kept: the reader restores them."""
        payload = {"step": 5, "loss": math.nan, "grad_norm": math.inf, "blob": "x" * 50_000}
        emit_all(tmp_path, payload, max_line_bytes=RSYSLOG_CAP)
        (record, _after) = read_run(tmp_path / "m.jsonl")
        assert math.isnan(record.payload["loss"])
        assert record.payload["grad_norm"] == math.inf
        assert record.notes is not None
        assert record.notes["truncated"] == ["blob"]
        assert record.notes["non_finite"] == {"nan": ["/loss"], "inf": ["/grad_norm"], "neg_inf": []}

    def test_a_run_whose_loss_went_nan_fits_line_by_line(self, tmp_path: Path) -> None:
        """A training-shaped run under the 8 KiB cap: nothing cut, every line strict JSON, NaN restored."""
        jsonl = tmp_path / "m.jsonl"
        with MetricLogger(stream=io.StringIO(), json_file=jsonl, max_line_bytes=RSYSLOG_CAP) as logger:
            for step in range(1, 101):
                loss = math.nan if step > 50 else 1 / step
                logger.emit("train_step", {"step": step, "loss": loss, "per_layer": [loss] * 64})
        assert max(map(len, jsonl.read_bytes().split(b"\n"))) + 1 <= RSYSLOG_CAP
        records = list(read_run(jsonl))
        assert [r.payload["step"] for r in records] == list(range(1, 101))
        assert all(r.notes is not None and r.notes["truncated"] == [] for r in records)
        assert math.isnan(records[-1].payload["per_layer"][63])

    def test_only_the_large_value_is_cut_when_its_nans_fill_the_note(self, tmp_path: Path) -> None:
        """A list of 1,000 NaNs is cut; step, a short int, is kept."""
        _, jsonl, _ = emit_all(tmp_path, NON_FINITE["nan_list"], max_line_bytes=RSYSLOG_CAP)
        record = strict_loads(jsonl.splitlines()[0])
        assert record["step"] == 5
        assert record["_speedtronic"]["truncated"] == ["losses"]
