"""Each processor called directly, as structlog calls it: ``(logger, method_name, event_dict)``."""

from __future__ import annotations

import json
import logging
import math
import re
from typing import Any

import pytest
import structlog

from speedtronic.processors import (
    AddElapsed,
    AddMemory,
    CadenceFilter,
    ConvertValues,
    CopyPayload,
    DispatchHooks,
    JSONLRenderer,
    TextRenderer,
    WriteLines,
    WriteText,
    bound_call,
    level_for,
)

LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| (?P<level>[A-Z]+) \| (?P<rest>.*)")


class TestCopyPayload:
    def test_builds_event_dict_from_payload_keyword(self) -> None:
        """The event comes first, then the payload keys in order."""
        payload = {"step": 1, "loss": 1.2}
        ed = CopyPayload()(None, "info", {"payload": payload, "event": "train_step"})
        assert list(ed) == ["event", "step", "loss"]
        assert ed["event"] == "train_step"

    def test_never_mutates_the_payload(self) -> None:
        """The caller's dict is copied."""
        payload = {"step": 1}
        ed = CopyPayload()(None, "info", {"payload": payload, "event": "x"})
        ed["step"] = 99
        assert payload == {"step": 1}

    def test_payload_event_key_is_kept_apart(self) -> None:
        """A payload key "event" cannot overwrite the event name."""
        ed = CopyPayload()(None, "info", {"payload": {"event": "forged"}, "event": "real"})
        assert ed == {"event": "real", "payload_event": "forged"}

    def test_non_string_keys_survive(self) -> None:
        """Keys of any type are kept (``**kwargs`` would refuse them)."""
        ed = CopyPayload()(None, "info", {"payload": {1: "a", None: "b"}, "event": "x"})
        assert ed[1] == "a"
        assert ed[None] == "b"


class TestCadenceFilter:
    @pytest.mark.parametrize("every", [0, -1, 1.5, True, "2"])
    def test_rejects_bad_cadence(self, every: object) -> None:
        """A cadence that isn't an integer >= 1 is refused, naming the argument."""
        with pytest.raises(ValueError, match="every_steps"):
            CadenceFilter(every)  # type: ignore[arg-type]

    def test_drops_off_cadence_steps(self) -> None:
        """Only multiples of every_steps pass."""
        cadence = CadenceFilter(5)
        with pytest.raises(structlog.DropEvent):
            cadence(None, "info", {"event": "train_step", "step": 3})
        assert cadence(None, "info", {"event": "train_step", "step": 10})["step"] == 10

    def test_other_events_and_stepless_steps_pass(self) -> None:
        """Checkpoints, train_start and a train_step without step are never filtered."""
        cadence = CadenceFilter(5)
        assert cadence.admits("checkpoint", {"step": 3})
        assert cadence.admits("train_step", {"loss": 1.0})
        assert cadence.admits("train_step", {"step": None})

    def test_admits_is_the_same_rule(self) -> None:
        """admits() and __call__ agree for every step."""
        cadence = CadenceFilter(3)
        for step in range(12):
            ed = {"event": "train_step", "step": step}
            try:
                cadence(None, "info", dict(ed))
                passed = True
            except structlog.DropEvent:
                passed = False
            assert passed == cadence.admits("train_step", ed) == (step % 3 == 0)


class TestAddElapsed:
    def test_adds_monotonic_seconds(self) -> None:
        """elapsed_s is measured from construction with the given clock."""
        ticks = iter([10.0, 12.5])
        stage = AddElapsed(clock=lambda: next(ticks))
        assert stage(None, "info", {"event": "x"})["elapsed_s"] == 2.5

    def test_keeps_existing_value(self) -> None:
        """A payload's own elapsed_s wins."""
        assert AddElapsed()(None, "info", {"elapsed_s": 7})["elapsed_s"] == 7


class TestAddMemory:
    def test_no_key_on_cpu(self) -> None:
        """A CPU-only process gets no memory_bytes (a CPU build's 0 is not a reading)."""
        import torch  # noqa: F401  # the stage must cope with torch imported and no accelerator

        assert "memory_bytes" not in AddMemory()(None, "info", {"event": "x"})

    def test_keeps_existing_value(self) -> None:
        """A payload's own memory_bytes wins."""
        assert AddMemory()(None, "info", {"memory_bytes": 5})["memory_bytes"] == 5


