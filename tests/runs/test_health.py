"""Goodput, throughput and MFU read back from real runs of the reference trainer (`run_health`)."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from speedtronic.runs.health import RunHealth, run_health
from tests.helpers import run_records
from tests.runs.conftest import assert_one_line_error, speedtronic
from tests.training.test_run_dirs import ROOT, train, write_config
from tests.training.test_rundir import WAIT_AT, wait_for

pytest.importorskip("torch")


def _killed_at(tmp_path: Path, step: int, ready: str, *args: str) -> None:
    """`speedtronic train ARGS` paused inside ``step``, then SIGKILLed there."""
    hook = {"type": WAIT_AT, "event": "train_step", "step": step, "ready": ready, "go": "never"}
    config = write_config(
        tmp_path / f"{ready}.yaml",
        logging={"hooks": [hook]},
        train={"steps": 24, "checkpoint_every": 5, "eval_every": 10},
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "speedtronic", "train", "--no-progress", "--config", str(config)]
    process = subprocess.Popen(
        [*command, *args], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(tmp_path / ready, process)
        process.send_signal(signal.SIGKILL)
    finally:
        process.communicate(timeout=180)
    assert process.returncode == -signal.SIGKILL


@pytest.fixture(scope="module")
def killed_twice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 24-step run (checkpoints every 5) SIGKILLed in step 8, resumed, killed in 17, resumed to the end."""
    tmp_path = tmp_path_factory.mktemp("killed")
    _killed_at(tmp_path, 8, "ready1", "--run-dir", "r")
    _killed_at(tmp_path, 17, "ready2", "--run-dir", "r", "--resume")
    config = write_config(tmp_path / "end.yaml", train={"steps": 24, "checkpoint_every": 5, "eval_every": 10})
    done = train("--config", config, "--run-dir", "r", "--resume", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return tmp_path / "r"


class TestGoodput:
    def test_the_run_has_three_segments(self, killed_twice: Path) -> None:
        """The fixture is what it says: started at 0, resumed from steps 5 and 15."""
        starts = [r["start_step"] for r in run_records(killed_twice) if r["event"] == "train_start"]
        assert starts == [0, 5, 15]

    def test_the_parts_add_up_to_the_wall_time(self, killed_twice: Path) -> None:
        """The parts (productive, start-up, restarts, checkpoints, eval, data, other) sum to the wall time."""
        health = run_health(killed_twice)
        assert health.wall_s is not None
        parts = health.as_dict()["parts_s"]
        assert all(value >= 0 for value in parts.values()), parts
        assert math.isclose(sum(parts.values()), health.wall_s, rel_tol=0.01)

    def test_the_wall_time_is_first_start_to_last_record(self, killed_twice: Path) -> None:
        """Wall time: from the first logger's start (timestamp less elapsed_s) to the last record."""
        rows = run_records(killed_twice)
        stamp = [_seconds(r["timestamp"]) for r in rows]
        expected = stamp[-1] - (stamp[0] - rows[0]["elapsed_s"])
        assert run_health(killed_twice).wall_s == pytest.approx(expected, abs=1e-5)

    def test_steps_run_again_are_restart_time(self, killed_twice: Path) -> None:
        """Steps 6-8 and 16-17, recorded before the kills and again after: restart time, not productive."""
        health = run_health(killed_twice)
        rows = run_records(killed_twice)
        redone = [
            r["step"] for r in rows if r["event"] == "train_step" and r["step"] <= _highest_before(rows, r)
        ]
        assert sorted(redone) == [6, 7, 8, 16, 17]
        assert health.redone_steps == 5
        assert health.steps == 24
        assert health.restart_s >= _redone_time(rows) > 0

    def test_goodput_is_productive_over_wall(self, killed_twice: Path) -> None:
        """goodput = productive_s / wall_s; productive: the first runs' step times less data wait."""
        health = run_health(killed_twice)
        assert health.goodput == pytest.approx(health.productive_s / health.wall_s)  # type: ignore[operator]
        firsts: dict[int, dict[str, Any]] = {}
        for row in run_records(killed_twice):
            if row["event"] == "train_step":
                firsts.setdefault(row["step"], row)
        productive = sum(r["step_time_s"] - r["data_wait_s"] for r in firsts.values())
        assert health.productive_s == pytest.approx(productive)

    def test_checkpoint_and_eval_time_are_their_records(self, killed_twice: Path) -> None:
        """checkpoint_s sums every checkpoint's save_s; eval_s every eval's eval_s."""
        rows = run_records(killed_twice)
        health = run_health(killed_twice)
        assert health.checkpoint_s == pytest.approx(
            sum(r["save_s"] for r in rows if r["event"] == "checkpoint")
        )
        assert health.eval_s == pytest.approx(sum(r["eval_s"] for r in rows if r["event"] == "eval"))


class TestMfu:
    def test_mfu_is_the_formula_over_the_recorded_figures(self, killed_twice: Path) -> None:
        """mfu = flops_per_token * tokens_per_s / peak_flops (torchtitan's, a fraction), from records."""
        rows = run_records(killed_twice)
        health = run_health(killed_twice, peak_flops=2e12)
        (flops_per_token,) = {r["flops_per_token"] for r in rows if r["event"] == "train_start"}
        tokens = max(r["tokens"] for r in rows if r["event"] == "train_step")
        assert health.tokens_per_s == pytest.approx(tokens / (health.productive_s + health.data_wait_s))
        assert health.mfu == pytest.approx(flops_per_token * health.tokens_per_s / 2e12)

    def test_no_peak_on_a_cpu_no_mfu(self, killed_twice: Path) -> None:
        """A CPU run records no peak: MFU is not shown unless one is given."""
        assert run_health(killed_twice).mfu is None

    def test_a_recorded_peak_is_used(self, tmp_path: Path) -> None:
        """train.peak_flops in the config: the run's own records give its MFU."""
        config = write_config(tmp_path / "c.yaml", train={"steps": 3, "peak_flops": 1e12})
        assert train("--config", config, "--run-dir", "r", cwd=tmp_path).returncode == 0
        health = run_health(tmp_path / "r")
        assert health.peak_flops == 1e12
        assert health.mfu == pytest.approx(health.flops_per_token * health.tokens_per_s / 1e12)  # type: ignore[operator]


class TestSummarizeHealth:
    def test_json_carries_every_figure(self, killed_twice: Path) -> None:
        """summarize --health --json: each run's object has a health object equal to run_health's."""
        done = speedtronic(
            "summarize", killed_twice, "--health", "--json", "--peak-flops", "2e12", cwd=killed_twice
        )
        assert done.returncode == 0, done.stderr
        (row,) = orjson.loads(done.stdout)
        expected = run_health(killed_twice, peak_flops=2e12).as_dict()
        assert row["health"] == {**expected, "run": row["health"]["run"]}
        assert {"goodput", "mfu", "tokens_per_s", "median_step_s", "parts_s"} <= row["health"].keys()

    def test_the_table_names_the_parts(self, killed_twice: Path) -> None:
        """summarize --health prints goodput, each part, tokens/s, and no MFU on a CPU."""
        done = speedtronic("summarize", killed_twice, "--health", cwd=killed_twice)
        assert done.returncode == 0, done.stderr
        for part in (
            "goodput",
            "productive",
            "startup",
            "restart",
            "checkpoint",
            "eval",
            "data_wait",
            "other",
        ):
            assert part in done.stdout
        assert "MFU            - (no peak FLOP/s recorded or given)" in done.stdout

    @pytest.mark.parametrize("peak", ["0", "-1", "nan", "inf", "1e400"])
    def test_a_bad_peak_is_one_line(self, killed_twice: Path, peak: str) -> None:
        """--peak-flops 0, negative, nan or infinite (an MFU of 0% is no figure): one line naming the
        option, exit 2."""
        done = speedtronic("summarize", killed_twice, "--health", f"--peak-flops={peak}", cwd=killed_twice)
        assert_one_line_error(done, "--peak-flops", "positive, finite")


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _highest_before(rows: list[dict[str, Any]], row: dict[str, Any]) -> int:
    before = rows[: next(i for i, r in enumerate(rows) if r is row)]
    return max((r["step"] for r in before if r["event"] == "train_step"), default=0)


def _redone_time(rows: list[dict[str, Any]]) -> float:
    seen: set[int] = set()
    lost = 0.0
    for row in rows:
        if row["event"] == "train_step":
            if row["step"] in seen:
                lost += row["step_time_s"]
            seen.add(row["step"])
    return lost


class TestBreakdownPlot:
    def test_plot_breakdown_writes_a_bar_per_run(self, killed_twice: Path, tmp_path: Path) -> None:
        """plot --breakdown: a PNG of the runs' time parts; plot_breakdown returns the figures drawn."""
        from speedtronic.runs.breakdown import plot_breakdown

        done = speedtronic(
            "plot", killed_twice, killed_twice, "--breakdown", "-o", tmp_path / "b.png", cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        (drawn,) = plot_breakdown([killed_twice], tmp_path / "b.svg")
        assert drawn.as_dict() == run_health(killed_twice).as_dict()
        assert "productive" in (tmp_path / "b.svg").read_text()

    def test_a_bad_suffix_is_one_line(self, killed_twice: Path, tmp_path: Path) -> None:
        """plot --breakdown -o b.txt: one line naming the file, exit 2."""
        done = speedtronic("plot", killed_twice, "--breakdown", "-o", tmp_path / "b.txt", cwd=tmp_path)
        assert_one_line_error(done, "b.txt", ".png")


class TestWithoutTimingKeys:
    def test_a_run_without_step_times_has_no_goodput(self, tmp_path: Path) -> None:
        """A framework's run (loss and a rate, no step_time_s): no goodput, tokens/s the median rate."""
        from tests.runs.conftest import write_run

        rates = [100.0, 300.0, 200.0, 250.0, 150.0, 120.0, 180.0, 400.0]
        write_run(tmp_path / "m.jsonl", [("train_step", {"step": s, "loss": 1.0 / s, "tokens_per_s": r})
                                         for s, r in enumerate(rates, 1)])  # fmt: skip
        health = run_health(tmp_path / "m.jsonl", warmup_steps=2)
        assert health.goodput is None
        assert health.productive_s == 0
        assert health.tokens_per_s == 190.0  # the median of the rates after the warm-up
        assert health.final_loss == 1.0 / 8
        assert health.best_loss == 1.0 / 8


class TestTwoRecordsOfOneStep:
    def test_a_callbacks_second_record_of_a_step_is_not_a_step_done_again(self, tmp_path: Path) -> None:
        """Lightning's LearningRateMonitor logs its own train_step at each step before the step's timed
        record: the second record of a step in the same segment is not a restart's re-done step."""
        from tests.runs.conftest import write_run

        events: list[tuple[str, dict[str, Any]]] = [("train_start", {})]
        for step in range(1, 7):
            events.append(("train_step", {"step": step, "lr-Adam": 0.01}))
            events.append(("train_step", {"step": step, "loss": 1.0 / step, "step_time_s": 0.01}))
        write_run(tmp_path / "m.jsonl", events)
        health = run_health(tmp_path / "m.jsonl", warmup_steps=2)
        assert (health.steps, health.redone_steps, health.restart_s) == (6, 0, 0.0)
        assert health.step_times == [0.01] * 4  # each step once, after the warm-up


def _timed_health(
    tmp_path: Path, segments: list[tuple[float, list[tuple[str, float, dict[str, Any]]]]]
) -> RunHealth:
    """``run_health`` of a run's JSONL written by hand with exact times: per segment, when its logger
    started (seconds after 12:00:00) and its records as (event, seconds since that start, payload)."""
    path = tmp_path / "m.jsonl"
    with path.open("w") as out:
        for began, records in segments:
            for event, elapsed, payload in records:
                at = began + elapsed
                stamp = f"2026-01-01T12:{int(at // 60):02d}:{at % 60:09.6f}Z"
                line = {"event": event, **payload, "elapsed_s": elapsed, "timestamp": stamp}
                out.write(orjson.dumps(line).decode() + "\n")
    return run_health(path)


class TestACadence:
    """With `logging.every_steps: 20` (the default config's) the steps before a segment's first recorded
    step ran before it: they are steps, not start-up or restart time (and never counted twice)."""

    @staticmethod
    def _steps(first: int, last: int, began: float) -> list[tuple[str, float, dict[str, Any]]]:
        """Steps ``first``..``last`` of 50 ms each from ``began``, every 20th recorded."""
        timed = {"loss": 1.0, "step_time_s": 0.05}
        return [
            ("train_step", began + 0.05 * (step - first + 1), {"step": step, **timed})
            for step in range(first, last + 1)
            if step % 20 == 0
        ]

    def test_the_steps_before_the_first_recorded_one_are_not_start_up(self, tmp_path: Path) -> None:
        """Start-up ends when step 1 begins (0.1 s), not when step 20 does; nothing is left negative."""
        records = [("train_start", 0.1, {"start_step": 0}), *self._steps(1, 40, 0.1), ("train_end", 2.1, {})]
        health = _timed_health(tmp_path, [(0.0, records)])
        parts = health.as_dict()["parts_s"]
        assert parts["startup_s"] == pytest.approx(0.1, abs=1e-4)
        assert parts["productive_s"] == pytest.approx(2.0, abs=1e-4)
        assert parts["other_s"] == pytest.approx(0.0, abs=1e-4)
        assert health.goodput == pytest.approx(2.0 / 2.1, abs=1e-4)

    def test_a_resumed_segments_unrecorded_steps_are_not_restart_time(self, tmp_path: Path) -> None:
        """Killed after step 20's checkpoint; the restart begins 3 s in and resumes from step 20: the
        restart is the time from the killed segment's last record to step 21's start, 1.98 s."""
        first = [
            ("train_start", 0.1, {"start_step": 0}),
            *self._steps(1, 20, 0.1),
            ("checkpoint", 1.12, {"step": 20, "save_s": 0.02}),
        ]
        second = [("train_start", 0.1, {"start_step": 20}), *self._steps(21, 40, 0.1), ("train_end", 1.1, {})]
        parts = _timed_health(tmp_path, [(0.0, first), (3.0, second)]).as_dict()["parts_s"]
        assert parts["restart_s"] == pytest.approx(3.1 - 1.12, abs=1e-4)
        assert parts["productive_s"] == pytest.approx(2.0, abs=1e-4)
        assert parts["other_s"] == pytest.approx(0.0, abs=1e-4)

    def test_steps_run_again_under_a_cadence_are_every_step_not_each_record(self, tmp_path: Path) -> None:
        """Killed after step 60, resumed 5 s in from step 40: steps 41-60 (one record, step 60's) are
        run again, 20 steps of 50 ms in restart (was: 1 step and 0.05 s, the other 0.95 s in other)."""
        first = [("train_start", 0.1, {"start_step": 0}), *self._steps(1, 60, 0.1)]
        second = [
            ("train_start", 0.1, {"start_step": 40}),
            *self._steps(41, 100, 0.1),
            ("train_end", 3.1, {}),
        ]
        health = _timed_health(tmp_path, [(0.0, first), (5.0, second)])
        parts = health.as_dict()["parts_s"]
        assert health.redone_steps == 20
        assert parts["restart_s"] == pytest.approx(2.0 + 1.0, abs=1e-4)  # 3.1 -> 5.1, then steps 41-60
        assert parts["productive_s"] == pytest.approx(5.0, abs=1e-4)  # steps 1-100 once
        assert parts["other_s"] == pytest.approx(0.0, abs=1e-4)

    def test_the_warm_up_is_the_segments_first_steps_not_its_first_records(self, tmp_path: Path) -> None:
        """Steps 1-100, every 20th recorded: the warm-up (steps 1-5) was not recorded, so every recorded
        step's time counts, and a resumed segment's from its start_step on (was: the first 5 records,
        here every one, so no step time at all)."""
        first = [
            ("train_start", 0.1, {"start_step": 0}),
            *[("train_step", 0.1 * step, {"step": step, "loss": 1.0, "step_time_s": step / 1000})
              for step in (20, 40, 60, 80, 100)],
        ]  # fmt: skip
        second = [
            ("train_start", 0.1, {"start_step": 100}),
            ("train_step", 0.2, {"step": 104, "loss": 1.0, "step_time_s": 0.5}),  # warm-up after the resume
            ("train_step", 0.3, {"step": 120, "loss": 1.0, "step_time_s": 0.12}),
        ]
        health = _timed_health(tmp_path, [(0.0, first), (20.0, second)])
        assert health.step_times == [0.02, 0.04, 0.06, 0.08, 0.1, 0.12]
        assert health.median_step_s == pytest.approx(0.07)

    def test_a_slow_recorded_step_never_starts_the_steps_before_train_start(self, tmp_path: Path) -> None:
        """A recorded step far slower than the others (1 s of 20 steps' 1 s) can't put step 1 before the
        run's train_start: start-up is never negative."""
        records = [
            ("train_start", 0.1, {"start_step": 0}),
            ("train_step", 1.1, {"step": 20, "loss": 1.0, "step_time_s": 0.5}),
            ("train_end", 1.1, {}),
        ]
        parts = _timed_health(tmp_path, [(0.0, records)]).as_dict()["parts_s"]
        assert parts["startup_s"] == pytest.approx(0.1, abs=1e-4)

    def test_recorded_steps_slower_than_the_others_never_pass_the_time_the_steps_had(
        self, tmp_path: Path
    ) -> None:
        """DiLoCo with `outer_every: 20` under `every_steps: 20`: each recorded step is an outer boundary
        (100 ms) and the 19 before it 10 ms each. Counting each unrecorded step at the recorded ones'
        mean made goodput 548%; the steps are given no more than the 0.58 s they ran in, an eval's
        time in between left out."""
        records = [
            ("train_start", 0.1, {"start_step": 0}),
            ("train_step", 0.39, {"step": 20, "loss": 1.0, "step_time_s": 0.1}),
            ("eval", 0.44, {"step": 20, "eval_s": 0.05}),
            ("train_step", 0.73, {"step": 40, "loss": 1.0, "step_time_s": 0.1}),
            ("train_end", 0.73, {}),
        ]
        health = _timed_health(tmp_path, [(0.0, records)])
        parts = health.as_dict()["parts_s"]
        assert parts["productive_s"] == pytest.approx(0.58, abs=1e-4)
        assert parts["eval_s"] == pytest.approx(0.05, abs=1e-4)
        assert parts["other_s"] == pytest.approx(0.0, abs=1e-4)
        assert health.goodput == pytest.approx(0.58 / 0.73, abs=1e-4)
