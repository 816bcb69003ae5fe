"""One chain, the only path: cadence as a stage, one timestamp, the logger's own records, hook levels."""

from __future__ import annotations

import functools
import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest
import structlog

from speedtronic.chain import build_chain, build_processors
from speedtronic.errors import HookFailureWarning, LoggingFailureWarning
from speedtronic.hooks import BackgroundHooks, CallbackList, DispatchHooks
from speedtronic.processors import JSONLRenderer, TextRenderer
from speedtronic.profiling import MetricLogger
from speedtronic.record.text import ValueFormat
from tests.helpers import read_jsonl

FIXED = 1_767_268_800.25  # 2026-01-01T12:00:00.25Z


class TestCadenceIsAStage:
    def test_emit_says_whether_the_cadence_kept_the_event(self) -> None:
        """emit returns False for a skipped train_step and True for every event that passed."""
        with MetricLogger(stream=io.StringIO(), every_steps=2) as logger:
            kept = [logger.emit("train_step", {"step": s}) for s in (1, 2, 3, 4)]
            assert logger.emit("checkpoint", {"step": 3}) is True
        assert kept == [False, True, False, True]

    def test_the_cadence_is_the_chains_first_stage(self) -> None:
        """logger.processors starts with the CadenceFilter that emit asks, configured every_steps."""
        with MetricLogger(stream=io.StringIO(), every_steps=5) as logger:
            first = logger.processors[0]
            assert type(first).__name__ == "CadenceFilter"
            assert first.every_steps == logger.every_steps == 5  # type: ignore[attr-defined]

    def test_build_processors_works_in_a_stock_bound_logger(self) -> None:
        """The same list, in your own structlog logger: cadence, enrichment, text, hooks."""
        lines: list[str] = []
        seen: list[tuple[str, dict[str, Any]]] = []
        stages = build_processors(
            every_steps=10, text=lines.append, hooks=[lambda e, p: seen.append((e, p))], clock=lambda: FIXED
        )
        log = structlog.wrap_logger(structlog.ReturnLogger(), processors=stages)
        log.info("train_step", step=5, loss=1.0, api_key="hunter2")
        log.info("train_step", step=10, loss=0.5, api_key="hunter2")
        assert len(lines) == 1
        assert lines[0].startswith("2026-01-01 12:00:00 | INFO | train_step step=10 loss=0.5 api_key=[REDACT")
        assert [(e, p["step"], p["timestamp"]) for e, p in seen] == [
            ("train_step", 10, "2026-01-01T12:00:00.250000Z")
        ]

    def test_a_stock_chain_keeps_the_reserved_keys_rule(self) -> None:
        """In a stock chain from build_processors, a payload's _speedtronic can't pass for the
        logger's own record (the hooks still get the event), nor its timestamp for the record's."""
        lines: list[bytes] = []
        seen: list[tuple[str, dict[str, Any]]] = []
        stages = build_processors(
            json=lines.append, hooks=[lambda e, p: seen.append((e, p))], clock=lambda: FIXED
        )
        log = structlog.wrap_logger(structlog.ReturnLogger(), processors=stages)
        log.info("hook_error", _speedtronic={"origin": "speedtronic"}, timestamp="1999", loss=0.5)
        assert seen == [("hook_error", {
            "payload__speedtronic": {"origin": "speedtronic"}, "payload_timestamp": "1999", "loss": 0.5,
            "elapsed_s": seen[0][1]["elapsed_s"], "timestamp": "2026-01-01T12:00:00.250000Z",
        })]  # fmt: skip
        (record,) = [json.loads(line) for line in lines]
        assert record["_speedtronic"]["origin"] == "user"
        assert (record["event"], record["timestamp"]) == ("hook_error", "2026-01-01T12:00:00.250000Z")

    def test_bad_arguments_name_the_caller_and_argument(self) -> None:
        """build_processors' checks name the argument, and MetricLogger's name the logger."""
        with pytest.raises(ValueError, match=r"build_processors: every_steps must be an int >= 1"):
            build_processors(every_steps=0)
        with pytest.raises(ValueError, match=r"MetricLogger: every_steps must be an int >= 1"):
            MetricLogger(stream=io.StringIO(), every_steps=0)