class TestConvertValues:
    def test_zero_d_tensors_and_numpy_scalars_become_numbers(self) -> None:
        """0-d tensors (also requiring grad) and numpy scalars become Python numbers."""
        import numpy as np
        import torch

        ed = ConvertValues()(
            None,
            "info",
            {
                "loss": torch.tensor(1.5, requires_grad=True) * 1,
                "n": np.int64(3),
                "f": np.float32(0.25),
                "bf": torch.tensor(2.0, dtype=torch.bfloat16),
            },
        )
        assert ed == {"loss": 1.5, "n": 3, "f": 0.25, "bf": 2.0}
        assert [type(v) for v in ed.values()] == [float, int, float, float]

    def test_nd_values_become_lists_or_summaries(self) -> None:
        """Small arrays become lists; large ones a summary naming shape and dtype."""
        import numpy as np
        import torch

        ed = ConvertValues()(
            None, "info", {"t": torch.ones(2, 2), "a": np.arange(4)[::2], "big": torch.zeros(100, 100)}
        )
        assert ed["t"] == [[1.0, 1.0], [1.0, 1.0]]
        assert ed["a"] == [0, 2]
        assert ed["big"] == "<tensor shape=[100, 100] dtype=torch.float32>"

    def test_nested_containers_are_converted(self) -> None:
        """Tensors inside lists and dicts are converted too."""
        import torch

        ed = ConvertValues()(None, "info", {"losses": [torch.tensor(1.0)], "m": {"a": torch.tensor(2)}})
        assert ed == {"losses": [1.0], "m": {"a": 2}}


