"""Each processor twice: called directly, as structlog calls it, and inside a stock structlog chain
(bound context, ``merge_contextvars``, ``add_log_level`` and ``TimeStamper`` around it)."""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from structlog.contextvars import bind_contextvars, clear_contextvars, merge_contextvars
from structlog.typing import Processor

from speedtronic import HookFailureWarning
from speedtronic.events import level_for
from speedtronic.hooks import DispatchHooks, HookFailures
from speedtronic.processors import (
    AddElapsed,
    AddMemory,
    AddRank,
    CadenceFilter,
    CapLine,
    ConvertValues,
    JSONLRenderer,
    TextRenderer,
    WriteLines,
    step_number,
)
from speedtronic.record import ORIGIN_OWN, empty_note

LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| (?P<level>[A-Z]+) \| (?P<rest>.*)")


class Capture:
    """A final processor that keeps each event dict it receives (as ``structlog.testing.LogCapture``)."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def __call__(self, logger: Any, method_name: str, event_dict: dict[str, Any]) -> Any:
        self.entries.append(dict(event_dict))
        raise structlog.DropEvent


@pytest.fixture
def contextvars() -> Iterator[None]:
    bind_contextvars(request_id="r-1")
    yield
    clear_contextvars()


def stock_chain(*stages: Processor, capture: Capture | None = None) -> Any:
    """A user's own chain: contextvars merged, level and ISO timestamp added, then ``stages``, bound
    context ``job="nightly"``."""
    processors: list[Processor] = [
        merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso"),
        *stages,
    ]
    if capture is not None:
        processors.append(capture)
    return structlog.wrap_logger(structlog.ReturnLogger(), processors=processors).bind(job="nightly")


pytestmark = pytest.mark.usefixtures("contextvars")


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

    def test_integer_like_steps_count(self) -> None:
        """numpy integers, int subclasses, __index__ objects and 0-d CPU int tensors are counted."""
        import numpy as np
        import torch

        class Index:
            def __index__(self) -> int:
                return 3

        cadence = CadenceFilter(2)
        for step in (np.int64(3), np.uint8(3), Index(), torch.tensor(3)):
            assert not cadence.admits("train_step", {"step": step}), type(step)
        for step in (np.int32(4), torch.tensor(4, dtype=torch.int16)):
            assert cadence.admits("train_step", {"step": step})

    def test_steps_that_are_not_integer_like_pass(self) -> None:
        """A float, a string, a bool, None, a float tensor or no step at all: the event passes."""
        import torch

        cadence = CadenceFilter(5)
        for step in (3.0, "3", True, None, torch.tensor(3.0), torch.tensor([3, 4])):
            assert cadence.admits("train_step", {"step": step})
        assert cadence.admits("train_step", {"loss": 1.0})
        assert cadence.admits("checkpoint", {"step": 3})

    def test_a_mapping_that_cannot_be_read_passes(self) -> None:
        """Reading the step fails: the event passes, to be reported wherever it fails next."""

        class Broken(dict[str, Any]):
            def get(self, key: str, default: Any = None) -> Any:
                raise RuntimeError("broken")

        assert CadenceFilter(2).admits("train_step", Broken())

    def test_step_number(self) -> None:
        """The rule in one function: integer-like values as ints, anything else None."""
        assert [step_number(v) for v in (7, True, 7.0, None, "7")] == [7, None, None, None, None]

    def test_in_a_stock_chain(self) -> None:
        """Dropped events never reach the next stage; bound context and contextvars pass through."""
        capture = Capture()
        log = stock_chain(CadenceFilter(10), capture=capture)
        log.info("train_step", step=5)
        log.info("train_step", step=10)
        log.info("checkpoint", step=5)
        assert [(e["event"], e["step"], e["job"], e["request_id"]) for e in capture.entries] == [
            ("train_step", 10, "nightly", "r-1"),
            ("checkpoint", 5, "nightly", "r-1"),
        ]


class TestAddElapsed:
    def test_adds_monotonic_seconds(self) -> None:
        """elapsed_s is measured from construction with the given clock, to the microsecond."""
        ticks = iter([10.0, 12.5000004])
        assert AddElapsed(clock=lambda: next(ticks))(None, "info", {"event": "x"})["elapsed_s"] == 2.5

    def test_keeps_existing_value(self) -> None:
        """A payload's own elapsed_s wins."""
        assert AddElapsed()(None, "info", {"elapsed_s": 7})["elapsed_s"] == 7

    def test_in_a_stock_chain(self) -> None:
        capture = Capture()
        stock_chain(AddElapsed(), capture=capture).info("e")
        assert capture.entries[0]["elapsed_s"] >= 0
        assert capture.entries[0]["job"] == "nightly"