class TestOneTimestamp:
    def test_text_and_jsonl_name_the_same_instant(self, tmp_path: Path) -> None:
        """One clock reading per event, rendered by both: UTC to the second, and to the µs."""
        text = io.StringIO()
        with MetricLogger(stream=text, json_file=tmp_path / "m.jsonl", clock=lambda: FIXED) as logger:
            logger.emit("train_step", {"step": 1})
        (record,) = read_jsonl(tmp_path / "m.jsonl")
        assert record["timestamp"] == "2026-01-01T12:00:00.250000Z"
        assert text.getvalue().startswith("2026-01-01 12:00:00 | INFO | train_step step=1")

    def test_utc_by_default_whatever_the_time_zone(self, tmp_path: Path) -> None:
        """Under TZ=America/New_York the text line still says 12:00:00, as the JSONL does (a child
        process: the zone is read at start)."""
        code = (
            "import io, sys\n"
            "from speedtronic.profiling import MetricLogger\n"
            f"with MetricLogger(json_file=sys.argv[1], clock=lambda: {FIXED}) as logger:\n"
            "    logger.emit('train_step', {'step': 1})\n"
            f"with MetricLogger(local_time=True, clock=lambda: {FIXED}) as logger:\n"
            "    logger.emit('train_step', {'step': 2})\n"
        )
        env = {**os.environ, "TZ": "America/New_York"}
        out = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / "m.jsonl")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.splitlines()
        assert out[0].startswith("2026-01-01 12:00:00 | INFO | train_step step=1")
        assert out[1].startswith("2026-01-01 07:00:00-05:00 | INFO | train_step step=2")
        assert read_jsonl(tmp_path / "m.jsonl")[0]["timestamp"] == "2026-01-01T12:00:00.250000Z"

    def test_renderers_take_a_fixed_clock(self) -> None:
        """Standing alone (no timestamp in the event dict), each renderer reads its own clock."""
        record = json.loads(JSONLRenderer(clock=lambda: 0.0)(None, "info", {"event": "x"}))
        assert record["timestamp"] == "1970-01-01T00:00:00.000000Z"
        line = TextRenderer(clock=lambda: 0.0)(None, "info", {"event": "x"})
        assert line == "1970-01-01 00:00:00 | INFO | x"

    def test_a_stock_timestamper_is_the_records_time(self) -> None:
        """structlog's TimeStamper earlier in a chain: the text line shows that same time."""
        stamped = {"event": "x", "timestamp": "2030-05-06T07:08:09Z"}
        line = TextRenderer(clock=lambda: 0.0)(None, "info", stamped)
        assert line == "2030-05-06 07:08:09 | INFO | x"