class TestTextRenderer:
    def test_renders_the_documented_line(self) -> None:
        """time | LEVEL | event key=value ..., floats in their shortest round-trip form."""
        line = TextRenderer()(None, "info", {"event": "train_step", "step": 1, "loss": 1.2, "lr": 3e-4})
        match = LINE.fullmatch(line)
        assert match is not None
        assert match["level"] == "INFO"
        assert match["rest"] == "train_step step=1 loss=1.2 lr=0.0003"

    def test_level_follows_method_name(self) -> None:
        """warning/error methods give WARNING/ERROR columns."""
        assert " | WARNING | " in TextRenderer()(None, "warning", {"event": "x"})
        assert " | ERROR | " in TextRenderer()(None, "error", {"event": "x"})

    @pytest.mark.parametrize(
        ("value", "text"),
        [
            ("plain", "plain"),
            ("two words", '"two words"'),
            ("a=b", '"a=b"'),
            ("x|y", '"x|y"'),
            ('say "hi"', '"say \\"hi\\""'),
            ("line\nbreak", '"line\\nbreak"'),
            ("\x1b[31mred", '"\\x1b[31mred"'),
            ("sep\u2028x", '"sep\\u2028x"'),
            ("nel\x85x", '"nel\\x85x"'),
            ("", '""'),
            (None, "None"),
            (True, "True"),
            (math.nan, "nan"),
            (0.1 + 0.2, "0.30000000000000004"),
        ],
    )
    def test_value_quoting(self, value: object, text: str) -> None:
        """Strings are bare when safe, quoted and escaped otherwise."""
        line = TextRenderer()(None, "info", {"event": "e", "k": value})
        assert line.endswith(f" | INFO | e k={text}")

    @pytest.mark.parametrize(
        ("value", "text"),
        [
            (1e-7, "1e-7"),
            (1e16, "1e+16"),
            (-0.0, "-0.0"),
            (2.0, "2.0"),
            (math.inf, "inf"),
            (-math.inf, "-inf"),
            (2**64 - 1, str(2**64 - 1)),
            (2**64, str(2**64)),
            (-(2**63), str(-(2**63))),
            pytest.param(2**16609, "<int of 16610 bits>", id="beyond-the-int-str-limit"),
            (False, "False"),
        ],
    )
    def test_numbers_alone_and_among_strings_read_the_same(self, value: object, text: str) -> None:
        """A numbers-only event (written in one go) and one with a string (value by value) agree."""
        alone = TextRenderer()(None, "info", {"event": "e", "n": value, "m": 1})
        mixed = TextRenderer()(None, "info", {"event": "e", "n": value, "m": "one"})
        assert alone.endswith(f" | INFO | e n={text} m=1")
        assert mixed.endswith(f" | INFO | e n={text} m=one")

    def test_key_order_and_event_position(self) -> None:
        """Keys keep their order wherever ``event`` sits, also for a key sequence seen before."""
        for _ in range(2):
            first = TextRenderer()(None, "info", {"event": "e", "b": 1, "a": 2.5})
            middle = TextRenderer()(None, "info", {"b": 1, "event": "e", "a": 2.5})
            assert first.endswith(" e b=1 a=2.5")
            assert middle.endswith(" e b=1 a=2.5")

    def test_percent_in_keys_is_literal(self) -> None:
        """A key with ``%`` in it is written as it is (the cached template escapes it)."""
        for _ in range(2):
            assert TextRenderer()(None, "info", {"event": "e", "top%1": 0.5}).endswith(" e top%1=0.5")

    def test_a_reused_renderer_writes_what_a_fresh_one_does(self) -> None:
        """Line templates are kept per key sequence, event and level, for one second: reused
        across events and seconds, a renderer never puts one kind of line's head on another."""
        kinds: list[tuple[str, dict[Any, Any]]] = [
            ("info", {"event": "train_step", "step": 1, "loss": 0.5}),
            ("info", {"event": "100%_done", "step": 1, "loss": 0.5}),  # % in the head
            ("warning", {"event": "train_step", "step": 1, "loss": 0.5}),
            ("info", {"event": "checkpoint", "step": 1, "loss": 0.5}),
            ("info", {"event": "train_step", "step": 1, "loss": "high"}),  # same keys, a string
            ("info", {"step": 1, "event": "train_step", "loss": 0.5}),  # event not first
            ("info", {"event": 7, "step": 1}),  # an event that is no string
            ("info", {"event": "eval", 1: 0.5}),  # 1, True and 1.0 are one dict key, three tokens
            ("info", {"event": "eval", True: 0.5}),
            ("info", {"event": "eval", 1.0: 0.5}),
        ]
        now = [1_000.25]
        renderer = TextRenderer(clock=lambda: now[0])
        for t in (1_000.25, 1_000.75, 1_001.5):
            now[0] = t
            for method, fields in kinds * 2:
                fresh = TextRenderer(clock=lambda: t)(None, method, dict(fields))  # noqa: B023  # called at once
                assert renderer(None, method, dict(fields)) == fresh

    def test_unsafe_keys_are_quoted(self) -> None:
        """A key holding '=' or a newline can't fake a field."""
        line = TextRenderer()(None, "info", {"event": "e", "a=b\nc": 1, 2: "x"})
        assert line.endswith(' e "a=b\\nc"=1 2=x')


