"""TensorboardHook against the real tensorboard: every test reads the event file back."""

from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from speedtronic.integrations import TensorboardHook, TensorboardWarning
from speedtronic.profiling import MetricLogger
from tests.helpers import read_jsonl, tensorboard_scalars


def event_files(log_dir: Path) -> list[Path]:
    return sorted(log_dir.glob("events.out.tfevents.*"))


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "tb"


TRAIN_STEP = {
    "step": 2,
    "loss": 0.5,
    "lr": 0.25,
    "grad_norm": 1.5,
    "samples_per_s": 100.0,
    "tokens_per_s": 1600.0,
    "samples": 64,
    "tokens": 1024,
    "microbatches": 1,
    "memory_bytes": 4096,
}


class TestTagSet:
    def test_the_default_writes_every_number_of_every_event(self, log_dir: Path) -> None:
        """Every int and float of every event (keys the hook never heard of too), step as the x-axis;
        strings and bools skipped; elapsed_s and the one-off train_start charted not at all."""
        with MetricLogger(stream=io.StringIO()) as logger:
            logger.hooks.append(TensorboardHook(log_dir))
            logger.emit(
                "train_start",
                {
                    "start_step": 0,
                    "target_step": 4,
                    "device": "cpu",
                    "precision": "fp32",
                    "grad_accum": 1,
                    "parameters": 1000,
                },
            )
            logger.emit(
                "train_step", {**TRAIN_STEP, "loss": torch.tensor(0.5), "epoch": 1, "learning_rate": 0.001}
            )
            logger.emit("checkpoint", {"step": 2, "path": "ckpt/step_2.pt", "save_s": 0.1})
            logger.emit("eval", {"step": 2, "val_loss": 0.75, "split": "val", "best": True})

        points = tensorboard_scalars(log_dir)
        assert set(points) == {
            *(f"train_step/{key}" for key in TRAIN_STEP if key != "step"),
            "train_step/epoch",
            "train_step/learning_rate",
            "checkpoint/save_s",
            "eval/val_loss",
        }
        assert points["train_step/loss"] == [(2, 0.5)]
        assert points["train_step/epoch"] == [(2, 1.0)]
        assert points["train_step/learning_rate"] == [(2, pytest.approx(0.001))]
        assert points["eval/val_loss"] == [(2, 0.75)]
        assert len(event_files(log_dir)) == 1

    def test_skip_is_the_opt_out_list(self, log_dir: Path) -> None:
        """skip= names keys never written where every number is; explicit key lists ignore it."""
        hook = TensorboardHook(
            log_dir,
            skip={"step", "elapsed_s", "memory_bytes"},
            events={"checkpoint": ["save_s", "elapsed_s"], "*": None},
        )
        hook.on_event("train_step", {**TRAIN_STEP, "elapsed_s": 1.0})
        hook.on_event("checkpoint", {"step": 2, "save_s": 0.5, "elapsed_s": 1.5})
        hook.close()
        points = tensorboard_scalars(log_dir)
        assert set(points) == {
            *(f"train_step/{key}" for key in TRAIN_STEP if key not in ("step", "memory_bytes")),
            "checkpoint/save_s",
            "checkpoint/elapsed_s",
        }

    def test_tags_of_different_events_never_collide(self, log_dir: Path) -> None:
        """Event eval with key val/loss and event eval/val with key loss: two tags (the event's / escaped)."""
        hook = TensorboardHook(log_dir)
        hook.on_event("eval", {"step": 1, "val/loss": 0.5})
        hook.on_event("eval/val", {"step": 1, "loss": 0.25})
        hook.on_event("100%", {"step": 1, "done": 1})
        hook.on_event("100%2F", {"step": 1, "done": 2})
        hook.close()
        assert tensorboard_scalars(log_dir) == {
            "eval/val/loss": [(1, 0.5)],
            "eval%2Fval/loss": [(1, 0.25)],
            "100%25/done": [(1, 1.0)],
            "100%252F/done": [(1, 2.0)],
        }

    def test_events_chooses_exactly_what_is_written(self, log_dir: Path) -> None:
        """events={"train_step": ["loss"], "eval": None}: those keys, every number of eval, nothing else."""
        hook = TensorboardHook(log_dir, events={"train_step": ["loss"], "eval": None})
        hook.on_event("train_step", TRAIN_STEP)
        hook.on_event("eval", {"step": 2, "val_loss": 0.75, "accuracy": 0.5, "elapsed_s": 3.0})
        hook.on_event("my_event", {"step": 2, "value": 1.0})
        hook.close()
        assert set(tensorboard_scalars(log_dir)) == {"train_step/loss", "eval/val_loss", "eval/accuracy"}


