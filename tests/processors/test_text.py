"""ValueFormat.fields: a wide event of plain numbers is written in bulk, byte for byte as each value alone."""

from __future__ import annotations

import math
import random
import struct
from typing import Any

import pytest

from speedtronic.processors import TextRenderer
from speedtronic.processors.text import ValueFormat, format_fields, format_key, format_value
from tests.processors.keys import LookalikeKey


def one_by_one(event: dict[Any, Any], digits: int | None) -> str:
    return "".join(f" {format_key(k)}={format_value(v, digits)}" for k, v in event.items() if k != "event")


def random_float(rng: random.Random) -> float:
    if rng.random() < 0.4:
        return float(struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0])
    specials = [0.0, -0.0, 9999.5, 9999.4999, 1e-7, 10556.0, float("nan"), float("inf"), -float("inf")]
    if rng.random() < 0.2:
        return rng.choice(specials)
    return rng.uniform(-1, 1) * 10 ** rng.uniform(-12, 12)


def rule(value: float, digits: int) -> str:
    """The float rule as docs/output.md states it: rounded to ``digits`` significant digits (whole
    digits never cut), then written as ``repr`` writes a float."""
    if not math.isfinite(value):
        return repr(value)
    if abs(value) < 10.0**digits:
        return repr(float(f"%.{digits}g" % value))
    return repr(float(round(value)))


@pytest.mark.parametrize("digits", [1, 2, 4, 7, 12, 15])
def test_each_float_reads_as_the_rule_writes_it(digits: int) -> None:
    """Whole numbers (``2.0``, ``1234.0`` from 1234.5, ``-0.0``), negative exponents (``3e-05``, down to
    subnormal numbers), positive ones (``10000.0`` from 9999.7) and 64-bit patterns: each value alone
    reads as the rule writes it, at every digit setting up to 15 (beyond, `%g` shows a double's last
    binary digits, `9999.7000000000007`, as it always has)."""
    rng = random.Random(digits)
    edges = [2.0, -0.0, 1234.5, 9999.7, 3e-05, 1.5e-07, 5e-324, 2.2250738585072014e-308, 1e-307, 1e15]
    whole = [float(rng.randint(-(10**17), 10**17)) for _ in range(2_000)]
    small = [rng.uniform(-1, 1) * 10 ** rng.randint(-320, -5) for _ in range(2_000)]
    for value in edges + whole + small + [random_float(rng) for _ in range(4_000)]:
        assert format_value(value, digits) == rule(value, digits), value


