"""Alerts inside emit: the alert record is written and delivered right after the record that raised it."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from speedtronic.alerts import Alert, CheckAlerts, NonFinite, Spike, Threshold, default_rules
from speedtronic.chain import build_processors
from speedtronic.distributed import RankInfo
from speedtronic.events import Event, level_for
from speedtronic.processors.validate import payload_problems
from speedtronic.profiling import MetricLogger
from tests.helpers import read_jsonl

FIXED = 1_767_268_800.25  # 2026-01-01T12:00:00.25Z


class Journal:
    """A hook journaling every call: (event, rule or step)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def __call__(self, event: str, payload: Mapping[str, Any]) -> None:
        self.calls.append((event, payload.get("rule", payload.get("step"))))


class TestInsideEmit:
    def test_alert_follows_its_record_in_text_jsonl_and_hooks(self, tmp_path: Path) -> None:
        """The NaN step, then its alert: in the text log, the JSONL and the hooks, same order."""
        text, journal = io.StringIO(), Journal()
        with MetricLogger(stream=text, json_file=tmp_path / "m.jsonl", hooks=[journal],
                          alerts=default_rules(), clock=lambda: FIXED) as logger:  # fmt: skip
            logger.emit("train_step", {"step": 1, "loss": 2.0})
            logger.emit("train_step", {"step": 2, "loss": math.nan})
            assert journal.calls[-1] == ("alert", "non_finite")  # delivered before emit returned
            logger.emit("train_step", {"step": 3, "loss": math.nan})
        assert journal.calls == [
            ("train_step", 1),
            ("train_step", 2),
            ("alert", "non_finite"),
            ("train_step", 3),
        ]
        lines = text.getvalue().splitlines()
        assert lines[2].startswith(
            "2026-01-01 12:00:00 | ERROR | alert rule=non_finite severity=error key=loss step=2 value=nan "
            'threshold=None message="non-finite loss (nan) in train_step at step 2" keys="[\'loss\']"'
        )
        records = read_jsonl(tmp_path / "m.jsonl")
        assert [r["event"] for r in records] == ["train_step", "train_step", "alert", "train_step"]
        alert = records[2]
        assert {k: alert[k] for k in ("rule", "severity", "key", "step", "value", "threshold", "keys")} == {
            "rule": "non_finite", "severity": "error", "key": "loss", "step": 2, "value": None,
            "threshold": None, "keys": ["loss"],
        }  # fmt: skip
        assert alert["_speedtronic"]["non_finite"]["nan"] == ["/value"]  # the NaN, restorable

    def test_the_record_level_is_the_severity(self, tmp_path: Path) -> None:
        """A warning alert is a WARNING line; below the text threshold it is in the JSONL only."""
        text = io.StringIO()
        with MetricLogger(stream=text, level="ERROR", json_file=tmp_path / "m.jsonl",
                          alerts=[Threshold("loss", above=1)]) as logger:  # fmt: skip
            logger.emit("train_step", {"step": 1, "loss": 5.0})
        assert text.getvalue() == ""
        assert [r["event"] for r in read_jsonl(tmp_path / "m.jsonl")] == ["train_step", "alert"]
        assert level_for(Event.ALERT) == "warning"

    def test_the_payload_matches_the_catalog(self) -> None:
        """An alert's payload has no problem against AlertPayload."""
        payload = Alert("spike", "warning", "loss", 3, 9.0, 4.0, "m", {"window": 5, "mean": 1.0}).payload()
        assert payload_problems("alert", payload) == []

    def test_skipped_steps_never_reach_the_rules(self) -> None:
        """The cadence runs first: a NaN on a skipped step raises nothing."""
        journal = Journal()
        with MetricLogger(
            stream=io.StringIO(), every_steps=2, hooks=[journal], alerts=[NonFinite()]
        ) as logger:
            logger.emit("train_step", {"step": 1, "loss": math.nan})
            logger.emit("train_step", {"step": 2, "loss": 1.0})
        assert journal.calls == [("train_step", 2)]

    def test_every_rank_alerts_in_its_own_file_with_its_rank(self, tmp_path: Path) -> None:
        """Rank 1 (no hooks, JSONL only) writes its alert with rank and world_size."""
        with MetricLogger(stream=io.StringIO(), json_file=tmp_path / "m.jsonl", rank=RankInfo(1, 2),
                          alerts=[NonFinite()]) as logger:  # fmt: skip
            logger.emit("train_step", {"step": 1, "loss": math.inf})
        alert = read_jsonl(tmp_path / "m.rank1.jsonl")[1]
        assert (alert["event"], alert["rank"], alert["world_size"], alert["step"]) == ("alert", 1, 2, 1)

    def test_without_rules_the_chain_has_no_alert_stage(self) -> None:
        """No alerts= (or alerts=[]): nothing runs, the chain lists no CheckAlerts."""
        for alerts in (None, []):
            with MetricLogger(stream=io.StringIO(), alerts=alerts) as logger:
                assert logger.chain.alerts is None
                assert not any(isinstance(p, CheckAlerts) for p in logger.processors)
        with MetricLogger(stream=io.StringIO(), alerts=[Spike()]) as logger:
            assert logger.processors[-2] is logger.chain.alerts  # just before the dispatch

    def test_a_rule_of_the_users_in_a_few_lines(self, tmp_path: Path) -> None:
        """A class with name and check(record) is all a rule is."""

        class LossAbove:
            name = "loss_above"

            def check(self, record: Mapping[str, Any]) -> list[Alert]:
                loss = record.get("loss")
                if isinstance(loss, float) and loss > 10:
                    return [Alert(self.name, "error", "loss", record.get("step"), loss, 10.0, "loss > 10")]
                return []

        with MetricLogger(
            stream=io.StringIO(), json_file=tmp_path / "m.jsonl", alerts=[LossAbove()]
        ) as logger:
            logger.emit("train_step", {"step": 1, "loss": 11.0})
        assert read_jsonl(tmp_path / "m.jsonl")[1]["rule"] == "loss_above"