class TestTensorboardHook:
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

        points = tensorboard_scalars(log_dir)
        numbers = ("int", "float", "tensor", "numpy", "nan", "huge")
        assert set(points) == {f"eval/{key}" for key in numbers}
        assert points["eval/int"] == [(7, 3.0)]
        assert points["eval/tensor"] == [(7, 2.5)]
        assert points["eval/numpy"] == [(7, 0.75)]
        assert np.isnan(points["eval/nan"][0][1])
        assert points["eval/huge"] == [(7, float(np.float32(2**70)))]

    def test_cadence_applies_through_a_metric_logger(self, log_dir: Path) -> None:
        """Only the steps the logger delivers are written, at their step; close() closes the hook."""
        with MetricLogger(stream=io.StringIO(), every_steps=2) as logger:
            logger.hooks.append(TensorboardHook(log_dir))
            for step in range(1, 5):
                logger.emit("train_step", {"step": step, "loss": torch.tensor(1.0 / step), "lr": 0.25})
        points = tensorboard_scalars(log_dir)
        assert points["train_step/loss"] == [(2, 0.5), (4, 0.25)]
        assert points["train_step/lr"] == [(2, 0.25), (4, 0.25)]

    def test_events_without_a_whole_step_sit_at_the_last_step_seen(self, log_dir: Path) -> None:
        """No step, or one that is no whole number: the last whole step seen (0 before any), as in W&B;
        a float 5.0 is step 5."""
        hook = TensorboardHook(log_dir, events={"*": None})
        hook.on_event("outer_step", {"outer_step": 10})
        hook.on_event("train_step", {"step": 4, "loss": 0.5})
        hook.on_event("outer_step", {"outer_step": 11, "step": "not an int"})
        hook.on_event("outer_step", {"outer_step": 12, "step": 4.5})
        hook.on_event("eval", {"step": 5.0, "loss": 0.25})
        hook.on_event("delta_uploaded", {"bytes": 100})
        hook.close()

        points = tensorboard_scalars(log_dir)
        assert points["outer_step/outer_step"] == [(0, 10.0), (4, 11.0), (4, 12.0)]
        assert points["eval/loss"] == [(5, 0.25)]
        assert points["delta_uploaded/bytes"] == [(5, 100.0)]

    def test_a_nested_mapping_is_written_under_its_path(self, log_dir: Path) -> None:
        """A nested {"metrics": {"f1": ..., "per": {"a": ...}}}: eval/metrics/f1, eval/metrics/per/a."""
        hook = TensorboardHook(log_dir)
        metrics = {"f1": torch.tensor(0.5), "per": {"a": 1}, "name": "x"}
        hook.on_event("eval", {"step": 3, "metrics": metrics})
        hook.close()
        assert tensorboard_scalars(log_dir) == {
            "eval/metrics/f1": [(3, 0.5)],
            "eval/metrics/per/a": [(3, 1.0)],
        }

    @pytest.mark.parametrize("process", [False, True], ids=["in-process", "writer-process"])
    def test_the_config_is_in_the_hparams_and_text_dashboards(self, log_dir: Path, process: bool) -> None:
        """train_start's and hyperparams' config: HParams (nested keys joined with /, lists as JSON) and
        indented JSON text under <event>/config; never scalars."""
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        from tensorboard.plugins.hparams import plugin_data_pb2

        hook = TensorboardHook(log_dir, process=process)
        config = {"lr": 0.1, "model": {"hidden": 8, "act": "gelu"}, "bf16": True, "layers": [1, 2]}
        hook.on_event("hyperparams", {"config": config})
        hook.close()

        accumulator = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
        accumulator.Reload()
        assert accumulator.Tags()["scalars"] == []
        [text] = accumulator.Tensors("hyperparams/config")
        assert '"hidden": 8' in text.tensor_proto.string_val[0].decode()
        [content] = accumulator.PluginTagToContent("hparams").values()
        start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
        values = {key: getattr(value, value.WhichOneof("kind")) for key, value in start.hparams.items()}
        assert values == {
            "lr": 0.1,
            "model/hidden": 8.0,
            "model/act": "gelu",
            "bf16": True,
            "layers": "[1, 2]",
        }

    @pytest.mark.parametrize("process", [False, True], ids=["in-process", "writer-process"])
    def test_one_off_events_are_text_not_single_point_charts(self, log_dir: Path, process: bool) -> None:
        """train_start's and train_end's values (numbers and text) are JSON in the Text dashboard under
        <event>/values at their step, never a scalar; elapsed_s is left out unless asked."""
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        hook = TensorboardHook(log_dir, process=process)
        hook.on_event("train_start", {"target_step": 4, "device": "cpu", "elapsed_s": 0.5})
        hook.on_event("train_step", {"step": 4, "loss": 0.5, "elapsed_s": 1.0})
        hook.on_event("train_end", {"step": 4, "final_loss": 0.5, "status": "completed", "elapsed_s": 2.0})
        hook.close()

        accumulator = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
        accumulator.Reload()
        assert accumulator.Tags()["scalars"] == ["train_step/loss"]
        [start] = accumulator.Tensors("train_start/values")
        [end] = accumulator.Tensors("train_end/values")
        assert json.loads(start.tensor_proto.string_val[0]) == {"target_step": 4, "device": "cpu"}
        assert (json.loads(end.tensor_proto.string_val[0]), end.step) == (
            {"final_loss": 0.5, "status": "completed"},
            4,
        )

    def test_events_that_leave_the_config_out_write_no_hyperparameters(self, log_dir: Path) -> None:
        """events={"train_step": ["loss"], "*": ()}: nothing of train_start, its config included."""
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        hook = TensorboardHook(log_dir, events={"train_step": ["loss"], "*": ()})
        hook.on_event("train_start", {"target_step": 4, "config": {"lr": 0.1}})
        hook.on_event("train_step", {"step": 1, "loss": 0.5})
        hook.close()
        accumulator = EventAccumulator(str(log_dir))
        accumulator.Reload()
        assert (accumulator.Tags()["scalars"], accumulator.Tags()["tensors"]) == (["train_step/loss"], [])

    def test_one_event_record_per_emitted_event(self, log_dir: Path) -> None:
        """All of an event's scalars share one Event record; an event without numbers writes none."""
        hook = TensorboardHook(log_dir)
        hook.on_event("train_step", {"step": 1, "loss": 0.5, "lr": 0.1, "tokens_per_s": 900.0})
        hook.on_event("note", {"text": "no numbers here"})
        hook.on_event("train_step", {"step": 2, "loss": 0.4, "lr": 0.1, "tokens_per_s": 950.0})
        hook.close()

        [path] = event_files(log_dir)
        records = [e for e in EventFileLoader(str(path)).Load() if e.HasField("summary")]
        assert [(e.step, len(e.summary.value)) for e in records] == [(1, 3), (2, 3)]

    def test_flush_makes_points_readable_before_close(self, log_dir: Path) -> None:
        """flush() blocks until what was written is in the file, with a long flush interval."""
        hook = TensorboardHook(log_dir, flush_secs=3600)
        hook.on_event("train_step", {"step": 1, "loss": 0.5})
        hook.flush()
        try:
            assert tensorboard_scalars(log_dir)["train_step/loss"] == [(1, 0.5)]
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
        assert tensorboard_scalars(log_dir)["train_step/loss"] == [(1, 0.5)]

    def test_metric_logger_close_closes_the_hook(self, log_dir: Path) -> None:
        """MetricLogger.close() closes the hook once, and the logger counts nothing as failed."""
        hook = TensorboardHook(log_dir)
        logger = MetricLogger(stream=io.StringIO(), hooks=[hook])
        logger.emit("train_step", {"step": 3, "loss": 0.5})
        logger.close()
        with pytest.raises(RuntimeError, match="is closed"):
            hook.on_event("train_step", {"step": 4, "loss": 0.4})
        assert dict(logger.hook_errors) == {}
        assert tensorboard_scalars(log_dir)["train_step/loss"] == [(3, 0.5)]

    def test_each_hook_has_its_own_file(self, log_dir: Path) -> None:
        """Two hooks on one directory write two files; TensorBoard reads both."""
        first, second = TensorboardHook(log_dir), TensorboardHook(log_dir)
        first.on_event("train_step", {"step": 1, "loss": 0.5})
        second.on_event("train_step", {"step": 2, "loss": 0.25})
        first.close()
        second.close()

        assert len(event_files(log_dir)) == 2
        assert sorted(tensorboard_scalars(log_dir)["train_step/loss"]) == [(1, 0.5), (2, 0.25)]

    @pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
    def test_a_killed_training_process_loses_nothing_it_handed_to_the_writer(self, log_dir: Path) -> None:
        """SIGKILL without close, once the hook has handed every point to its writer process
        (``pending == 0``): the writer reads the end of its pipe and closes the file with all of it.

        No timing: the script waits for ``pending`` to reach 0, and the test for the writer process
        (no longer the test's to wait on once its parent is killed) to have written all 100 points."""
        script = textwrap.dedent(
            f"""
            import os, signal, time
            from speedtronic.integrations import TensorboardHook
            hook = TensorboardHook({str(log_dir)!r})
            for step in range(1, 101):
                hook.on_event("train_step", {{"step": step, "loss": 1.0 / step}})
            while hook.pending:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)
            """
        )
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
        assert result.returncode == -signal.SIGKILL, result.stderr.decode()

        deadline = time.monotonic() + 120  # only bounds a failure: a written file passes at once
        steps: list[int] = []
        while steps != list(range(1, 101)) and time.monotonic() < deadline:
            time.sleep(0.1)
            steps = [step for step, _ in tensorboard_scalars(log_dir).get("train_step/loss", [])]
        assert steps == list(range(1, 101))


