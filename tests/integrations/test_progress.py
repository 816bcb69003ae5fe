"""speedtronic.integrations.progress: a real tqdm bar driven by a MetricLogger's events."""

from __future__ import annotations

import io
import os
import sys

import pytest

from speedtronic.integrations.progress import ProgressHook, progress_wanted
from speedtronic.profiling import MetricLogger

pytest.importorskip("tqdm")


def frames(out: io.StringIO) -> list[str]:
    """The bar's successive renderings (tqdm redraws with a carriage return)."""
    return [frame.strip() for frame in out.getvalue().replace("\n", "\r").split("\r") if frame.strip()]


def run(out: io.StringIO, events: list[tuple[str, dict[str, object]]]) -> ProgressHook:
    hook = ProgressHook(out, mininterval=0, ncols=120)
    with MetricLogger(stream=io.StringIO(), hooks=[hook]) as logger:
        for event, payload in events:
            logger.emit(event, payload)
    return hook


class TestProgressHook:
    def test_bar_follows_steps_to_the_target(self) -> None:
        """train_start sets the total, each train_step moves the bar to its step with loss and rate."""
        out = io.StringIO()
        run(
            out,
            [
                ("train_start", {"start_step": 0, "target_step": 4}),
                *[
                    ("train_step", {"step": s, "loss": 1 / s, "samples_per_s": 1000.0 + s})
                    for s in (1, 2, 3, 4)
                ],
                ("train_end", {"step": 4, "final_loss": 0.25}),
            ],
        )
        shown = frames(out)
        assert any(f.startswith("50%") and "2/4" in f and "loss=0.5 samples/s=1.00k" in f for f in shown)
        assert shown[-1].startswith("100%")
        assert "4/4" in shown[-1]
        assert "loss=0.25" in shown[-1]

    def test_a_trainers_step_leaves_the_bar_its_width_at_100_columns(self) -> None:
        """loss and one throughput, rounded (tokens/s=4.334e+05 would squeeze the bar): a wide bar."""
        out = io.StringIO()
        hook = ProgressHook(out, mininterval=0, ncols=100, dynamic_ncols=False)
        with MetricLogger(stream=io.StringIO(), hooks=[hook]) as logger:
            logger.emit("train_start", {"start_step": 0, "target_step": 1000})
            logger.emit(
                "train_step",
                {
                    "step": 500,
                    "loss": 2.718281828,
                    "lr": 0.000975,
                    "grad_norm": 0.5743,
                    "samples_per_s": 27090.5,
                    "tokens_per_s": 433440.25,
                    "samples": 64000,
                    "tokens": 1024000,
                    "microbatches": 1,
                    "memory_bytes": 1_234_567_890,
                },
            )
        frame = next(f for f in frames(out) if f.startswith("50%"))
        assert frame.endswith("loss=2.718 tokens/s=433k]")
        assert len(frame.split("|")[1]) >= 20  # the bar itself (1 character with the old postfix)

    def test_the_latest_eval_loss_stays_on_the_bar(self) -> None:
        """After an eval, every step's postfix ends with its loss (eval=...), until the next eval."""
        out = io.StringIO()
        run(
            out,
            [
                ("train_start", {"start_step": 0, "target_step": 4}),
                ("train_step", {"step": 1, "loss": 1.0, "tokens_per_s": 10.0}),
                ("eval", {"step": 1, "loss": 0.87654}),
                ("train_step", {"step": 2, "loss": 0.5, "tokens_per_s": 10.0}),
                ("eval", {"step": 2, "loss": 0.25}),
                ("train_step", {"step": 3, "loss": 0.4, "tokens_per_s": 10.0}),
            ],
        )
        shown = frames(out)
        assert any(f.startswith("50%") and f.endswith("loss=0.5 tokens/s=10 eval=0.8765]") for f in shown)
        assert any(f.startswith("75%") and f.endswith("loss=0.4 tokens/s=10 eval=0.25]") for f in shown)

    def test_a_frameworks_names_reach_the_bar(self) -> None:
        """Metrics under a framework's names (Lightning's ``train_loss``, torchtune's
        ``tokens_per_second_per_gpu``, an eval's ``val_loss``) fill the postfix as ours do."""
        out = io.StringIO()
        run(
            out,
            [
                ("train_start", {"start_step": 0, "target_step": 4}),
                ("train_step", {"step": 1, "train_loss": 1.0, "tokens_per_second_per_gpu": 10.0}),
                ("eval", {"step": 1, "val_loss": 0.75, "split": "val"}),
                ("train_step", {"step": 2, "train_loss": 0.5, "tokens_per_second_per_gpu": 10.0}),
            ],
        )
        shown = "train_loss=0.5 tokens_per_second_per_gpu=10 eval=0.75]"
        assert any(f.startswith("50%") and f.endswith(shown) for f in frames(out)), frames(out)

    def test_postfix_chooses_the_keys(self) -> None:
        """postfix=("loss", "grad_norm") shows those two, rounded."""
        out = io.StringIO()
        hook = ProgressHook(out, postfix=("loss", "grad_norm"), mininterval=0, ncols=120)
        with MetricLogger(stream=io.StringIO(), hooks=[hook]) as logger:
            logger.emit(
                "train_step", {"step": 1, "loss": 0.123456, "grad_norm": 12345.678, "tokens_per_s": 9.0}
            )
        assert frames(out)[-1].endswith("loss=0.1235 grad_norm=12.3k]")

    def test_resumed_run_starts_at_start_step(self) -> None:
        """A run resumed at step 90 of 100 starts its bar at 90, not 0."""
        out = io.StringIO()
        run(out, [("train_start", {"start_step": 90, "target_step": 100}), ("train_step", {"step": 95})])
        assert frames(out)[0].startswith("90%")
        assert "95/100" in frames(out)[-1]

    def test_steps_without_train_start_still_count(self) -> None:
        """A hook added mid-run gets no train_start: an open-ended bar, not an error."""
        out = io.StringIO()
        run(out, [("train_step", {"step": 7, "loss": 2.0}), ("train_step", {"step": 9})])
        assert frames(out)[-1].startswith("9step")

    def test_trouble_is_printed_above_the_bar(self) -> None:
        """shape_warning and delta_upload_failed appear as lines; checkpoints don't."""
        out = io.StringIO()
        run(
            out,
            [
                ("train_start", {"target_step": 2}),
                ("shape_warning", {"step": 1, "name": "logits"}),
                ("checkpoint", {"step": 1, "path": "c.pt"}),
                ("delta_upload_failed", {"step": 1, "error": "timeout 30s"}),
            ],
        )
        lines = out.getvalue().splitlines()
        assert any(line.startswith("WARNING | shape_warning step=1 name=logits") for line in lines)
        failed = 'ERROR | delta_upload_failed step=1 error="timeout 30s"'
        assert any(line.startswith(failed) for line in lines)
        assert "c.pt" not in out.getvalue()

    def test_close_without_train_end_closes_the_bar(self) -> None:
        """The logger's close() closes an open bar (a run cut short), once."""
        out = io.StringIO()
        hook = run(out, [("train_start", {"target_step": 10}), ("train_step", {"step": 3})])
        closed = out.getvalue()
        assert closed.endswith("\n")  # tqdm ends a closed bar's line
        hook.close()
        assert out.getvalue() == closed

    def test_missing_tqdm_names_the_extra(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without tqdm, creating the hook says which extra to install."""
        monkeypatch.setitem(sys.modules, "tqdm", None)
        with pytest.raises(ModuleNotFoundError, match=r"speedtronic\[progress\]"):
            ProgressHook()


class TestProgressWanted:
    def test_a_terminal(self) -> None:
        """A pty is a terminal: the bar is wanted."""
        leader, follower = os.openpty()
        try:
            with os.fdopen(follower, "w") as stream:
                assert progress_wanted(stream)
        finally:
            os.close(leader)

    def test_a_file_a_pipe_or_a_closed_stream(self) -> None:
        """StringIO, a pipe and a closed stream are not terminals: the plain log stays."""
        assert not progress_wanted(io.StringIO())
        read, write = os.pipe()
        os.close(read)
        with os.fdopen(write, "w") as pipe:
            assert not progress_wanted(pipe)
        closed = io.StringIO()
        closed.close()
        assert not progress_wanted(closed)