class TestJSONLRenderer:
    def test_event_first_timestamp_last(self) -> None:
        """Key order: event, payload keys, added keys, timestamp."""
        doc = JSONLRenderer()(None, "info", {"step": 1, "elapsed_s": 0.5, "event": "train_step"})
        assert isinstance(doc, str)
        assert "\n" not in doc
        record = json.loads(doc)
        assert list(record) == ["event", "step", "elapsed_s", "timestamp"]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["timestamp"])

    def test_timestamp_is_utc(self) -> None:
        """The timestamp is the clock's time in UTC."""
        doc = JSONLRenderer(clock=lambda: 86400.25)(None, "info", {"event": "x"})
        assert json.loads(doc)["timestamp"] == "1970-01-02T00:00:00.250Z"

    def test_non_finite_floats_are_strings(self) -> None:
        """NaN and infinities are never null, also when nested."""
        doc = JSONLRenderer()(
            None, "info", {"event": "x", "a": math.nan, "b": [math.inf], "c": {"d": -math.inf}, "e": None}
        )
        record = json.loads(doc)
        assert (record["a"], record["b"], record["c"], record["e"]) == (
            "NaN",
            ["Infinity"],
            {"d": "-Infinity"},
            None,
        )

    def test_timestamp_follows_the_clock_across_milliseconds_and_seconds(self) -> None:
        """The per-millisecond cache never serves a stale time, also across a second's edge."""
        now = [0.9995]
        renderer = JSONLRenderer(clock=lambda: now[0])
        stamps = []
        for t in (0.9995, 0.9999, 1.0, 1.0004, 1.0015, 61.25):
            now[0] = t
            stamps.append(json.loads(renderer(None, "info", {"event": "x"}))["timestamp"][14:])
        assert stamps == ["00:00.999Z", "00:00.999Z", "00:01.000Z", "00:01.000Z", "00:01.001Z", "01:01.250Z"]

    def test_as_bytes(self) -> None:
        """as_bytes=True returns bytes for binary sinks."""
        assert isinstance(JSONLRenderer(as_bytes=True)(None, "info", {"event": "x"}), bytes)

    def test_line_separators_escaped(self) -> None:
        """U+2028, U+2029 and U+0085 can't split the record for splitlines() readers."""
        doc = JSONLRenderer()(None, "info", {"event": "x", "s": "a\u2028b\u2029c\x85d"})
        assert len(doc.splitlines()) == 1
        assert json.loads(doc)["s"] == "a\u2028b\u2029c\x85d"

    @pytest.mark.parametrize(
        "fields",
        [
            {"event": "x", "step": 1, "loss": 0.25},  # event first: dumped as is, timestamp spliced in
            {"step": 1, "event": "x", "loss": 0.25},  # event not first: rebuilt
            {"event": "x", "loss": math.nan},  # NaN: the careful path
            {"event": "x", 7: "seven"},  # a key orjson refuses
            {"step": 1},  # no event at all
            {"event": "x", "timestamp": "t", "a": 1},  # a timestamp of the chain's own
        ],
    )
    def test_every_path_writes_the_same_record_layout(self, fields: dict[Any, Any]) -> None:
        """Whichever way a record is dumped: event first, the fields in order, then the timestamp
        (a chain's own stays where it is), and the event dict is left as it was."""
        given = dict(fields)
        record = json.loads(JSONLRenderer(clock=lambda: 1.5)(None, "info", fields))
        assert list(fields) == list(given)
        added = [] if "timestamp" in given else ["timestamp"]
        assert [k for k in record if k != "_speedtronic"] == (
            ["event"] + [str(k) for k in given if k != "event"] + added
        )
        assert record["timestamp"] == given.get("timestamp", "1970-01-01T00:00:01.500Z")

    def test_existing_timestamp_kept(self) -> None:
        """A chain's own timestamp (e.g. structlog.processors.TimeStamper) is not replaced."""
        assert json.loads(JSONLRenderer()(None, "info", {"event": "x", "timestamp": "t"}))["timestamp"] == "t"


class TestWriteText:
    def test_writes_lines_at_or_above_its_level(self) -> None:
        """The rendered line goes to ``write`` when the method's level reaches the threshold."""
        lines: list[str] = []
        stage = WriteText(lines.append, level=logging.INFO)
        ed = {"event": "shape_warning"}
        assert stage(None, "warning", ed) is ed
        stage(None, "debug", {"event": "hidden"})
        assert [line.split(" | ")[1:] for line in lines] == [["WARNING", "shape_warning"]]

    def test_below_the_level_nothing_is_rendered(self) -> None:
        """A filtered level costs no rendering: the renderer is never called."""
        def renderer(logger: object, method_name: str, event_dict: dict[str, object]) -> str:
            raise AssertionError("rendered")

        stage = WriteText(print, renderer, level=logging.WARNING)
        stage(None, "info", {"event": "train_step"})


class TestWriteLines:
    def test_hands_rendered_output_to_write(self) -> None:
        """The renderer's output is written and the event dict flows on unchanged."""
        out: list[str] = []
        ed = {"event": "x", "a": 1}
        assert WriteLines(out.append, JSONLRenderer())(None, "info", ed) is ed
        assert json.loads(out[0])["a"] == 1


