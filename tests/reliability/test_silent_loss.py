"""No loss is silent: a sink that can't write is reported where warning filters can't hide it."""

from __future__ import annotations

import io
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from speedtronic import HookFailureWarning, LoggerClosedError, LoggingFailureWarning
from speedtronic.profiling import MetricLogger
from tests.helpers import read_jsonl

REPO = str(Path(__file__).resolve().parents[2])


def run(code: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {REPO!r})\n{code}"],
        capture_output=True,
        text=True,
        timeout=60,
        **kwargs,
    )


class TestWarningsFiltered:
    def test_full_disk_with_warnings_ignored_is_on_stderr_and_in_the_text_log(self, tmp_path: Path) -> None:
        """warnings ignored + json_file=/dev/full: the text log says so, and the count is per sink."""
        done = run(
            "import warnings; warnings.filterwarnings('ignore')\n"
            "from speedtronic.profiling import MetricLogger\n"
            f"logger = MetricLogger(file={str(tmp_path / 't.log')!r}, json_file='/dev/full')\n"
            "for step in range(3000):\n"
            "    logger.emit('checkpoint', {'step': step})\n"
            "logger.close()\n"
            "print(dict(logger.lost_records), logger.write_errors)\n"
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "{'/dev/full': 3000} 3000"
        notes = [line for line in (tmp_path / "t.log").read_text().splitlines() if "logging_error" in line]
        assert notes, "the text log must say records were lost"
        assert "sink=/dev/full" in notes[0]
        assert "lost_records=1 " in notes[0] + " "

    def test_with_no_other_sink_it_is_one_line_on_stderr(self) -> None:
        """Only a JSONL sink, and it fails: stderr says so, rate-limited (1st, 2nd, 4th...)."""
        done = run(
            "import io, warnings; warnings.filterwarnings('ignore')\n"
            "from speedtronic.profiling import MetricLogger\n"
            "from speedtronic.distributed import RankInfo\n"
            "rank = RankInfo(rank=0, world_size=2)  # not the lead rank: no text log, only the JSONL\n"
            "logger = MetricLogger(json_file='/dev/full', rank=rank, lead_rank=1, stream=io.StringIO())\n"
            "for step in range(100):\n"
            "    logger.emit('checkpoint', {'step': step})\n"
            "logger.close()\n"
        )
        assert done.returncode == 0, done.stderr
        lines = [line for line in done.stderr.splitlines() if line.startswith("speedtronic: could not write")]
        assert len(lines) == 7  # 1, 2, 4, 8, 16, 32, 64
        assert "/dev/full" in lines[0]

    def test_text_and_jsonl_failures_are_counted_apart(self, tmp_path: Path) -> None:
        """lost_records names each sink with its own count (not one sum)."""
        broken = io.StringIO()
        broken.close()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logger = MetricLogger(stream=broken, json_file="/dev/full")
            for step in range(5):
                logger.emit("checkpoint", {"step": step})
            logger.close()
        assert dict(logger.lost_records) == {"<stream>": 5, "/dev/full": 5} or set(
            logger.lost_records.values()
        ) == {5}


class TestWarningsPointAtTheUser:
    def test_hook_failure_warning_names_the_emit_line(self) -> None:
        def bad(event: str, payload: dict[str, Any]) -> None:
            raise ValueError("boom")

        logger = MetricLogger(stream=io.StringIO(), hooks=[bad])
        with pytest.warns(HookFailureWarning) as caught:
            logger.emit("x", {})
        logger.close()
        assert caught[0].filename == __file__

    def test_write_failure_warning_names_the_emit_line(self) -> None:
        logger = MetricLogger(stream=io.StringIO(), json_file="/dev/full")
        with pytest.warns(LoggingFailureWarning) as caught:
            logger.emit("x", {})
        logger.close()
        assert caught[0].filename == __file__


class TestOwnRecords:
    def test_the_loggers_records_are_marked(self, jsonl_path: Path) -> None:
        """A hook_error the logger writes says origin=speedtronic; a user event of that name doesn't."""

        def bad(event: str, payload: dict[str, Any]) -> None:
            if event == "x":
                raise ValueError("boom")

        with MetricLogger(stream=io.StringIO(), json_file=jsonl_path, hooks=[bad]) as logger:
            logger.emit("hook_error", {"hook": "mine"})
            with pytest.warns(HookFailureWarning):
                logger.emit("x", {})
        records = [r for r in read_jsonl(jsonl_path) if r["event"] == "hook_error"]
        assert [r.get("_speedtronic", {}).get("origin") for r in records] == [
            "user",
            "speedtronic",
            "speedtronic",
        ]
        assert records[0]["hook"] == "mine"

    def test_a_payload_key_speedtronic_never_displaces_the_note(self, jsonl_path: Path) -> None:
        with MetricLogger(stream=io.StringIO(), json_file=jsonl_path) as logger:
            logger.emit("x", {"_speedtronic": "mine", "loss": float("nan")})
        (record,) = read_jsonl(jsonl_path)
        assert record["payload__speedtronic"] == "mine"
        assert record["_speedtronic"]["non_finite"] == {"nan": ["/loss"], "inf": [], "neg_inf": []}


class TestLifecycle:
    def test_a_hook_that_closes_the_logger_takes_effect_after_the_event(self, jsonl_path: Path) -> None:
        """close() from a hook inside emit: the event's other hooks still run, then the logger closes."""
        journal: list[str] = []
        logger = MetricLogger(stream=io.StringIO(), json_file=jsonl_path)

        def closer(event: str, payload: dict[str, Any]) -> None:
            logger.close()
            journal.append("closer")

        class After:
            def on_event(self, event: str, payload: dict[str, Any]) -> None:
                journal.append("after")

            def close(self) -> None:
                journal.append("closed")

        logger.hooks.extend([closer, After()])
        logger.emit("x", {})
        assert logger.closed
        assert journal == ["closer", "after", "closed"]

    def test_collected_loggers_release_their_files_and_close_their_hooks(self, tmp_path: Path) -> None:
        """3,000 loggers dropped without close(): no file descriptor is kept, each hook is closed."""
        import gc
        import os

        closed: list[int] = []

        class Hook:
            def on_event(self, event: str, payload: dict[str, Any]) -> None:
                pass

            def close(self) -> None:
                closed.append(1)

        before = len(os.listdir("/proc/self/fd"))
        for i in range(300):
            logger = MetricLogger(
                file=tmp_path / f"{i}.log", json_file=tmp_path / f"{i}.jsonl", hooks=[Hook()]
            )
            logger.emit("x", {})
            del logger
        gc.collect()
        assert len(os.listdir("/proc/self/fd")) <= before + 2
        assert len(closed) == 300

    def test_close_honours_its_timeout_while_a_hook_is_stalled(self, jsonl_path: Path) -> None:
        """Another thread stuck in emit (a stalled inline hook): close() returns after close_timeout_s,
        writes its totals, and never closes the hook that is still running; a later emit raises
        LoggerClosedError at once instead of waiting for the stuck one."""
        import threading

        gate, stalled = threading.Event(), threading.Event()
        closed: list[bool] = []

        class Stalled:
            def on_event(self, event: str, payload: dict[str, Any]) -> None:
                if event == "stall":
                    stalled.set()
                    gate.wait(120)
                elif event == "fail":
                    raise ValueError("boom")

            def close(self) -> None:
                closed.append(True)

        logger = MetricLogger(
            stream=io.StringIO(), json_file=jsonl_path, hooks=[Stalled()], close_timeout_s=0.2
        )
        with pytest.warns(HookFailureWarning):
            logger.emit("fail", {})
        emitter = threading.Thread(target=logger.emit, args=("stall", {}))
        emitter.start()
        try:
            assert stalled.wait(60)  # the emitter is inside emit, holding the logger, before close()
            closer = threading.Thread(target=logger.close)
            with pytest.warns(HookFailureWarning, match="not closed"):
                closer.start()
                closer.join(60)
            assert not closer.is_alive()
            assert logger.closed
            assert closed == []
            totals = [
                r for r in read_jsonl(jsonl_path) if r["event"] == "hook_error" and r["phase"] == "total"
            ]
            assert totals[0]["failures"] == 2  # the failure and the hook left open
            raised: list[BaseException] = []

            def emit_after_close() -> None:
                try:
                    logger.emit("after", {})
                except LoggerClosedError as error:
                    raised.append(error)

            late = threading.Thread(target=emit_after_close)  # the stuck emit still holds the logger
            late.start()
            late.join(60)
            assert not late.is_alive(), "an emit after close() waited for the stuck one"
            assert len(raised) == 1
        finally:
            gate.set()
            emitter.join(60)


class TestOddStreamsAndMappings:
    def test_an_ascii_stdout_gets_escaped_lines_not_lost_ones(self) -> None:
        """PYTHONIOENCODING=ascii: a line with non-ASCII text is written with escapes."""
        import os

        done = run(
            "from speedtronic.profiling import MetricLogger\n"
            "with MetricLogger() as logger:\n"
            "    logger.emit('checkpoint', {'path': 'ckpt-\u00e9t\u00e9.pt', 'step': 1})\n"
            "print(logger.write_errors)\n",
            env={**os.environ, "PYTHONIOENCODING": "ascii"},
        )
        assert done.returncode == 0, done.stderr
        first, count = done.stdout.splitlines()
        assert 'checkpoint path="ckpt-\\xe9t\\xe9.pt" step=1' in first
        assert count == "0"

    @pytest.mark.parametrize("every_steps", [1, 2])
    def test_a_mapping_that_raises_is_reported_the_same_at_every_cadence(self, every_steps: int) -> None:
        """A payload whose reading raises is counted as a lost record, whatever every_steps is."""
        from collections.abc import Iterator, Mapping

        class Broken(Mapping[str, Any]):
            def __getitem__(self, key: str) -> Any:
                raise RuntimeError("broken payload")

            def __iter__(self) -> Iterator[str]:
                return iter(["step"])

            def __len__(self) -> int:
                return 1

        logger = MetricLogger(stream=io.StringIO(), every_steps=every_steps)
        with pytest.warns(LoggingFailureWarning, match="broken payload"):
            logger.emit("train_step", Broken())
        logger.close()
        assert logger.write_errors == 1
