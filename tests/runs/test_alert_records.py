"""The alerts a run recorded, read back: ``summarize`` counts them per rule (and rank), ``--json``
lists them, ``plot`` marks them on the loss and rate panels. Runs written by a real MetricLogger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from speedtronic.runs import RunClock, read_records, summary
from speedtronic.runs.alert_records import AlertMark
from speedtronic.runs.plot import plot_runs
from speedtronic.runs.summary import format_summaries, summarize_run
from tests.runs.conftest import CLI, write_run


def alert(
    rule: str, step: int | None, severity: str = "warning", key: str | None = "loss", **more: Any
) -> Any:
    """An ``alert`` event as the alert rules emit it (the shared contract)."""
    payload = {"rule": rule, "severity": severity, "key": key, "step": step, "value": 9.5, "threshold": 4.0}
    return ("alert", {**payload, "message": f"{rule} at step {step}", **more})


def row(table: str, label: str) -> str | None:
    """The cells of the table's row ``label`` (padding stripped), or None without one."""
    for line in table.splitlines():
        if line.startswith(label + "  "):
            return line[len(label) :].strip()
    return None


def steps(first: int, last: int, **more: Any) -> list[Any]:
    return [
        ("train_step", {"step": s, "loss": 1.0 / s, "samples_per_s": 100.0, **more})
        for s in range(first, last)
    ]


@pytest.fixture
def two_ranks(tmp_path: Path) -> Path:
    """A run of two ranks: rank 0 alerts twice on a spike and once on NaN, rank 1 once on throughput."""
    run = tmp_path / "run"
    rank_0 = [
        ("train_start", {"start_step": 0, "target_step": 12}),
        *steps(1, 6),
        alert("spike", 5),
        *steps(6, 10),
        alert("spike", 9),
        alert("non_finite", 11, severity="error"),
        ("train_end", {"step": 11, "final_loss": 0.1}),
    ]
    write_run(run / "metrics.jsonl", [(event, {**payload, "rank": 0}) for event, payload in rank_0])
    rank_1 = [*steps(1, 8), alert("throughput_drop", 7, key="samples_per_s")]
    write_run(run / "metrics.rank1.jsonl", [(event, {**payload, "rank": 1}) for event, payload in rank_1])
    return run