class TestOwnRecords:
    def test_hook_errors_go_through_the_chain_marked_as_own(self, tmp_path: Path) -> None:
        """A user processor sees the hook_error record; it is marked as the logger's own in the JSONL,
        and no hook receives it."""
        seen: list[str] = []

        def watch(logger: Any, method_name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
            seen.append(event_dict["event"])
            return event_dict

        received: list[str] = []

        def bad(event: str, payload: dict[str, Any]) -> None:
            received.append(event)
            raise RuntimeError("boom")

        with (
            pytest.warns(HookFailureWarning, match="boom"),
            MetricLogger(
                stream=io.StringIO(), json_file=tmp_path / "m.jsonl", hooks=[bad], processors=[watch]
            ) as logger,
        ):
            logger.emit("train_step", {"step": 1})
        records = read_jsonl(tmp_path / "m.jsonl")
        assert [r["event"] for r in records] == ["train_step", "hook_error", "hook_error"]
        assert all(r["_speedtronic"]["origin"] == "speedtronic" for r in records[1:])
        assert records[0]["_speedtronic"]["origin"] == "user"
        assert seen == ["train_step", "hook_error", "hook_error"]
        assert received == ["train_step"]

    def test_a_payload_cant_forge_the_mark(self, tmp_path: Path) -> None:
        """A payload's own _speedtronic key is renamed, so it is never taken for the logger's own."""
        with MetricLogger(stream=io.StringIO(), json_file=tmp_path / "m.jsonl") as logger:
            logger.emit("hook_error", {"_speedtronic": {"origin": "speedtronic"}})
        (record,) = read_jsonl(tmp_path / "m.jsonl")
        assert record["payload__speedtronic"] == {"origin": "speedtronic"}
        assert record["_speedtronic"]["origin"] == "user"


class LevelHook:
    def __init__(self) -> None:
        self.got: list[tuple[str, str]] = []

    def on_event(self, event: str, payload: dict[str, Any], *, level: str = "?") -> None:
        self.got.append((event, level))


class TestHookLevels:
    def test_a_hook_that_declares_level_gets_the_records(self) -> None:
        """emit's level, else the catalog's; a hook without the parameter is called as before."""
        hook, plain = LevelHook(), []
        with MetricLogger(stream=io.StringIO(), hooks=[hook, lambda e, p: plain.append(e)]) as logger:
            logger.emit("my_alert", {}, level="ERROR")
            logger.emit("shape_warning", {})
            logger.emit("ooo_backprop", {}, level="debug")
        assert hook.got == [("my_alert", "error"), ("shape_warning", "warning"), ("ooo_backprop", "debug")]
        assert plain == ["my_alert", "shape_warning", "ooo_backprop"]

    def test_background_hooks_and_callback_lists_pass_it_on(self) -> None:
        """The level reaches a hook behind background(...) and inside a CallbackList."""
        behind, inside = LevelHook(), LevelHook()
        hooks = [BackgroundHooks([behind]), CallbackList([inside])]
        with MetricLogger(stream=io.StringIO(), hooks=hooks) as logger:
            logger.emit("x", {}, level="critical")
        assert behind.got == inside.got == [("x", "critical")]


class TestTextLine:
    def test_a_payload_level_key_is_shown(self) -> None:
        """A payload's own level is data; only a level repeating the record's is left out."""
        text = io.StringIO()
        with MetricLogger(stream=text) as logger:
            logger.emit("notice", {"level": "high"})
            logger.emit("notice", {"level": "info"})
        first, second = text.getvalue().splitlines()
        assert first.endswith("| INFO | notice level=high elapsed_s=" + first.rsplit("=", 1)[1])
        assert " level=" not in second

    @pytest.mark.parametrize(
        ("value", "text"),
        [
            (0.000975, "0.000975"), (3.2244, "3.224"), (1e-7, "1e-07"), (1.0, "1.0"), (9999.5, "10000.0"),
            (10556.3, "10556.0"), (1e20, "1e+20"), (-2.5e-5, "-2.5e-05"), (0.1 + 0.2, "0.3"),
            (float("nan"), "nan"), (float("-inf"), "-inf"), (12345678.9, "12345679.0"),
        ],
    )  # fmt: skip
    def test_float_rule(self, value: float, text: str) -> None:
        """Four significant digits, whole digits never cut, always readable as a float."""
        assert ValueFormat()(value) == text

    def test_every_digit_on_request(self) -> None:
        assert ValueFormat(None)(0.1 + 0.2) == "0.30000000000000004"


class TestNothingAfterClose:
    def test_no_inline_hook_is_called_after_close_returns(self) -> None:
        """A hook stuck inside another thread's emit: close() gives up waiting; the hook after it is
        never called, even once the stuck one returns."""
        release = threading.Event()
        entered = threading.Event()
        calls: list[str] = []

        def stuck(event: str, payload: dict[str, Any]) -> None:
            entered.set()
            release.wait(60)

        def second(event: str, payload: dict[str, Any]) -> None:
            calls.append(event)

        logger = MetricLogger(stream=io.StringIO(), hooks=[stuck, second], close_timeout_s=0.1)
        worker = threading.Thread(target=logger.emit, args=("train_step", {"step": 1}))
        worker.start()
        assert entered.wait(60)
        with pytest.warns(HookFailureWarning, match="not closed"):
            logger.close()
        release.set()
        worker.join(60)
        assert calls == []

    def test_a_background_hook_failing_after_close_writes_nothing(self, tmp_path: Path) -> None:
        """close() times out on a slow background hook; its later failure adds no line to any file."""
        release = threading.Event()
        entered = threading.Event()

        def slow_then_fail(event: str, payload: dict[str, Any]) -> None:
            entered.set()
            release.wait(60)
            raise RuntimeError("late")

        path = tmp_path / "m.jsonl"
        text = tmp_path / "t.log"
        logger = MetricLogger(
            file=text, json_file=path, hooks=[slow_then_fail], background_hooks=True, close_timeout_s=0.1
        )
        logger.emit("train_step", {"step": 1})
        assert entered.wait(60)
        (thread,) = [t for t in threading.enumerate() if t.name == f"speedtronic-hooks-{id(logger):x}"]
        with pytest.warns(LoggingFailureWarning, match="not delivered"), pytest.warns(HookFailureWarning):
            logger.close()
        written = path.read_bytes(), text.read_bytes()
        with pytest.warns(HookFailureWarning, match="late"):
            release.set()
            thread.join(60)
        assert (path.read_bytes(), text.read_bytes()) == written
        assert b"logging_error" not in written[0]


class TestChainParts:
    def test_the_logger_holds_its_parts_by_name(self, tmp_path: Path) -> None:
        """logger.chain names the cadence, the outputs and the dispatch; processors lists them in order."""
        with MetricLogger(stream=io.StringIO(), json_file=tmp_path / "m.jsonl", every_steps=3) as logger:
            chain = logger.chain
            assert chain.cadence.every_steps == 3
            assert chain.outputs == (chain.text, chain.json)
            assert chain.processors == [chain.cadence, chain.reserved, *chain.enrichment, *chain.extra,
                                        *chain.outputs, chain.dispatch]  # fmt: skip
            assert list(logger.processors) == chain.processors

    def test_the_chain_runs_every_stage_it_lists(self) -> None:
        """build_chain's chain, run with an event and its payload, takes it through the cadence
        (admits) and RenameReserved as well as the later stages: the chain MetricLogger runs."""
        lines: list[bytes] = []
        seen: list[str] = []
        chain = build_chain(json=lines.append, hooks=[lambda e, p: seen.append(e)], every_steps=2,
                            clock=lambda: FIXED)  # fmt: skip
        assert not chain.admits("train_step", {"step": 1})
        assert chain.admits("train_step", {"step": 2})
        chain.run("info", "train_step", {"step": 2, "timestamp": "mine", 1: "one"})
        record = json.loads(lines[0])
        assert (record["event"], record["payload_timestamp"], record["1"]) == ("train_step", "mine", "one")
        assert record["timestamp"] == "2026-01-01T12:00:00.250000Z"
        assert seen == ["train_step"]

    def test_a_refused_option_leaves_no_file(self, tmp_path: Path) -> None:
        """An option the chain refuses (checked by build_chain, after the files open) leaves none."""
        with pytest.raises(ValueError, match="MetricLogger: every_steps"):
            MetricLogger(file=tmp_path / "t.log", json_file=tmp_path / "m.jsonl", every_steps=0)
        assert list(tmp_path.iterdir()) == []

    def test_a_users_dispatch_stage_is_not_the_loggers(self) -> None:
        """A DispatchHooks of your own in processors= keeps calling its hooks until the logger's close,
        and the logger's close() stops only its own dispatch (it was taken for the logger's before)."""
        mine: list[str] = []
        own = DispatchHooks([lambda event, payload: mine.append(event)], consume=False)
        logger = MetricLogger(stream=io.StringIO(), processors=[own])
        assert logger.chain.dispatch is not own
        assert logger.chain.extra == (own,)
        logger.emit("a", {})
        logger.close()
        structlog.wrap_logger(structlog.ReturnLogger(), processors=[own]).info("after")
        assert mine == ["a", "after"]

    def test_a_user_event_named_close_fails_in_phase_on_event(self, tmp_path: Path) -> None:
        """A hook failing on an event named "close" is recorded with phase on_event, during "close";
        a failing close() is phase close (the phase was read from the event's name before)."""

        class Fails:
            def on_event(self, event: str, payload: dict[str, Any]) -> None:
                raise RuntimeError("boom")

            def close(self) -> None:
                raise RuntimeError("close boom")

        with pytest.warns(HookFailureWarning):
            logger = MetricLogger(stream=io.StringIO(), json_file=tmp_path / "m.jsonl", hooks=[Fails()])
            logger.emit("close", {})
            logger.close()
        records = read_jsonl(tmp_path / "m.jsonl")
        errors = [(r["phase"], r.get("during")) for r in records if r["event"] == "hook_error"]
        assert errors[:2] == [("on_event", "close"), ("close", "close")]


class TestStagesCalledAsStructlogCallsThem:
    def test_every_shape_of_processor_runs_once_per_event(self, tmp_path: Path) -> None:
        """Processors of every callable shape (a function, a partial, a class instance with its own,
        an inherited or a static __call__, a builtin-backed one) run once per event, in order, with
        (logger, method_name, event_dict), as in a stock structlog chain."""
        seen: list[str] = []

        def function(logger: Any, method_name: str, event_dict: Any) -> Any:
            seen.append("function")
            event_dict["by_function"] = method_name
            return event_dict

        def tagged(tag: str, logger: Any, method_name: str, event_dict: Any) -> Any:
            seen.append(tag)
            event_dict["by_partial"] = tag
            return event_dict

        class Own:
            def __call__(self, logger: Any, method_name: str, event_dict: Any) -> Any:
                seen.append("own")
                event_dict["by_own"] = type(self).__name__
                return event_dict

        class Inherited(Own):
            pass

        class Static:
            @staticmethod
            def __call__(logger: Any, method_name: str, event_dict: Any) -> Any:
                seen.append("static")
                event_dict["by_static"] = True
                return event_dict

        stages = [function, functools.partial(tagged, "partial"), Own(), Inherited(), Static()]
        with MetricLogger(stream=io.StringIO(), json_file=tmp_path / "m.jsonl", processors=stages) as logger:
            logger.emit("a", {"x": 1})
            logger.emit("b", {"x": 2})
        assert seen == ["function", "partial", "own", "own", "static"] * 2
        first = read_jsonl(tmp_path / "m.jsonl")[0]
        assert (first["by_function"], first["by_partial"], first["by_own"], first["by_static"]) == (
            "info", "partial", "Inherited", True,
        )  # fmt: skip


class TestRankFilesKeepTheirSuffix:
    def test_rank_files_of_any_suffix_are_read_back(self, tmp_path: Path) -> None:
        """json_file="m.json": rank 1 writes m.rank1.json, and summarize/read_frames read both ranks
        (the reader listed *.rank<r>.jsonl only, and silently missed rank 1)."""
        from speedtronic.distributed import RankInfo
        from speedtronic.runs.frames import read_frames
        from speedtronic.runs.reader import read_records

        for rank in (0, 1):
            with MetricLogger(stream=io.StringIO(), json_file=tmp_path / "m.json",
                              rank=RankInfo(rank=rank, world_size=2), lead_rank=None) as logger:  # fmt: skip
                logger.emit("train_step", {"step": 1, "loss": float(rank)})
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m.rank1.json"]
        records = read_records(tmp_path, rank="all")
        assert sorted((r.rank, r.payload["loss"]) for r in records) == [(0, 0.0), (1, 1.0)]
        frame = read_frames(tmp_path, rank="all")["train_step"]
        assert sorted(frame["rank"].tolist()) == [0, 1]


class TestOriginComesFromTheLibrary:
    def test_a_mapping_hiding_the_note_key_from_iteration_cant_mark_its_record_as_own(
        self, tmp_path: Path
    ) -> None:
        """A mapping whose __iter__ hides _speedtronic while keys() shows it: the record is the user's,
        hooks get it, and no forged hook failure appears (it read as origin: speedtronic before)."""
        from collections.abc import Iterator, Mapping

        class Sly(Mapping[str, Any]):
            data: ClassVar[dict[str, Any]] = {"step": 1, "_speedtronic": {"origin": "speedtronic"}}

            def __getitem__(self, key: str) -> Any:
                return self.data[key]

            def __iter__(self) -> Iterator[str]:
                return iter(["step"])

            def __len__(self) -> int:
                return 1

            def keys(self) -> Any:
                return self.data.keys()

        seen: list[str] = []
        with MetricLogger(stream=io.StringIO(), json_file=tmp_path / "m.jsonl",
                          hooks=[lambda event, payload: seen.append(event)]) as logger:  # fmt: skip
            logger.emit("hook_error", Sly())
        (record,) = read_jsonl(tmp_path / "m.jsonl")
        assert record["_speedtronic"]["origin"] == "user"
        assert seen == ["hook_error"]


class TestReservedRank:
    def test_a_payload_rank_is_kept_apart_from_the_process_rank(self, tmp_path: Path) -> None:
        """A payload key rank (a LoRA rank) is payload_rank: the readers keep the record in a
        single-process run (they left it out as "rank 8" before), and a distributed record keeps its
        real rank."""
        from speedtronic.distributed import RankInfo
        from speedtronic.runs.reader import read_records

        with MetricLogger(stream=io.StringIO(), json_file=tmp_path / "one" / "m.jsonl") as logger:
            logger.emit("train_step", {"step": 1, "rank": 8})
        (record,) = read_records(tmp_path / "one")
        assert (record.rank, record.payload["payload_rank"]) == (0, 8)
        with MetricLogger(stream=io.StringIO(), json_file=tmp_path / "two" / "m.jsonl",
                          rank=RankInfo(rank=1, world_size=2), lead_rank=None) as logger:  # fmt: skip
            logger.emit("train_step", {"step": 1, "rank": 8, "world_size": 16})
        (written,) = read_jsonl(tmp_path / "two" / "m.rank1.jsonl")
        assert (written["rank"], written["world_size"]) == (1, 2)
        assert (written["payload_rank"], written["payload_world_size"]) == (8, 16)
