"""TensorboardHook against the real tensorboard: every test reads the event file back."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from speedtronic.integrations import TensorboardHook
from speedtronic.profiling import MetricLogger


def event_files(log_dir: Path) -> list[Path]:
    return sorted(log_dir.glob("events.out.tfevents.*"))


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in ``log_dir`` by tag, as (step, value), read with TensorBoard's own reader."""
    accumulator = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: [(point.step, point.value) for point in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "tb"


class TestTensorboardHook:
    def test_round_trip_through_a_metric_logger(self, log_dir: Path) -> None:
        """Numbers land under <event>/<key> at the payload's step; cadence and close apply."""
        with MetricLogger(stream=io.StringIO(), every_steps=2) as logger:
            logger.hooks.append(TensorboardHook(log_dir))
            logger.emit("train_start", {"target_step": 4, "device": "cpu"})
            for step in range(1, 5):
                logger.emit("train_step", {"step": step, "loss": torch.tensor(1.0 / step), "lr": 0.25})
            logger.emit("checkpoint", {"step": 4, "path": "ckpt/step_4.pt"})

        points = scalars(log_dir)
        assert points["train_step/loss"] == [(2, 0.5), (4, 0.25)]
        assert points["train_step/lr"] == [(2, 0.25), (4, 0.25)]
        assert points["train_step/step"] == [(2, 2.0), (4, 4.0)]
        assert points["train_start/target_step"] == [(0, 4.0)]
        assert [step for step, _ in points["checkpoint/step"]] == [4]
        assert {step for step, _ in points["train_step/elapsed_s"]} == {2, 4}
        assert "train_start/device" not in points
        assert "checkpoint/path" not in points
        assert len(event_files(log_dir)) == 1

    @pytest.mark.parametrize("process", [False, True], ids=["in-process", "writer-process"])
    def test_numbers_are_written_and_everything_else_skipped(self, log_dir: Path, process: bool) -> None:
        """ints, floats, 0-d tensors and numpy scalars are scalars; bools, strings, lists are not.

        The same with the writer process, where the scalars cross the pipe and the child builds the
        records: NaN stays NaN and an int beyond 64 bits still arrives, as a float32.
        """
        hook = TensorboardHook(log_dir, process=process)
        hook.on_event(
            "eval",
            {
                "step": 7,
                "int": 3,
                "float": 1.5,
                "tensor": torch.tensor(2.5),
                "numpy": np.float32(0.75),
                "nan": float("nan"),
                "huge": 2**70,
                "flag": True,
                "name": "val",
                "history": [1.0, 2.0],
                "none": None,
            },
        )
        hook.close()

        points = scalars(log_dir)
        numbers = ("step", "int", "float", "tensor", "numpy", "nan", "huge")
        assert set(points) == {f"eval/{key}" for key in numbers}
        assert points["eval/int"] == [(7, 3.0)]
        assert points["eval/tensor"] == [(7, 2.5)]
        assert points["eval/numpy"] == [(7, 0.75)]
        assert np.isnan(points["eval/nan"][0][1])
        assert points["eval/huge"] == [(7, float(np.float32(2**70)))]

    def test_events_without_a_step_count_per_event_name(self, log_dir: Path) -> None:
        """Without an integer step, each event name has its own counter from 0."""
        hook = TensorboardHook(log_dir)
        for n in range(3):
            hook.on_event("outer_step", {"outer_step": 10 + n, "step": "not an int"})
            if n < 2:
                hook.on_event("delta_uploaded", {"bytes": 100 * n})
        hook.close()

        points = scalars(log_dir)
        assert points["outer_step/outer_step"] == [(0, 10.0), (1, 11.0), (2, 12.0)]
        assert points["delta_uploaded/bytes"] == [(0, 0.0), (1, 100.0)]

    def test_one_event_record_per_emitted_event(self, log_dir: Path) -> None:
        """All of an event's scalars share one Event record; an event without numbers writes none."""
        hook = TensorboardHook(log_dir)
        hook.on_event("train_step", {"step": 1, "loss": 0.5, "lr": 0.1, "tokens_per_s": 900.0})
        hook.on_event("note", {"text": "no numbers here"})
        hook.on_event("train_step", {"step": 2, "loss": 0.4, "lr": 0.1, "tokens_per_s": 950.0})
        hook.close()

        [path] = event_files(log_dir)
        records = [e for e in EventFileLoader(str(path)).Load() if e.HasField("summary")]
        assert [(e.step, len(e.summary.value)) for e in records] == [(1, 4), (2, 4)]

    def test_flush_makes_points_readable_before_close(self, log_dir: Path) -> None:
        """flush() blocks until what was written is in the file, with a long flush interval."""
        hook = TensorboardHook(log_dir, flush_secs=3600)
        hook.on_event("train_step", {"step": 1, "loss": 0.5})
        hook.flush()
        try:
            assert scalars(log_dir)["train_step/loss"] == [(1, 0.5)]
        finally:
            hook.close()

    def test_close_is_idempotent_and_writing_after_it_creates_no_file(self, log_dir: Path) -> None:
        """After close: a second close and a flush do nothing; on_event raises; still one file."""
        hook = TensorboardHook(log_dir)
        hook.on_event("train_step", {"step": 1, "loss": 0.5})
        hook.close()
        hook.close()
        hook.flush()
        with pytest.raises(RuntimeError, match="is closed"):
            hook.on_event("train_step", {"step": 2, "loss": 0.4})

        assert len(event_files(log_dir)) == 1
        assert scalars(log_dir)["train_step/loss"] == [(1, 0.5)]

    def test_metric_logger_close_closes_the_hook(self, log_dir: Path) -> None:
        """MetricLogger.close() closes the hook once, and the logger counts nothing as failed."""
        hook = TensorboardHook(log_dir)
        logger = MetricLogger(stream=io.StringIO(), hooks=[hook])
        logger.emit("train_step", {"step": 3, "loss": 0.5})
        logger.close()
        with pytest.raises(RuntimeError, match="is closed"):
            hook.on_event("train_step", {"step": 4, "loss": 0.4})
        assert dict(logger.hook_errors) == {}
        assert scalars(log_dir)["train_step/loss"] == [(3, 0.5)]

    def test_each_hook_has_its_own_file(self, log_dir: Path) -> None:
        """Two hooks on one directory write two files; TensorBoard reads both."""
        first, second = TensorboardHook(log_dir), TensorboardHook(log_dir)
        first.on_event("train_step", {"step": 1, "loss": 0.5})
        second.on_event("train_step", {"step": 2, "loss": 0.25})
        first.close()
        second.close()

        assert len(event_files(log_dir)) == 2
        assert sorted(scalars(log_dir)["train_step/loss"]) == [(1, 0.5), (2, 0.25)]

    @pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
    def test_a_killed_run_keeps_what_was_written_a_flush_interval_ago(self, log_dir: Path) -> None:
        """SIGKILL without close: every point older than the default flush_secs (2 s) is on disk."""
        script = textwrap.dedent(
            f"""
            import os, signal, sys, time
            from speedtronic.integrations import TensorboardHook
            hook = TensorboardHook({str(log_dir)!r})
            for step in range(1, 101):
                hook.on_event("train_step", {{"step": step, "loss": 1.0 / step}})
            time.sleep(2.5)
            os.kill(os.getpid(), signal.SIGKILL)
            """
        )
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
        assert result.returncode == -signal.SIGKILL, result.stderr.decode()

        steps = [step for step, _ in scalars(log_dir)["train_step/loss"]]
        assert steps == list(range(1, 101))


class TestDefaults:
    def test_default_log_dir_is_runs_tensorboard(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """TensorboardHook() writes under ./runs/tensorboard."""
        monkeypatch.chdir(tmp_path)
        hook = TensorboardHook()
        hook.close()
        assert hook.log_dir == "runs/tensorboard"
        assert len(event_files(tmp_path / "runs" / "tensorboard")) == 1


class TestWriterProcess:
    """TensorboardHook(process=True): the same file, written by a child interpreter."""

    def test_same_points_as_the_in_process_writer(self, tmp_path: Path) -> None:
        """Both writers give EventAccumulator the same tags, steps and values; one file each."""
        events = [("train_step", {"step": s, "loss": 1.0 / s, "lr": 0.1}) for s in range(1, 30)]
        events.append(("outer_step", {"outer_step": 1, "deltas_included": 2}))
        for process in (False, True):
            with MetricLogger(stream=io.StringIO(), hooks=[TensorboardHook(tmp_path / str(process),
                                                                           process=process)]) as lg:
                for event, payload in events:
                    lg.emit(event, {**payload, "elapsed_s": 0.0})
        assert scalars(tmp_path / "True") == scalars(tmp_path / "False")
        assert scalars(tmp_path / "True")["train_step/loss"][0] == (1, 1.0)
        assert len(event_files(tmp_path / "True")) == 1

    def test_flush_makes_points_readable_before_close(self, log_dir: Path) -> None:
        hook = TensorboardHook(log_dir, process=True, flush_secs=60)
        hook.on_event("train_step", {"step": 3, "loss": 0.5})
        hook.flush()
        assert scalars(log_dir)["train_step/loss"] == [(3, 0.5)]
        hook.close()
        hook.close()  # idempotent
        with pytest.raises(RuntimeError, match="closed"):
            hook.on_event("train_step", {"step": 4, "loss": 0.4})
        assert len(event_files(log_dir)) == 1

    def test_a_killed_training_process_keeps_every_point_it_sent(self, log_dir: Path) -> None:
        """SIGKILL the parent: the writer reads the end of its pipe and closes the file whole."""
        script = textwrap.dedent(
            f"""
            import os, signal, sys
            from speedtronic.integrations import TensorboardHook
            hook = TensorboardHook({str(log_dir)!r}, process=True, flush_secs=60)
            for step in range(100):
                hook.on_event("train_step", {{"step": step, "loss": float(step)}})
            print("sent", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
            """
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert done.returncode == -signal.SIGKILL, done.stderr
        assert "sent" in done.stdout
        for _ in range(100):  # the orphaned writer finishes on its own
            points = scalars(log_dir).get("train_step/loss", [])
            if len(points) == 100:
                break
            __import__("time").sleep(0.1)
        assert [step for step, _ in points] == list(range(100))

    def test_the_users_main_module_is_not_run_again(self, tmp_path: Path) -> None:
        """A script without a __main__ guard runs once (multiprocessing's spawn would rerun it)."""
        marker = tmp_path / "runs.txt"
        script = tmp_path / "train.py"
        script.write_text(textwrap.dedent(
            f"""
            from speedtronic.integrations import TensorboardHook
            with open({str(marker)!r}, "a") as f:
                f.write("ran\\n")
            hook = TensorboardHook({str(tmp_path / "tb")!r}, process=True)
            hook.on_event("train_step", {{"step": 1, "loss": 1.0}})
            hook.close()
            """
        ))
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert marker.read_text() == "ran\n"


def test_a_writer_process_that_cant_start_leaves_nothing_running(tmp_path: Path) -> None:
    """A log_dir that is a file: the error names the writer process, and no child is left behind."""
    import gc
    import warnings

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        with pytest.raises(RuntimeError, match="TensorBoard writer process failed at start"):
            TensorboardHook(blocker, process=True)
        gc.collect()