class TestSummarize:
    def test_alerts_are_counted_per_rule_with_their_first_and_last_step(self, two_ranks: Path) -> None:
        """Rank 0's alerts by rule, in the order first met: count, steps, the worst severity."""
        got = summarize_run(two_ranks)
        assert got.alerts.as_dict() == [
            {"rank": 0, "rule": "spike", "count": 2, "first_step": 5, "last_step": 9, "severity": "warning",
             "last_message": "spike at step 9"},
            {"rank": 0, "rule": "non_finite", "count": 1, "first_step": 11, "last_step": 11,
             "severity": "error", "last_message": "non_finite at step 11"},
        ]  # fmt: skip
        assert row(format_summaries([got]), "alerts") == "spike 2 (steps 5-9), non_finite 1 (step 11, error)"

    def test_with_rank_all_each_rank_has_its_row(self, two_ranks: Path) -> None:
        """--rank all: a row per rank that alerted, each rank's rules in it; '-' for a run without."""
        got = summarize_run(two_ranks, rank="all")
        table = format_summaries([got])
        assert row(table, "alerts rank 0") == "spike 2 (steps 5-9), non_finite 1 (step 11, error)"
        assert row(table, "alerts rank 1") == "throughput_drop 1 (step 7)"
        assert [(one["rank"], one["rule"]) for one in got.as_dict()["alerts"]] == [
            (0, "spike"), (0, "non_finite"), (1, "throughput_drop"),
        ]  # fmt: skip

    def test_one_other_ranks_alerts_are_named_by_rank(self, two_ranks: Path) -> None:
        """--rank 1: rank 1's alerts alone, in a row that says whose they are."""
        table = format_summaries([summarize_run(two_ranks, rank=1)])
        assert row(table, "alerts rank 1") == "throughput_drop 1 (step 7)"
        assert row(table, "alerts") is None

    def test_a_run_without_alerts_has_no_alert_row(self, tmp_path: Path) -> None:
        """No alert record: no row (the table is as before), and an empty list in --json."""
        write_run(tmp_path / "m.jsonl", steps(1, 4))
        got = summarize_run(tmp_path / "m.jsonl")
        assert not any(line.startswith("alerts") for line in format_summaries([got]).splitlines())
        assert got.as_dict()["alerts"] == []

    @pytest.mark.parametrize("workers", [1, 2])
    def test_pieces_merge_to_the_one_pass_count(
        self, two_ranks: Path, workers: int, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A file cut a line a piece (in worker processes or not): the same alerts as one pass."""
        whole = summarize_run(two_ranks, rank="all").as_dict()["alerts"]
        monkeypatch.setattr(summary, "PIECE_BYTES", 1)
        assert summarize_run(two_ranks, rank="all", workers=workers).as_dict()["alerts"] == whole

    def test_the_cli_shows_them_and_json_lists_them(self, two_ranks: Path, cli: CLI) -> None:
        """speedtronic summarize RUN: the alerts row; --json --rank all: the list with fixed keys."""
        table = cli("summarize", two_ranks)
        assert table.returncode == 0, table.stderr
        assert "spike 2 (steps 5-9), non_finite 1 (step 11, error)" in table.stdout
        listed = cli("summarize", two_ranks, "--json", "--rank", "all")
        alerts = json.loads(listed.stdout)[0]["alerts"]
        assert [(one["rank"], one["rule"], one["count"]) for one in alerts] == [
            (0, "spike", 2), (0, "non_finite", 1), (1, "throughput_drop", 1),
        ]  # fmt: skip


class TestPlot:
    def test_alerts_are_marked_on_the_loss_and_rate_panels(self, two_ranks: Path, tmp_path: Path) -> None:
        """A dotted line at each alert's step on the loss and rate panels; not on lr."""
        out = tmp_path / "run.svg"
        result = plot_runs([two_ranks], out, keys=["loss", "lr", "samples_per_s"], labels=["r"])
        assert result.alerts == [
            AlertMark(5.0, "spike", "warning", "loss", 0, "r"),
            AlertMark(9.0, "spike", "warning", "loss", 0, "r"),
            AlertMark(11.0, "non_finite", "error", "loss", 0, "r"),
        ]
        svg = out.read_text()
        assert svg.count('id="alert-spike-5"') == 2  # the loss panel and the rate panel
        assert svg.count('id="alert-non_finite-11"') == 2
        assert "alert (error)" in svg  # in the legend

    def test_every_ranks_alerts_are_marked_with_rank_all(self, two_ranks: Path, tmp_path: Path) -> None:
        """--rank all: rank 1's throughput alert is marked too, on the rate panel and the loss panel."""
        out = tmp_path / "run.svg"
        result = plot_runs([two_ranks], out, keys=["loss", "samples_per_s"], rank="all", labels=["r"])
        assert [(mark.rank, mark.rule) for mark in result.alerts][-1] == (1, "throughput_drop")
        assert out.read_text().count('id="alert-throughput_drop-7"') == 2

    def test_against_time_an_alert_is_at_its_records_time(self, two_ranks: Path, tmp_path: Path) -> None:
        """x=elapsed_s: the mark is at the alert record's time since the run started (RunClock)."""
        clock = RunClock()
        times = [clock.add(record) for record in read_records(two_ranks)]
        events = [record.event for record in read_records(two_ranks)]
        expected = [at for at, event in zip(times, events, strict=True) if event == "alert"]
        result = plot_runs([two_ranks], tmp_path / "t.png", keys=["loss"], x="elapsed_s")
        assert [mark.x for mark in result.alerts] == expected
        assert len(expected) == 3

    def test_the_cli_plot_marks_them(self, two_ranks: Path, cli: CLI, tmp_path: Path) -> None:
        """speedtronic plot RUN -o run.svg: the markers are in the figure."""
        done = cli("plot", two_ranks, "-o", tmp_path / "cli.svg")
        assert done.returncode == 0, done.stderr
        assert 'id="alert-spike-9"' in (tmp_path / "cli.svg").read_text()