class TestAddRank:
    def test_adds_rank_and_world_size_when_absent(self) -> None:
        assert AddRank(1, 4)(None, "info", {"event": "x"}) == {"event": "x", "rank": 1, "world_size": 4}
        assert AddRank(1, 4)(None, "info", {"rank": 0})["rank"] == 0

    def test_in_a_stock_chain(self) -> None:
        capture = Capture()
        stock_chain(AddRank(2, 8), capture=capture).info("e")
        assert (capture.entries[0]["rank"], capture.entries[0]["world_size"]) == (2, 8)


class TestAddMemory:
    def test_no_key_on_cpu(self) -> None:
        """A CPU-only process gets no memory_bytes (a CPU build's 0 is not a reading)."""
        import torch  # noqa: F401  # the stage must cope with torch imported and no accelerator

        assert "memory_bytes" not in AddMemory()(None, "info", {"event": "x"})

    def test_keeps_existing_value(self) -> None:
        """A payload's own memory_bytes wins."""
        assert AddMemory()(None, "info", {"memory_bytes": 5})["memory_bytes"] == 5

    def test_in_a_stock_chain(self) -> None:
        capture = Capture()
        stock_chain(AddMemory(), capture=capture).info("e", memory_bytes=3)
        assert capture.entries[0]["memory_bytes"] == 3


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

    def test_in_a_stock_chain(self) -> None:
        """Tensors inside lists and dicts are converted too, in a user's chain."""
        import torch

        capture = Capture()
        stock_chain(ConvertValues(), capture=capture).info(
            "e", losses=[torch.tensor(1.0)], m={"a": torch.tensor(2)}
        )
        assert (capture.entries[0]["losses"], capture.entries[0]["m"]) == ([1.0], {"a": 2})


class TestTextRenderer:
    def test_renders_the_documented_line(self) -> None:
        """time | LEVEL | event key=value ..., floats with 4 significant digits by default."""
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
            (math.inf, "inf"),
            (-math.inf, "-inf"),
            (2**64, str(2**64)),
            pytest.param(2**16609, "<int of 16610 bits>", id="beyond-the-int-str-limit"),
        ],
    )
    def test_values(self, value: object, text: str) -> None:
        """Strings are bare when safe, quoted and escaped otherwise; numbers as numbers."""
        line = TextRenderer()(None, "info", {"event": "e", "k": value})
        assert line.endswith(f" | INFO | e k={text}")

    @pytest.mark.parametrize(
        ("value", "digits", "text"),
        [
            (0.000975123, 4, "0.0009751"),
            (0.5741234, 3, "0.574"),
            (3.2244780063, 4, "3.224"),
            (20133.754, 4, "20134.0"),
            (1e-7, 4, "1e-07"),
            (0.1 + 0.2, None, "0.30000000000000004"),
            (2.0, 4, "2.0"),
        ],
    )
    def test_float_digits(self, value: float, digits: int | None, text: str) -> None:
        """Floats are readable by default (significant digits); float_digits=None writes every digit."""
        assert TextRenderer(float_digits=digits)(None, "info", {"event": "e", "x": value}).endswith(
            f" e x={text}"
        )

    def test_key_order_wherever_event_sits(self) -> None:
        """The event comes first, then the keys in order; timestamp and level keys aren't repeated."""
        line = TextRenderer()(
            None, "info", {"b": 1, "event": "e", "a": 2.5, "timestamp": "t", "level": "info"}
        )
        assert line.endswith(" | INFO | e b=1 a=2.5")

    def test_unsafe_keys_are_quoted(self) -> None:
        """A key holding '=' or a newline can't fake a field."""
        line = TextRenderer()(None, "info", {"event": "e", "a=b\nc": 1, 2: "x"})
        assert line.endswith(' e "a=b\\nc"=1 2=x')

    def test_in_a_stock_chain_as_the_renderer(self) -> None:
        """As a user's final renderer it returns the line, bound context and contextvars included."""
        line = stock_chain(TextRenderer()).info("train_step", step=2)
        assert line.endswith(" | INFO | train_step job=nightly step=2 request_id=r-1")


