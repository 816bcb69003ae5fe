"""Log forging (CWE-117): no key, value or event name can add a line or fake a field in the text log."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

from speedtronic.profiling import MetricLogger
from tests.reliability.conftest import read_records

LINE_BREAKERS = [chr(c) for c in range(0x20)] + ["\x7f"] + [chr(c) for c in range(0x80, 0xA0)]
LINE_BREAKERS += ["\u2028", "\u2029", "\u0085"]
FIELD_FAKERS = ["=", "|", '"', "'", "\\", " ", " | ERROR | ", "a=b", '\\"']
OTHER_ODD = ["\u202e", "\u2066", "\u200b", "\ufeff", "\xa0", "\ud800", "\udfff", "é", "€", "\N{PILE OF POO}"]
DANGEROUS = LINE_BREAKERS + FIELD_FAKERS + OTHER_ODD

# The text line's grammar: "YYYY-mm-dd HH:MM:SS | LEVEL | event key=value key=value ..."; a token is
# bare (safe characters only) or double-quoted with backslash escapes.
TOKEN = r'(?:[A-Za-z0-9_.,:/@%+\-\[\]()<>]+|"(?:[^"\\]|\\.)*")'
LINE = re.compile(rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d \| (INFO) \| ({TOKEN})((?: {TOKEN}={TOKEN})*)")
PAIR = re.compile(rf" ({TOKEN})=({TOKEN})")
ESCAPE = re.compile(r'\\(["\\nrt]|x[0-9a-f]{2}|u[0-9a-f]{4})')
NAMED = {'"': '"', "\\": "\\", "n": "\n", "r": "\r", "t": "\t"}


def unquote(token: str) -> str:
    if not token.startswith('"'):
        return token
    return ESCAPE.sub(lambda m: NAMED.get(m[1]) or chr(int(m[1][1:], 16)), token[1:-1])


def parse(line: str) -> tuple[str, list[tuple[str, str]]]:
    """The event and the fields of one text line; fails unless the line is exactly one real line."""
    match = LINE.fullmatch(line)
    assert match is not None, repr(line)
    return unquote(match[2]), [(unquote(k), unquote(v)) for k, v in PAIR.findall(match[3])]


def log_events(tmp_path: Path, events: list[tuple[str, dict[str, str]]]) -> tuple[bytes, Path]:
    text, jsonl = tmp_path / "t.log", tmp_path / "m.jsonl"
    with MetricLogger(file=text, json_file=jsonl, redact=False) as logger:
        for event, payload in events:
            logger.emit(event, payload)
    return text.read_bytes(), jsonl


def assert_one_line_per_event(raw: bytes, events: list[tuple[str, dict[str, str]]], jsonl: Path) -> None:
    """The text read as bytes, in text mode and with str.splitlines() has one line per event, and each
    line parses back to exactly the event and fields that were logged."""
    count = len(events)
    assert raw.count(b"\n") == count
    assert not set(raw) & (set(range(0x20)) - {0x0A} | {0x7F})  # no raw control byte, ESC included
    text = raw.decode("utf-8")  # strict: lone surrogates were escaped
    assert len(text.splitlines()) == count
    with open(jsonl.with_name("t.log"), encoding="utf-8") as universal:  # text mode: \r, \r\n, \n
        assert len(universal.readlines()) == count
    for line, (event, payload) in zip(text.splitlines(), events, strict=True):
        parsed_event, fields = parse(line)
        assert parsed_event == event
        assert fields[:-1] == list(payload.items())
        assert fields[-1][0] == "elapsed_s"
    jsonl_text = jsonl.read_bytes().decode("utf-8")
    assert len(jsonl_text.splitlines()) == count
    records = read_records(jsonl)
    assert [r["event"] for r in records] == [_json_text(e) for e, _ in events]


def _json_text(text: str) -> str:
    return re.sub("[\ud800-\udfff]", lambda m: f"\\u{ord(m[0]):04x}", text)


class TestEveryDangerousCharacter:
    def test_in_event_key_and_value(self, tmp_path: Path) -> None:
        """Each C0/C1 control, DEL, U+2028/2029/0085, =, |, quotes, bidi and surrogates: in the event
        name, a key and a value, one event each: one line each, parsing back exactly."""
        events = [(f"ev{c}x", {f"k{c}y": f"v{c}z", "plain": "ok"}) for c in DANGEROUS]
        raw, jsonl = log_events(tmp_path, events)
        assert_one_line_per_event(raw, events, jsonl)

    def test_ansi_escapes_are_neutralised(self, tmp_path: Path) -> None:
        """CSI sequences (ESC [ and the C1 CSI U+009B) arrive as visible escapes, never as controls."""
        events = [("x", {"v": "\x1b[2J\x1b[31mred\x1b]0;title\x07\u009b31m"})]
        raw, jsonl = log_events(tmp_path, events)
        for control in (b"\x1b", b"\xc2\x9b", b"\x07"):
            assert control not in raw
        assert b'v="\\x1b[2J\\x1b[31mred\\x1b]0;title\\x07\\x9b31m"' in raw
        assert_one_line_per_event(raw, events, jsonl)

    def test_a_forged_line_stays_one_field(self, tmp_path: Path) -> None:
        """A value imitating a whole log line with its own level and fields is one field of a real one."""
        fake = "ok\r\n2026-01-01 00:00:00 | ERROR | admin_login user=root ok=1"
        events = [("train_step", {"note": fake, "user": "x | ERROR | y"})]
        raw, jsonl = log_events(tmp_path, events)
        assert_one_line_per_event(raw, events, jsonl)
        assert parse(raw.decode().splitlines()[0])[1][0] == ("note", fake)


class TestRandomStrings:
    def test_seeded_random_events(self, tmp_path: Path) -> None:
        """1,000 events of random strings over a hostile alphabet (seeded): one exact line each."""
        rng = random.Random(117)
        alphabet = DANGEROUS + list("abcXYZ019_-.:/@%+[]()<>")

        def text() -> str:
            return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 24)))

        events: list[tuple[str, dict[str, str]]] = []
        for _ in range(1_000):
            payload: dict[str, Any] = {}
            for _ in range(rng.randrange(1, 5)):
                key = text()
                if key not in ("event", "elapsed_s"):
                    payload[key] = text()
            events.append((text() or "e", payload))
        raw, jsonl = log_events(tmp_path, events)
        assert_one_line_per_event(raw, events, jsonl)