@pytest.fixture
def stalled(
    log_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[TensorboardHook, threading.Event]]:
    """A hook whose event file writer hangs (a stalled disk) until the returned event is set."""
    hook = TensorboardHook(log_dir, max_queue=3)
    release = threading.Event()
    write = hook._writer.write  # the one fault injected: the writer thread's call into the writer

    def hang(*args: Any) -> None:
        release.wait()
        write(*args)

    monkeypatch.setattr(hook._writer, "write", hang)
    yield hook, release
    release.set()
    hook.close()


class TestHandOff:
    def test_sigterm_to_the_process_group_loses_no_point_and_fails_no_hook(
        self, log_dir: Path, tmp_path: Path
    ) -> None:
        """SIGTERM to the whole process group (`timeout`, Slurm): the writer process ignores it and
        its parent closes it, so every point is written and no hook failure is recorded."""
        script = textwrap.dedent(
            f"""
            import io, signal, time
            from speedtronic.integrations import TensorboardHook
            from speedtronic.lifecycle import close_on_signals
            from speedtronic.profiling import MetricLogger
            close_on_signals()
            hook = TensorboardHook({str(log_dir)!r}, flush_secs=60)
            logger = MetricLogger(stream=io.StringIO(), json_file={str(tmp_path / "run.jsonl")!r},
                                  hooks=[hook])
            for step in range(355):
                logger.emit("train_step", {{"step": step, "loss": float(step)}})
            while hook.pending:  # every point handed to the writer process, none flushed (60 s)
                time.sleep(0.01)
            print("sent", flush=True)
            while True:
                signal.pause()
            """
        )
        process = subprocess.Popen(
            [sys.executable, "-c", script],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            assert process.stdout is not None
            assert process.stdout.readline() == "sent\n"
            os.killpg(process.pid, signal.SIGTERM)
            _, stderr = process.communicate(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
        assert process.returncode == -signal.SIGTERM, stderr
        assert "HookFailureWarning" not in stderr
        assert "hook_error" not in (tmp_path / "run.jsonl").read_text()
        assert [step for step, _ in tensorboard_scalars(log_dir)["train_step/loss"]] == list(range(355))

    def test_a_stalled_writer_never_blocks_on_event(
        self, stalled: tuple[TensorboardHook, threading.Event], log_dir: Path
    ) -> None:
        """max_queue events wait; later ones are dropped, counted, warned about once; the rest is written."""
        hook, release = stalled
        with pytest.warns(TensorboardWarning, match="3 events behind") as warned:
            for step in range(1, 21):
                hook.on_event("train_step", {"step": step, "loss": 1.0})
        assert len(warned) == 1
        assert hook.dropped == 17  # events the writer holds count, taken or not
        release.set()
        hook.close()
        steps = [step for step, _ in tensorboard_scalars(log_dir)["train_step/loss"]]
        assert steps == [1, 2, 3]

    def test_flush_gives_up_after_its_timeout(self, stalled: tuple[TensorboardHook, threading.Event]) -> None:
        """flush(timeout_s=) raises TimeoutError instead of waiting on a stalled writer forever."""
        hook, release = stalled
        hook.on_event("train_step", {"step": 1, "loss": 1.0})
        with pytest.raises(TimeoutError, match=r"flush not done in 0\.1 s"):
            hook.flush(timeout_s=0.1)
        release.set()
        hook.flush()
        assert hook.pending == 0

    def test_a_writer_failure_is_raised_by_the_next_call(
        self, log_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A write that fails on the writer thread surfaces at the next on_event, so the logger counts it."""
        hook = TensorboardHook(log_dir)

        def disk_full(*args: Any) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(hook._writer, "write", disk_full)
        with warnings.catch_warnings(), MetricLogger(stream=io.StringIO(), hooks=[hook]) as logger:
            warnings.simplefilter("ignore")
            logger.emit("train_step", {"step": 1, "loss": 1.0})
            while hook.pending:  # the writer thread has tried the first event
                time.sleep(0.01)
            logger.emit("train_step", {"step": 2, "loss": 1.0})
            assert sum(logger.hook_errors.values()) == 1
        assert hook.dropped == 2  # step 1, and step 2 that close() tried to write
        assert logger.hook_errors["TensorboardHook"] == 2  # the second at close

    def test_a_hook_never_closed_is_written_at_exit(self, log_dir: Path) -> None:
        """A script that forgets close(): every point reaches the file when the interpreter exits."""
        script = textwrap.dedent(
            f"""
            from speedtronic.integrations import TensorboardHook
            hook = TensorboardHook({str(log_dir)!r}, flush_secs=3600)
            for step in range(1, 201):
                hook.on_event("train_step", {{"step": step, "loss": 1.0 / step}})
            """
        )
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert [step for step, _ in tensorboard_scalars(log_dir)["train_step/loss"]] == list(range(1, 201))


class TestResumedRun:
    @pytest.mark.parametrize("process", [True, False])
    def test_a_resumed_train_start_drops_the_killed_runs_later_points(
        self, log_dir: Path, process: bool
    ) -> None:
        """A second hook in the same log_dir whose train_start says start_step=4: TensorBoard reads
        steps 1-8 once (the first run's 5 and 6 purged); a start_step of 0 purges nothing."""
        first = TensorboardHook(log_dir, process=process)
        first.on_event("train_start", {"start_step": 0, "target_step": 8})
        for step in range(1, 7):
            first.on_event("train_step", {"step": step, "loss": 1.0 / step})
        first.close()
        resumed = TensorboardHook(log_dir, process=process)
        resumed.on_event("train_start", {"start_step": 4, "target_step": 8})
        for step in range(5, 9):
            resumed.on_event("train_step", {"step": step, "loss": 2.0 / step})
        resumed.close()
        assert len(event_files(log_dir)) == 2
        points = tensorboard_scalars(log_dir)["train_step/loss"]
        assert [step for step, _ in points] == list(range(1, 9))
        assert [value for step, value in points if step > 4] == [
            pytest.approx(2.0 / step) for step in range(5, 9)
        ]


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
    """The default writer process against TensorboardHook(process=False): the same file."""

    def test_same_points_as_the_in_process_writer(self, tmp_path: Path) -> None:
        """Both writers give EventAccumulator the same tags, steps and values; one file each."""
        events = [("train_step", {"step": s, "loss": 1.0 / s, "lr": 0.1}) for s in range(1, 30)]
        events.append(("outer_step", {"outer_step": 1, "deltas_included": 2}))
        events.append(("eval/val", {"step": 29, "loss": float("inf"), "huge": -(2**1100)}))
        for process in (False, True):
            hook = TensorboardHook(tmp_path / str(process), process=process)
            for event, payload in events:
                hook.on_event(event, payload)
            hook.close()
        assert tensorboard_scalars(tmp_path / "True") == tensorboard_scalars(tmp_path / "False")
        assert tensorboard_scalars(tmp_path / "True")["train_step/loss"][0] == (1, 1.0)
        assert tensorboard_scalars(tmp_path / "True")["eval%2Fval/huge"] == [(29, -math.inf)]
        assert len(event_files(tmp_path / "True")) == 1

    def test_flush_makes_points_readable_before_close(self, log_dir: Path) -> None:
        """flush() reaches through the thread and the pipe to the child's file; close is idempotent."""
        hook = TensorboardHook(log_dir, process=True, flush_secs=60)
        hook.on_event("train_step", {"step": 3, "loss": 0.5})
        hook.flush()
        assert tensorboard_scalars(log_dir)["train_step/loss"] == [(3, 0.5)]
        hook.close()
        hook.close()  # idempotent
        with pytest.raises(RuntimeError, match="closed"):
            hook.on_event("train_step", {"step": 4, "loss": 0.4})
        assert len(event_files(log_dir)) == 1

    def test_a_killed_training_process_keeps_every_point_it_sent(self, log_dir: Path) -> None:
        """SIGKILL the parent: the writer reads the end of its pipe and closes the file whole."""
        script = textwrap.dedent(
            f"""
            import os, signal, sys, time
            from speedtronic.integrations import TensorboardHook
            hook = TensorboardHook({str(log_dir)!r}, process=True, flush_secs=60)
            for step in range(100):
                hook.on_event("train_step", {{"step": step, "loss": float(step)}})
            while hook.pending:  # every event handed to the writer process, none flushed (60 s)
                time.sleep(0.01)
            print("sent", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
            """
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert done.returncode == -signal.SIGKILL, done.stderr
        assert "sent" in done.stdout
        deadline = time.monotonic() + 120  # only bounds a failure: the orphaned writer finishes alone
        points = tensorboard_scalars(log_dir).get("train_step/loss", [])
        while len(points) < 100 and time.monotonic() < deadline:
            time.sleep(0.1)
            points = tensorboard_scalars(log_dir).get("train_step/loss", [])
        assert [step for step, _ in points] == list(range(100))

    def test_the_users_main_module_is_not_run_again(self, tmp_path: Path) -> None:
        """A script without a __main__ guard runs once (multiprocessing's spawn would rerun it)."""
        marker = tmp_path / "runs.txt"
        script = tmp_path / "train.py"
        script.write_text(
            textwrap.dedent(
                f"""
            from speedtronic.integrations import TensorboardHook
            with open({str(marker)!r}, "a") as f:
                f.write("ran\\n")
            hook = TensorboardHook({str(tmp_path / "tb")!r}, process=True)
            hook.on_event("train_step", {{"step": 1, "loss": 1.0}})
            hook.close()
            """
            )
        )
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert marker.read_text() == "ran\n"


def test_a_log_dir_that_cant_be_created_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """A log_dir that is a file: ValueError naming it, and no writer process left behind."""
    import gc

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        with pytest.raises(ValueError, match=r"TensorboardHook\(log_dir=.*not-a-dir'\): can't create it"):
            TensorboardHook(blocker)
        gc.collect()


class TestAFailedWriter:
    def test_a_killed_writer_process_is_counted_and_training_goes_on(self, log_dir: Path) -> None:
        """The writer process killed mid-run: the logger counts the failure, emit never raises, the
        lost events are in dropped, and close() returns at once instead of waiting on the dead child
        (its timeout_s, 120 s: far past a loaded machine's close)."""
        hook = TensorboardHook(log_dir, timeout_s=120)
        hook.on_event("train_step", {"step": 1, "loss": 1.0})
        hook.flush()  # the child is up and has written step 1
        hook._writer._process.kill()  # type: ignore[union-attr]  # the one fault: the child dies
        hook._writer._process.wait()  # type: ignore[union-attr]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logger = MetricLogger(stream=io.StringIO(), hooks=[hook])
            for step in range(2, 40):
                logger.emit("train_step", {"step": step, "loss": 1.0 / step})
                if step == 2:
                    while hook.pending:  # the writer thread has tried to send step 2
                        time.sleep(0.01)
            started = time.monotonic()
            logger.close()
        assert time.monotonic() - started < hook.timeout_s
        assert logger.hook_errors["TensorboardHook"] >= 1
        assert hook.dropped >= 1
        assert tensorboard_scalars(log_dir)["train_step/loss"] == [(1, 1.0)]


class Broken:
    """A hook whose flush fails."""

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        pass

    def flush(self, timeout: float | None) -> None:
        raise OSError("disk gone")


class Slow:
    """A hook whose flush runs past its timeout."""

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        pass

    def flush(self, timeout: float | None) -> None:
        raise TimeoutError(f"not done in {timeout} s")


class TestMetricLoggerFlush:
    @pytest.mark.parametrize("wrap", [False, True], ids=["inline", "background"])
    def test_flush_leaves_every_point_in_the_event_file(self, log_dir: Path, wrap: bool) -> None:
        """MetricLogger.flush() calls the hook's flush (also inside background(...)): right after it,
        with the logger still open, the event file holds every point."""
        from speedtronic.hooks import background

        hook = TensorboardHook(log_dir, flush_secs=3600)  # only a flush writes the file
        logger = MetricLogger(stream=io.StringIO(), hooks=[background(hook) if wrap else hook])
        for step in (1, 2, 3):
            logger.emit("train_step", {"step": step, "loss": 1.0 / step})
        assert logger.flush(timeout=60) is True
        assert [step for step, _ in tensorboard_scalars(log_dir)["train_step/loss"]] == [1, 2, 3]
        logger.close()

    def test_a_hook_whose_flush_fails_is_reported_not_raised(self, tmp_path: Path) -> None:
        """A hook's flush that raises: flush() returns, the failure is a hook_error naming the hook."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logger = MetricLogger(json_file=tmp_path / "m.jsonl", stream=io.StringIO(), hooks=[Broken()])
            logger.emit("train_step", {"step": 1, "loss": 1.0})
            logger.flush(timeout=5)
            logger.close()
        assert logger.hook_errors["Broken"] == 1
        records = read_jsonl(tmp_path / "m.jsonl")
        [error] = [r for r in records if r["event"] == "hook_error" and "during" in r]  # and close's total
        assert (error["hook"], error["during"]) == ("Broken", "flush")
        assert "disk gone" in error["error"]

    def test_a_flush_past_its_timeout_returns_false(self, log_dir: Path) -> None:
        """A hook's flush that runs past the timeout (TimeoutError) makes flush() return False."""
        logger = MetricLogger(stream=io.StringIO(), hooks=[Slow()])
        assert logger.flush(timeout=0.5) is False
        logger.close()


def test_a_default_speedtronic_train_run_charts_no_one_off_values(tmp_path: Path) -> None:
    """`speedtronic train` with its default TensorBoard hook: scalars only of the events a run has many
    of (train_step, eval, checkpoint), no elapsed_s; train_start, hyperparams, shape_profile,
    ooo_backprop and train_end are text."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "speedtronic",
            "train",
            "--run-dir",
            str(tmp_path / "run"),
            "--steps",
            "20",
            "--no-progress",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr
    accumulator = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    accumulator.Reload()
    scalars = accumulator.Tags()["scalars"]
    assert {tag.split("/")[0] for tag in scalars} == {"train_step", "eval", "checkpoint"}
    assert "train_step/loss" in scalars
    assert not [tag for tag in scalars if tag.endswith("/elapsed_s")]
    one_offs = ("train_start", "shape_profile", "ooo_backprop", "train_end")
    assert {f"{event}/values" for event in one_offs} <= set(accumulator.Tags()["tensors"])