class TestJSONLRenderer:
    def test_event_first(self) -> None:
        """Key order: event, the fields in order, the note, then the timestamp when the renderer adds it."""
        doc = JSONLRenderer()(None, "info", {"step": 1, "elapsed_s": 0.5, "event": "train_step"})
        assert isinstance(doc, str)
        record = json.loads(doc)
        assert list(record) == ["event", "step", "elapsed_s", "_speedtronic", "timestamp"]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", record["timestamp"])

    def test_non_finite_floats_are_null_and_noted(self) -> None:
        """NaN and infinities are written as null (a number column stays a number) and the note says
        which, by JSON Pointer; a real None stays None and is not noted."""
        doc = JSONLRenderer()(
            None,
            "info",
            {"event": "x", "a": math.nan, "b": [1.0, math.inf], "c": {"d/e": -math.inf}, "e": None},
        )
        record = json.loads(doc)
        assert (record["a"], record["b"], record["c"], record["e"]) == (
            None,
            [1.0, None],
            {"d/e": None},
            None,
        )
        assert record["_speedtronic"]["non_finite"] == {
            "nan": ["/a"],
            "inf": ["/b/1"],
            "neg_inf": ["/c/d~1e"],
        }

    def test_as_bytes(self) -> None:
        """as_bytes=True returns bytes for binary sinks."""
        assert isinstance(JSONLRenderer(as_bytes=True)(None, "info", {"event": "x"}), bytes)

    def test_line_separators_escaped(self) -> None:
        """U+2028, U+2029 and U+0085 can't split the record for splitlines() readers."""
        doc = JSONLRenderer()(None, "info", {"event": "x", "s": "a\u2028b\u2029c\x85d"})
        assert isinstance(doc, str)
        assert len(doc.splitlines()) == 1
        assert json.loads(doc)["s"] == "a\u2028b\u2029c\x85d"

    def test_the_event_dict_is_left_as_it_was(self) -> None:
        """Rendering adds nothing to the event dict the next stage sees."""
        fields = {"step": 1, "loss": math.nan, 7: "seven"}
        given = dict(fields)
        JSONLRenderer()(None, "info", fields)
        assert fields == given or (math.isnan(fields["loss"]) and list(fields) == list(given))

    def test_in_a_stock_chain_with_timestamper(self) -> None:
        """A chain's own timestamp (structlog's TimeStamper) is kept; context and level are fields."""
        doc = stock_chain(JSONLRenderer()).info("train_step", step=2)
        record = json.loads(doc)
        assert next(iter(record)) == "event"
        assert (record["request_id"], record["job"], record["level"], record["step"]) == (
            "r-1",
            "nightly",
            "info",
            2,
        )
        assert "T" in record["timestamp"]


class TestCapLine:
    def test_a_line_that_fits_is_unchanged(self) -> None:
        renderer = JSONLRenderer()
        fields = {"event": "x", "timestamp": "t", "a": 1}
        assert CapLine(renderer, 1024)(None, "info", dict(fields)) == renderer(None, "info", dict(fields))

    def test_a_long_value_is_truncated_and_the_record_stays_json(self) -> None:
        """The largest value is cut with a marker naming what it was; the rest of the record stays."""
        doc = CapLine(JSONLRenderer(), 2048)(None, "info", {"event": "x", "step": 3, "blob": "y" * 100_000})
        assert len(doc.encode()) <= 2047
        record = json.loads(doc)
        assert record["step"] == 3
        assert record["blob"].startswith("<truncated: str of 100,000 chars")
        assert record["_speedtronic"]["truncated"] == ["blob"]

    def test_in_a_stock_chain(self) -> None:
        line = stock_chain(CapLine(TextRenderer(), 1024)).info("e", blob="z" * 5000)
        assert len(line.encode()) <= 1023
        assert "<truncated: str of 5,000 chars" in line