class TestStockChain:
    def test_on_alert_gets_each_alerts_fields(self) -> None:
        """In your own structlog chain, CheckAlerts hands each alert's fields to on_alert."""
        seen: list[dict[str, Any]] = []
        stages = [
            *build_processors(text=None),
        ]
        stages.insert(-1, CheckAlerts([NonFinite()], on_alert=seen.append))
        log = structlog.wrap_logger(structlog.ReturnLogger(), processors=stages)
        log.info("train_step", step=4, loss=math.nan)
        assert [(f["event"], f["rule"], f["step"]) for f in seen] == [("alert", "non_finite", 4)]


class TestCounts:
    def test_counts_per_rule_first_and_last_step_and_the_worst_severity(self) -> None:
        """`CheckAlerts.counts`: each rule's alerts so far, as `speedtronic train`'s closing summary
        shows them; called directly, as a processor would be."""
        check = CheckAlerts([NonFinite(), Threshold("loss", above=5.0, cooldown=0)])
        for step, loss in [(1, 1.0), (2, 6.0), (3, 1.0), (4, math.inf), (5, 7.0)]:
            check(None, "info", {"event": "train_step", "step": step, "loss": loss})
        assert list(check.counts) == ["threshold", "non_finite"]  # the order each first fired
        threshold, non_finite = check.counts["threshold"], check.counts["non_finite"]
        assert (threshold.count, threshold.first_step, threshold.last_step) == (2, 2, 5)
        assert (non_finite.count, non_finite.first_step, non_finite.severity) == (1, 4, "error")
        assert check.raised == 3

    def test_a_chain_that_raised_nothing_counts_nothing(self) -> None:
        check = CheckAlerts(default_rules())
        log = structlog.wrap_logger(structlog.ReturnLogger(), processors=[check])
        log.info("train_step", step=1, loss=1.0)
        assert check.counts == {}