class TestDispatchHooks:
    def test_calls_hooks_in_order_then_drops(self) -> None:
        """Hooks get (event, payload) in order; the event is consumed."""
        journal: list[str] = []

        class Obj:
            def on_event(self, event: str, payload: dict[str, object]) -> None:
                journal.append(f"obj {event} {payload}")

        def fn(event: str, payload: dict[str, object]) -> None:
            journal.append(f"fn {event} {payload}")

        with pytest.raises(structlog.DropEvent):
            DispatchHooks([Obj(), fn])(None, "info", {"event": "e", "a": 1})
        assert journal == ["obj e {'a': 1}", "fn e {'a': 1}"]

    def test_not_final_returns_the_event(self) -> None:
        """``final=False`` (MetricLogger's chain end) delivers the same and hands the event back."""
        journal: list[str] = []
        ed = {"event": "e", "a": 1}
        assert DispatchHooks([lambda e, p: journal.append(e)], final=False)(None, "info", ed) is ed
        assert journal == ["e"]

    def test_failures_isolated(self) -> None:
        """A failing hook is reported and the next still runs."""
        errors: list[tuple[object, str, str]] = []
        seen: list[str] = []

        def bad(event: str, payload: dict[str, object]) -> None:
            raise ValueError("boom")

        stage = DispatchHooks(
            [bad, lambda e, p: seen.append(e)], on_error=lambda h, exc, ev: errors.append((h, str(exc), ev))
        )
        with pytest.raises(structlog.DropEvent):
            stage(None, "info", {"event": "e"})
        assert errors == [(bad, "boom", "e")]
        assert seen == ["e"]

    def test_base_exceptions_propagate(self) -> None:
        """KeyboardInterrupt from a hook is not swallowed."""

        def interrupt(event: str, payload: dict[str, object]) -> None:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            DispatchHooks([interrupt], on_error=lambda *a: None)(None, "info", {"event": "e"})

    def test_each_hook_gets_its_own_payload(self) -> None:
        """One hook mutating its payload can't affect the next."""
        seen: list[dict[str, object]] = []

        def mutate(event: str, payload: dict[str, object]) -> None:
            payload.pop("step")

        with pytest.raises(structlog.DropEvent):
            DispatchHooks([mutate, lambda e, p: seen.append(p)])(None, "info", {"event": "e", "step": 1})
        assert seen == [{"step": 1}]


    def test_later_hooks_mutating_cant_reach_earlier_payloads(self) -> None:
        """Copies are taken before any hook runs; the last hook (given the dict itself) can't reach
        the others' payloads either."""
        seen: list[dict[str, object]] = []

        def keep(event: str, payload: dict[str, object]) -> None:
            seen.append(payload)

        def mutate(event: str, payload: dict[str, object]) -> None:
            payload["step"] = -1

        DispatchHooks([keep, mutate, keep, mutate], final=False)(None, "info", {"event": "e", "step": 1})
        assert seen == [{"step": 1}, {"step": 1}]


class TestBoundCall:
    def test_functions_as_they_are_instances_by_their_bound_call(self) -> None:
        """A function is returned unchanged; a processor instance as its bound ``__call__``."""
        stage = AddElapsed()
        call = bound_call(stage)
        assert bound_call(level_for) is level_for
        assert call.__self__ is stage  # type: ignore[attr-defined]  # a bound method
        assert "elapsed_s" in call(None, "info", {"event": "x"})


class TestInAnyChain:
    def test_processors_work_in_a_plain_structlog_chain(self) -> None:
        """The stages compose in a user's own structlog chain, without global configuration."""
        out: list[str] = []
        log = structlog.wrap_logger(
            structlog.ReturnLogger(),
            processors=[CadenceFilter(10), ConvertValues(), WriteLines(out.append, JSONLRenderer()), _last],
        )
        log.info("train_step", step=5, loss=1.0)
        log.info("train_step", step=10, loss=0.5)
        assert [json.loads(doc)["step"] for doc in out] == [10]


def _last(logger: object, method_name: str, event_dict: dict[str, object]) -> str:
    return ""


def test_level_for() -> None:
    """Trouble events have their own levels; the rest are info."""
    assert [level_for(e) for e in ("train_step", "shape_warning", "delta_upload_stale")] == [
        "info",
        "warning",
        "warning",
    ]
    assert level_for("delta_upload_failed") == "error"


def test_payload_event_rename_never_overwrites_a_payload_event_key() -> None:
    """{"event": ..., "payload_event": ...}: both values survive."""
    ed = CopyPayload()(None, "info", {"payload": {"event": "user", "payload_event": "mine"}, "event": "x"})
    assert ed == {"event": "x", "payload_event#2": "user", "payload_event": "mine"}