class TestWriteLines:
    def test_hands_rendered_output_to_write(self) -> None:
        """The renderer's output is written and the event dict flows on unchanged."""
        out: list[str] = []
        ed = {"event": "x", "a": 1}
        assert WriteLines(out.append, JSONLRenderer())(None, "info", ed) is ed
        assert json.loads(out[0])["a"] == 1

    def test_writes_lines_at_or_above_its_level(self) -> None:
        """With a level, only events at or above it are rendered and written."""
        lines: list[str] = []
        stage = WriteLines(lines.append, TextRenderer(), logging.INFO)
        ed = {"event": "shape_warning"}
        assert stage(None, "warning", ed) is ed
        stage(None, "debug", {"event": "hidden"})
        assert [line.split(" | ")[1:] for line in lines] == [["WARNING", "shape_warning"]]

    def test_below_the_level_nothing_is_rendered(self) -> None:
        """A filtered level costs no rendering: the renderer is never called."""

        def renderer(logger: object, method_name: str, event_dict: dict[str, object]) -> str:
            raise AssertionError("rendered")

        WriteLines(print, renderer, logging.WARNING)(None, "info", {"event": "train_step"})

    def test_two_outputs_in_a_stock_chain(self) -> None:
        """Text and JSONL written by one user chain, which then goes on to its own final stage."""
        text: list[str] = []
        docs: list[str] = []
        capture = Capture()
        write_text = WriteLines(text.append, TextRenderer(), logging.INFO)
        log = stock_chain(write_text, WriteLines(docs.append, JSONLRenderer()), capture=capture)
        log.info("train_step", step=1)
        assert text[0].endswith("train_step job=nightly step=1 request_id=r-1")
        assert json.loads(docs[0])["step"] == 1
        assert capture.entries[0]["step"] == 1


class Journal:
    def __init__(self, name: str, out: list[str]) -> None:
        self.name, self.out = name, out

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self.out.append(f"{self.name} {event} {sorted(payload)}")


