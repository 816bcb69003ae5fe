"""JSONLRenderer's line of an event dict in any key order, and a capped text line's first fields: the
same bytes whichever way the renderer takes to them (an event dict written as it is, or a copy)."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

import orjson
import pytest
import structlog

from speedtronic.processors import JSONLRenderer
from speedtronic.processors.text import ValueFormat
from speedtronic.record import NOTE_KEY, empty_note

STAMP = "2026-01-01T00:00:00.000000Z"


class Fields(MutableMapping[str, Any]):
    """An event dict that is no ``dict`` (a stock chain's ``context_class`` may be any mapping)."""

    def __init__(self, fields: dict[str, Any]) -> None:
        self._fields = dict(fields)

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._fields[key] = value

    def __delitem__(self, key: str) -> None:
        del self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


def expected(fields: dict[str, Any], event: Any = None) -> bytes:
    """The record's line: ``event`` first, the fields in order, the empty note, the timestamp."""
    return orjson.dumps({"event": event, **fields, NOTE_KEY: empty_note(), "timestamp": STAMP})


PAD = {f"pad{k}": k for k in range(40)}
"""Fields that make an event dict wide enough to be written as it is (small ones are copied)."""


def orders(event: Any, fields: dict[str, Any]) -> list[dict[str, Any]]:
    """The same event dict with its ``event`` first, between two fields, last before the timestamp,
    and with the timestamp first (so the renderer copies it into the record's order)."""
    items = list(fields.items())
    middle = len(items) // 2
    return [
        {"event": event, **fields, "timestamp": STAMP},
        {**dict(items[:middle]), "event": event, **dict(items[middle:]), "timestamp": STAMP},
        {**fields, "event": event, "timestamp": STAMP},
        {"timestamp": STAMP, **fields, "event": event},
    ]


class TestJSONLineInAnyKeyOrder:
    @pytest.mark.parametrize(
        "fields",
        [
            {"step": 1, "loss": 0.5},
            {"step": 1},
            {},
            {"note": ',"event":"train_step","x":1', "ok": True, "none": None},  # the event's field as text
            {"layer": "caf\u00e9 \u2028", "step": 2},  # a line break U+2028 escaped, UTF-8 kept
            {f"layers.{k}.grad_norm": k / 7 for k in range(300)},
        ],
    )
    @pytest.mark.parametrize("pad", [{}, PAD])
    def test_the_record_order_whatever_the_event_dicts(self, fields: dict[str, Any], pad: Any) -> None:
        """Every key order gives the record's line: ``event`` first, the note before the timestamp,
        every other field in its order; a string holding ``,"event":...`` stays a value. Small event
        dicts and wide ones (written as they are, not copied) alike."""
        fields = {**fields, **pad}
        line = expected(fields, "train_step").replace(b"\xe2\x80\xa8", b"\\u2028")
        for event_dict in orders("train_step", fields):
            assert JSONLRenderer(as_bytes=True)(None, "info", event_dict) == line
            assert orjson.loads(line)["event"] == "train_step"

    @pytest.mark.parametrize("pad", [{}, PAD])
    def test_an_event_of_any_plain_type(self, pad: Any) -> None:
        """A number, ``None`` or ``True`` as the event is written first as it is."""
        fields = {"step": 3, **pad}
        for event in (7, 2.5, None, True, ""):
            for event_dict in orders(event, fields):
                assert JSONLRenderer(as_bytes=True)(None, "info", event_dict) == expected(fields, event)

    @pytest.mark.parametrize("pad", [{}, PAD])
    def test_no_event(self, pad: Any) -> None:
        """An event dict without ``event`` gets ``"event": null`` first; a timestamp alone too."""
        renderer = JSONLRenderer(as_bytes=True)
        for fields in ({"step": 1, **pad}, {**pad, "step": 1}):
            assert renderer(None, "info", {**fields, "timestamp": STAMP}) == expected(fields)
        assert renderer(None, "info", {"timestamp": STAMP}) == expected({})

    @pytest.mark.parametrize("pad", [{}, PAD])
    def test_an_event_dict_that_is_no_dict(self, pad: Any) -> None:
        """A mapping of another class gives the same line as a dict of the same fields."""
        fields = {"step": 1, "loss": 0.25, **pad}
        for event_dict in orders("e", fields):
            assert JSONLRenderer()(None, "info", Fields(event_dict)) == expected(fields, "e").decode()

    def test_the_event_dict_is_left_as_it_was(self) -> None:
        """Rendering changes neither the event dict's keys nor their order (the hooks get it next)."""
        event_dict = {"step": 1, "event": "e", "loss": 0.5, "timestamp": STAMP}
        JSONLRenderer(max_line_bytes=1024)(None, "info", event_dict)
        assert list(event_dict) == ["step", "event", "loss", "timestamp"]

    @pytest.mark.parametrize("keys", [200, 1_000])
    def test_a_wide_event_in_any_key_order_gives_the_same_parts(self, keys: int) -> None:
        """Written in parts: the same lines for each key order, each within the cap, the ``step``
        repeated in each part and every field in exactly one."""
        fields = {"step": 5, **{f"layers.{k}.attn.q_proj.grad_norm": k / 7 for k in range(keys)}}
        renderer = JSONLRenderer(as_bytes=True, max_line_bytes=4096)
        written = [renderer(None, "info", event_dict) for event_dict in orders("train_step", fields)]
        assert all(lines == written[0] for lines in written)
        parts = [orjson.loads(line) for line in written[0].split(b"\n")]
        assert len(parts) > 1
        assert all(len(line) < 4096 for line in written[0].split(b"\n"))
        assert [part[NOTE_KEY]["part"] for part in parts] == list(range(len(parts)))
        assert all(part["event"] == "train_step" and part["step"] == 5 for part in parts)
        joined: dict[str, Any] = {"step": 5}
        for part in parts:
            joined.update((key, value) for key, value in part.items() if key.startswith("layers."))
        assert list(joined) == list(fields)
        assert joined == fields

    def test_in_a_stock_chain_with_the_event_last(self) -> None:
        """structlog puts ``event`` last in the event dict; the line still begins with it."""
        log = structlog.wrap_logger(
            structlog.ReturnLogger(),
            processors=[structlog.processors.TimeStamper(fmt="iso", utc=True), JSONLRenderer()],
        )
        line = log.info("train_step", step=1, loss=0.5)
        record = orjson.loads(line)
        assert list(record) == ["event", "step", "loss", NOTE_KEY, "timestamp"]
        assert record["event"] == "train_step"


class TestFirstFieldsOfACappedLine:
    @pytest.mark.parametrize("value", [0.0, -0.0, float("nan"), float("inf"), True, None, 1e-05])
    def test_every_field_that_begins_within_the_room_is_written(self, value: Any) -> None:
        """With every value as short as its type's text can be (``0.0``, ``nan``, ``True``...), the
        first fields still hold every field that begins within ``room``, and none left out does."""
        values = ValueFormat()
        event = {f"layers.{k}.grad_norm": value for k in range(2_000)}
        whole = values.fields(event, ())
        first, left = values.fields_within(event, (), 10_000, 20_000, 4_000)
        assert left > 0
        assert whole.startswith(first + " ")
        starts = [at for at, char in enumerate(whole) if char == " "]
        assert first.count(" ") >= sum(at <= 10_000 for at in starts)
        assert all(at > 10_000 for at in starts[first.count(" ") :])
        assert left == 2_000 - first.count(" ")