class TestWideEvents:
    @pytest.mark.parametrize("digits", [1, 2, 4, 6, 10, 17, None])
    def test_bulk_line_equals_each_value_alone(self, digits: int | None) -> None:
        """Wide events of floats, ints, bools and ``None`` read exactly as the float rule writes each
        value alone (exponents, ``-0.0``, ``9999.5``, NaN, 64-bit patterns)."""
        rng = random.Random(digits)
        values = ValueFormat(digits)
        extras = [7, -(2**70), True, False, None]
        for _ in range(200):
            event = {"event": "train_step", **{f"layer_{i}": random_float(rng) for i in range(30)}}
            event["step"] = rng.choice(extras)
            assert values.fields(event) == one_by_one(event, digits)

    @pytest.mark.parametrize("odd", ["{}", "{0}", "}", "{{x}}", "e"])
    def test_keys_with_braces_and_exponents_step_to_step(self, odd: str) -> None:
        """A key holding braces or ``e`` is written as itself, and a key set whose values gain and lose
        an exponent from step to step reads as each value alone."""
        values = ValueFormat()
        keys = [odd, *(f"m{i}" for i in range(20))]
        steps = [0.5, 1.5e-07, 0.25, 12345.678, 3.0, True, None, 7]
        for step, value in enumerate(steps * 3):
            event = {key: value if n % 3 == step % 3 else 0.125 * n for n, key in enumerate(keys)}
            assert values.fields(event) == one_by_one(event, 4)

    @pytest.mark.parametrize("digits", [1, 4, 15, None])
    def test_a_key_set_through_every_kind_of_value_for_many_steps(self, digits: int | None) -> None:
        """A key set (keys holding ``%``, ``.`` and ``e``) whose values move between plain fractions,
        whole floats (``1.0``), exponents, NaN, bools and ``None`` over hundreds of steps reads, at
        every step, as each value written alone."""
        values = ValueFormat(digits)
        keys = ["acc%", "layer.0.weight", "e", "%s", "%%d", *(f"m{i}" for i in range(20))]
        odd: list[Any] = [1.0, 12345.678, 1.5e-07, float("nan"), True, None, 3, 0.0, -2.5]
        rng = random.Random(digits)
        for step in range(400):
            event: dict[str, Any] = {key: rng.uniform(0.001, 0.9) for key in keys}
            if step % 100 > 60:  # long runs of plain fractions between the odd steps
                event[rng.choice(keys)] = rng.choice(odd)
            assert values.fields(event) == one_by_one(event, digits)

    def test_more_value_type_patterns_than_a_key_set_keeps(self) -> None:
        """A key set met with a dozen patterns of value types (an int, a bool or ``None`` moving from
        key to key), twice over, reads each time as each value alone."""
        values = ValueFormat()
        keys = [f"m{i}" for i in range(20)]
        for _ in range(2):
            for moved, odd in enumerate([3, True, None] * 4):
                event = {key: odd if n == moved else n / 8 for n, key in enumerate(keys)}
                assert values.fields(event) == one_by_one(event, 4)

    @pytest.mark.parametrize("digits", [1, 4, 15, 16, 17, None])
    def test_small_and_subnormal_floats_in_a_wide_event(self, digits: int | None) -> None:
        """Wide events of small floats (``1.5e-07``, ``e-3x``, subnormal numbers such as ``5e-324``),
        keys holding ``e-``, ``e-3`` and ``e+``, read as each value alone at every digit setting."""
        rng = random.Random(digits)
        values = ValueFormat(digits)
        keys = ["line-e-3", "scale+e+1", *(f"w{i}" for i in range(20))]
        for _ in range(300):
            low = rng.choice([-5, -12, -40, -300, -310, -323])
            event = {key: rng.uniform(-1, 1) * 10 ** rng.uniform(low, -4) for key in keys}
            if rng.random() < 0.3:
                event[rng.choice(keys)] = rng.choice([5e-324, 2.2250738585072014e-308, 0.5, True])
            assert values.fields(event) == one_by_one(event, digits)

    def test_a_word_before_a_negative_exponent_and_a_positive_one(self) -> None:
        """``True``, ``False`` or ``None`` just before a negative number, in a wide event that also
        holds a float with a positive exponent (``12345.0``), reads as each value alone, step after step."""
        values = ValueFormat()
        for word in (True, None, False):
            event = {f"m{i}": 0.5 for i in range(20)}
            event.update(a=word, b=-0.25, c=12345.0, d=-2.5e-07)
            for _ in range(3):
                assert values.fields(event) == one_by_one(event, 4)

    def test_keys_built_afresh_read_the_same(self) -> None:
        """Keys built with an f-string each step write the same line as the same key objects."""
        values = ValueFormat()
        same = {f"metric_{i}": i / 7 for i in range(20)}
        first = values.fields(same)
        fresh = {"".join(["metric_", str(i)]): i / 7 for i in range(20)}
        assert values.fields(fresh) == first == one_by_one(same, 4)

    def test_a_lookalike_key_gets_its_own_text(self) -> None:
        """A key that equals ``"loss"`` but prints otherwise is written by its own text, even after
        the same key set of plain strings was written."""
        values = ValueFormat()
        others = {f"m{i}": 0.5 for i in range(20)}
        assert " loss=0.5" in values.fields({"loss": 0.5, **others})
        assert values.fields({LookalikeKey("look alike"): 0.5, **others}).startswith(' "look alike"=0.5')

    def test_keys_one_true_and_one_point_zero_are_told_apart(self) -> None:
        """``1``, ``True`` and ``1.0`` (equal, same hash) each read as themselves in a wide event."""
        values = ValueFormat()
        others = {f"m{i}": 0.25 for i in range(20)}
        lines = [values.fields({key: 0.5, **others}) for key in (1, True, 1.0)]
        assert [line.split("=")[0] for line in lines] == [" 1", " True", " 1.0"]

    def test_strings_and_objects_take_the_plain_loop(self) -> None:
        """A wide event holding text or another object still quotes and escapes it."""
        values = ValueFormat()
        event = {**{f"m{i}": 0.5 for i in range(20)}, "note": 'a "b"\n', "obj": [1, 2]}
        assert values.fields(event).endswith(' note="a \\"b\\"\\n" obj="[1, 2]"')

    def test_a_skip_set_holding_nearly_every_key(self) -> None:
        """A wide event whose ``skip`` leaves one key or none writes that key, or nothing."""
        event = {f"m{i}": 0.5 for i in range(20)}
        assert format_fields(event, skip=frozenset(event) - {"m3"}) == " m3=0.5"
        assert format_fields(event, skip=frozenset(event)) == ""