class TestDispatchHooks:
    def test_calls_hooks_in_order_then_consumes(self) -> None:
        """Hooks get (event, payload) in order, payload without "event"; the event is consumed."""
        journal: list[str] = []
        ed = {"event": "e", "a": 1}
        with pytest.raises(structlog.DropEvent):
            DispatchHooks([Journal("obj", journal), lambda e, p: journal.append(f"fn {e} {sorted(p)}")])(
                None, "info", ed
            )
        assert journal == ["obj e ['a']", "fn e ['a']"]
        assert ed == {"event": "e", "a": 1}

    def test_deliver_calls_the_hooks_without_ending_a_chain(self) -> None:
        """deliver() is the stage's work without its DropEvent, for a loop that runs the stages itself:
        hooks in order with the level where declared, failures isolated, own records not delivered."""
        journal: list[str] = []

        def bad(event: str, payload: dict[str, object]) -> None:
            raise ValueError("boom")

        def leveled(event: str, payload: dict[str, object], *, level: str = "info") -> None:
            journal.append(f"{level} {event} {sorted(payload)}")

        stage = DispatchHooks([bad, Journal("obj", journal), leveled])  # consume=True: deliver never raises
        with pytest.warns(HookFailureWarning, match="ValueError: boom"):
            assert stage.deliver("warning", {"event": "e", "a": 1}) is None
        stage.deliver("info", {"event": "logging_error", "_speedtronic": empty_note(ORIGIN_OWN)})
        assert journal == ["obj e ['a']", "warning e ['a']"]
        assert list(stage.errors.values()) == [1]

    def test_consume_false_returns_the_event_dict_unchanged(self) -> None:
        """Mid-chain (consume=False) it hands the same, unchanged event dict on."""
        ed = {"event": "e", "a": 1}
        assert DispatchHooks([lambda e, p: p.clear()], consume=False)(None, "info", ed) is ed
        assert ed == {"event": "e", "a": 1}

    def test_failures_isolated_counted_and_warned(self) -> None:
        """A failing hook is counted and warned (HookFailureWarning); the next still runs."""
        seen: list[str] = []

        def bad(event: str, payload: dict[str, object]) -> None:
            raise ValueError("boom")

        stage = DispatchHooks([bad, lambda e, p: seen.append(e)], consume=False)
        with pytest.warns(HookFailureWarning, match=r"'.*bad' failed \(1 so far\).*ValueError: boom"):
            stage(None, "info", {"event": "e"})
        assert seen == ["e"]
        assert list(stage.errors.values()) == [1]

    def test_reports_are_rate_limited(self) -> None:
        """The 1st (with traceback), 2nd, 4th, 8th failure are reported; every one is counted."""
        reports: list[dict[str, Any]] = []

        def bad(event: str, payload: dict[str, object]) -> None:
            raise ValueError("boom")

        failures = HookFailures(reports.append)
        stage = DispatchHooks([bad], on_error=failures, consume=False)
        with pytest.warns(HookFailureWarning):
            for _ in range(9):
                stage(None, "info", {"event": "e"})
        assert [r["failures"] for r in reports] == [1, 2, 4, 8]
        assert "Traceback" in reports[0]["traceback"]
        assert "traceback" not in reports[1]
        assert list(failures.counts.values()) == [9]

    def test_an_error_whose_str_raises_is_still_reported(self) -> None:
        """A foreign exception that can't be printed never escapes the dispatch."""

        class Rude(Exception):
            def __str__(self) -> str:
                raise RuntimeError("no")

        def bad(event: str, payload: dict[str, object]) -> None:
            raise Rude

        with pytest.warns(HookFailureWarning, match="unprintable"):
            DispatchHooks([bad], consume=False)(None, "info", {"event": "e"})

    def test_base_exceptions_propagate(self) -> None:
        """KeyboardInterrupt from a hook is not swallowed."""

        def interrupt(event: str, payload: dict[str, object]) -> None:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            DispatchHooks([interrupt], on_error=lambda *a: None)(None, "info", {"event": "e"})

    def test_each_hook_gets_its_own_payload(self) -> None:
        """One hook mutating its payload can't affect the next, before or after."""
        seen: list[dict[str, object]] = []

        def mutate(event: str, payload: dict[str, object]) -> None:
            payload["step"] = -1

        DispatchHooks([mutate, seen.append and (lambda e, p: seen.append(p)), mutate], consume=False)(
            None, "info", {"event": "e", "step": 1}
        )
        assert seen == [{"step": 1}]

    def test_bad_hooks_are_refused_when_the_stage_is_made(self) -> None:
        with pytest.raises(TypeError, match="can't be called as"):
            DispatchHooks([lambda only_one: None])

    def test_in_a_stock_chain_isolates_failures(self) -> None:
        """In a user's chain: a failing hook never escapes the log call, the next hook still runs and
        gets the whole event (bound context, contextvars, level, timestamp)."""
        got: list[tuple[str, dict[str, Any]]] = []

        def bad(event: str, payload: dict[str, object]) -> None:
            raise ValueError("boom")

        log = stock_chain(DispatchHooks([bad, lambda e, p: got.append((e, p))]))
        with pytest.warns(HookFailureWarning):
            assert log.info("train_step", step=1) is None
        ((event, payload),) = got
        assert event == "train_step"
        assert (payload["step"], payload["job"], payload["request_id"], payload["level"]) == (
            1,
            "nightly",
            "r-1",
            "info",
        )

    def test_mid_chain_passes_the_event_on(self) -> None:
        """consume=False mid-chain: the renderer after it sees every key, "event" included."""
        line = stock_chain(DispatchHooks([lambda e, p: p.clear()], consume=False), TextRenderer()).info(
            "e", a=1
        )
        assert line.endswith(" | INFO | e job=nightly a=1 request_id=r-1")


def test_level_for() -> None:
    """Trouble events have their own levels; the rest are info."""
    assert [level_for(e) for e in ("train_step", "shape_warning", "delta_upload_stale")] == [
        "info",
        "warning",
        "warning",
    ]
    assert level_for("delta_upload_failed") == "error"