class TestCappedWideLines:
    @pytest.mark.parametrize("cap", [1_024, 4_096, 32_000])
    def test_the_first_fields_then_a_count_of_every_other(self, cap: int) -> None:
        """A capped text line of hundreds to thousands of numbers (per-layer names; whole floats, NaN,
        exponents, bools, ``None``; a long key or an int among the fields cut off; the same key set
        step after step) is the uncapped line's first fields, then ``_dropped`` counting every field
        after them, within the cap (a field of an eighth of the cap or more: ``CapLine``'s cut)."""
        rng = random.Random(cap)
        capped = TextRenderer(clock=lambda: 0.0, max_line_bytes=cap)
        whole = TextRenderer(clock=lambda: 0.0)
        odd: list[Any] = [1.0, 523.97, 12345.678, 1.5e-07, float("nan"), True, None, -0.0]
        for keys in (100, 900, 1_000, 5_000):
            names = [f"layers.{k}.attn.q_proj.grad_norm" for k in range(keys)]
            if keys == 900:
                names[-3] = "x" * 600  # wider than an eighth of the smaller caps
            for step in range(12):
                event: dict[str, Any] = {"event": "train_step", "step": step}
                event.update((name, rng.uniform(0.001, 9.0)) for name in names)
                if step % 3 == 1:
                    event[rng.choice(names)] = rng.choice(odd)
                if step % 4 == 3:
                    event[rng.choice(names[-keys // 4 :])] = 10**40
                line = capped(None, "info", dict(event))
                full = whole(None, "info", dict(event))
                assert len(line) < cap
                if len(full) < cap:
                    assert line == full
                    continue
                if keys == 900 and cap < 32_000:  # a field of an eighth of the cap: CapLine's own cut
                    assert "_dropped=" in line
                    continue
                kept, marker = line.rsplit(" _dropped=", 1)
                assert full.startswith(kept + " ")
                dropped = full[len(kept) :].count(" ")
                assert marker == f'"<truncated: {dropped:,} fields did not fit in {cap:,} bytes>"'


class TestFieldsWithin:
    def test_a_wide_event_gives_its_first_fields_and_counts_the_rest(self) -> None:
        """``fields_within``: the fields of ``fields`` that can begin within ``room`` (each value one
        character at least), and how many follow; whole, with 0, when they may all fit in ``width``."""
        values = ValueFormat()
        event = {f"layers.{k}.grad_norm": k / 7 for k in range(1_000)}
        whole = values.fields(event, ())
        assert values.fields_within(event, (), 50_000, 60_000, 4_000) == (whole, 0)
        first, left = values.fields_within(event, (), 10_000, 20_000, 4_000)
        assert whole.startswith(first + " ")
        assert left == 1_000 - first.count(" ")
        starts = [at for at, char in enumerate(whole) if char == " "]
        assert all(at > 10_000 for at in starts[first.count(" ") :])  # none left out begins within room

    def test_an_int_or_a_long_key_among_the_rest_gives_the_whole_line(self) -> None:
        """A field left out that could be wide (an int of any length, a key near ``widest``) gives
        the whole line, so the caller cuts it as before."""
        values = ValueFormat()
        floats = {f"m{k}": k / 7 for k in range(1_000)}
        for odd in ({"late": 10**50}, {"k" * 3_990: 0.5}):
            event = {**floats, **odd}
            assert values.fields_within(event, (), 2_000, 4_000, 4_000) == (values.fields(event, ()), 0)


@pytest.mark.parametrize("digits", [17, 18, 19])
def test_a_wide_event_at_every_digit_setting_reads_as_each_value_alone(digits: int) -> None:
    """With ``float_digits`` beyond a double's 17 digits a wide event's 1e16 is still written as the
    rule writes it alone (``1e+16``), not as ``format(x, ".18")`` does (``10000000000000000.0``)."""
    values = ValueFormat(digits)
    floats = [1e16, 1.5e16, 12345678901234567.0, 0.1, 1 / 3, 2.5e-7] * 4
    event = {f"k{i}": value for i, value in enumerate(floats)}
    alone = "".join(values.fields({f"k{i}": value}) for i, value in enumerate(floats))
    assert values.fields(event) == alone


class TestFloatsInsideContainers:
    def test_a_list_of_floats_is_rounded_as_a_float_alone(self) -> None:
        """[0.5, 0.6000000238418579] reads [0.5, 0.6]: each item by the float rule, as a scalar."""
        assert format_value([0.5, 0.6000000238418579]) == '"[0.5, 0.6]"'
        assert format_value([0.5, 0.6000000238418579], None) == '"[0.5, 0.6000000238418579]"'

    def test_nested_tuples_and_dicts_keep_their_shape(self) -> None:
        """Tuples, dicts and lists inside each other read as str() writes them, floats rounded."""
        value = {"k": (1.23456789, "x y", [2.0000001, True, None]), 2: float("nan")}
        assert format_value(value) == "\"{'k': (1.235, 'x y', [2.0, True, None]), 2: nan}\""
        assert format_value((0.1234567,)) == "(0.1235,)"
        assert format_value([]) == "[]"

    def test_a_list_holding_itself_is_written_as_str_writes_it(self) -> None:
        """A list that holds itself ends: [1.0, [...]]."""
        looped: list[Any] = [1.0]
        looped.append(looped)
        assert format_value(looped) == '"[1.0, [...]]"'

    def test_the_text_line_rounds_and_the_jsonl_keeps_every_digit(self, tmp_path: Any) -> None:
        """Through the logger: the text line rounds a float32 tensor's list; the JSONL keeps it exact."""
        import io
        import json

        torch = pytest.importorskip("torch")
        from speedtronic.profiling import MetricLogger

        stream, jsonl = io.StringIO(), tmp_path / "m.jsonl"
        with MetricLogger(stream=stream, json_file=jsonl) as logger:
            logger.emit("probe", {"step": 1, "x": torch.tensor([0.5, 0.6]), "y": [0.5, 0.6000000238418579]})
        assert ' x="[0.5, 0.6]" y="[0.5, 0.6]" ' in stream.getvalue()
        record = json.loads(jsonl.read_text())
        assert record["x"] == record["y"] == [0.5, 0.6000000238418579]
