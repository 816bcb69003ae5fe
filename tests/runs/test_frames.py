"""A run whose loss went NaN, written by a real MetricLogger, read by real pyarrow, polars and pandas."""

from __future__ import annotations

import io
import json
import math
import sys
import warnings
from pathlib import Path

import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.json as pa_json
import pytest

from speedtronic.profiling import MetricLogger
from speedtronic.record import restore_non_finite
from speedtronic.runs import RunError, read_records
from speedtronic.runs.frames import Library, UnknownEventWarning, read_frame, read_frames
from tests.runs.conftest import same

STEPS = 300
NAN_AT, INF_AT = 150, 160
"""Past polars' 100-row schema inference, so a reader that infers from the head must still cope."""


def loss_at(step: int) -> float:
    return math.nan if step == NAN_AT else math.inf if step == INF_AT else 1.0 / step


def write_run(path: Path, *, other_events: bool) -> Path:
    """A real run: train_step records whose loss goes NaN then +inf; with other_events, the events
    around them too (train_start, checkpoints, eval with a late key, train_end with final_loss)."""
    with MetricLogger(stream=io.StringIO(), json_file=path) as logger:
        if other_events:
            logger.emit("train_start", {"start_step": 0, "target_step": STEPS, "device": "cpu"})
        for step in range(1, STEPS + 1):
            logger.emit("train_step", {"step": step, "loss": loss_at(step), "lr": 1e-3})
            if other_events and step % 100 == 0:
                logger.emit("checkpoint", {"step": step, "path": f"ckpt/{step}.pt"})
                extra = {"perplexity": 12} if step == 200 else {}
                logger.emit("eval", {"step": step, "accuracy": step / 1000, "ok": True, **extra})
        if other_events:
            logger.emit("train_end", {"step": STEPS, "final_loss": 1.0 / STEPS})
    return path


@pytest.fixture
def steps_file(tmp_path: Path) -> Path:
    """A JSONL file of train_step records only."""
    return write_run(tmp_path / "steps.jsonl", other_events=False)


@pytest.fixture
def run_file(tmp_path: Path) -> Path:
    """A run directory's metrics.jsonl with several events mixed."""
    return write_run(tmp_path / "run" / "metrics.jsonl", other_events=True)


class TestOneEventFileWithDefaults:
    def test_pyarrow_reads_loss_as_float_with_nulls(self, steps_file: Path) -> None:
        """pyarrow.json.read_json, default options: loss is double, null where it was non-finite."""
        table = pa_json.read_json(steps_file)
        assert table.schema.field("loss").type == pa.float64()
        assert table.schema.field("step").type == pa.int64()
        loss = table.column("loss").to_pylist()
        assert loss[NAN_AT - 1] is None
        assert loss[INF_AT - 1] is None
        assert loss[0] == 1.0
        assert table.num_rows == STEPS

    def test_polars_reads_loss_as_float_with_nulls(self, steps_file: Path) -> None:
        """polars.read_ndjson, default options: loss is Float64, null where it was non-finite."""
        frame = pl.read_ndjson(steps_file)
        assert frame.schema["loss"] == pl.Float64
        assert frame.schema["step"] == pl.Int64
        assert frame["loss"][NAN_AT - 1] is None
        assert frame["loss"][INF_AT - 1] is None
        assert frame.height == STEPS

    def test_pandas_reads_integers_as_integers(self, steps_file: Path) -> None:
        """pandas.read_json(lines=True), default options: step int64, loss float64, timestamp UTC."""
        frame = pd.read_json(steps_file, lines=True)
        assert frame["step"].dtype == "int64"
        assert frame["loss"].dtype == "float64"
        assert str(frame["timestamp"].dt.tz) == "UTC"


class TestMixedFileWithTheDocumentedOptions:
    def test_pyarrow_keeps_late_keys(self, run_file: Path) -> None:
        """pyarrow.json.read_json: every key becomes a column, integers stay int64."""
        table = pa_json.read_json(run_file)
        assert table.schema.field("final_loss").type == pa.float64()
        assert table.schema.field("step").type == pa.int64()

    def test_polars_needs_the_whole_file_for_its_schema(self, run_file: Path) -> None:
        """polars drops keys first seen after row 100 unless infer_schema_length=None."""
        assert "final_loss" not in pl.read_ndjson(run_file).columns
        frame = pl.read_ndjson(run_file, infer_schema_length=None)
        assert frame.schema["final_loss"] == pl.Float64
        assert frame.schema["step"] == pl.Int64

    def test_pandas_needs_nullable_dtypes_for_integers(self, run_file: Path) -> None:
        """pandas makes integer columns with gaps float64 unless dtype_backend="numpy_nullable"."""
        assert pd.read_json(run_file, lines=True)["step"].dtype == "float64"
        frame = pd.read_json(run_file, lines=True, dtype_backend="numpy_nullable")
        assert frame["step"].dtype == "Int64"
        assert frame["start_step"].dtype == "Int64"


class TestReadFramesPandas:
    def test_one_table_per_event_in_order_of_first_appearance(self, run_file: Path) -> None:
        """The run directory or its file: one DataFrame per event, each with its own rows."""
        for path in (run_file, run_file.parent):
            frames = read_frames(path)
            assert list(frames) == ["train_start", "train_step", "checkpoint", "eval", "train_end"]
            assert len(frames["train_step"]) == STEPS
            assert len(frames["checkpoint"]) == 3

    def test_non_finite_restored_and_integers_kept(self, run_file: Path) -> None:
        """loss is float64 with NaN and inf back in place; step stays int64."""
        steps = read_frames(run_file)["train_step"]
        assert steps["step"].dtype == "int64"
        assert steps["loss"].dtype == "float64"
        assert math.isnan(steps["loss"][NAN_AT - 1])
        assert steps["loss"][INF_AT - 1] == math.inf
        assert steps["loss"][1] == 0.5
        assert steps["step"].tolist() == list(range(1, STEPS + 1))

    def test_every_key_is_a_column(self, run_file: Path) -> None:
        """train_end's final_loss and a key only the second eval has are columns, in first-seen order."""
        frames = read_frames(run_file)
        assert list(frames["train_end"].columns) == ["step", "final_loss", "elapsed_s", "timestamp"]
        evals = frames["eval"]
        assert list(evals.columns) == ["step", "accuracy", "ok", "elapsed_s", "perplexity", "timestamp"]
        assert evals["perplexity"].dtype == "Int64"
        assert evals["perplexity"].isna().tolist() == [True, False, True]
        assert evals["perplexity"][1] == 12
        assert evals["ok"].dtype == "bool"

    def test_timestamp_is_utc_datetime(self, run_file: Path) -> None:
        """The record's RFC 3339 text becomes a timezone-aware UTC datetime column."""
        stamps = read_frames(run_file)["train_step"]["timestamp"]
        assert str(stamps.dt.tz) == "UTC"
        assert stamps.is_monotonic_increasing

    def test_nested_and_mixed_values_are_objects(self, tmp_path: Path) -> None:
        """Lists, dicts and keys with values of several types are kept as the Python values read."""
        path = tmp_path / "m.jsonl"
        with MetricLogger(stream=io.StringIO(), json_file=path) as logger:
            logger.emit("probe", {"grads": [1.0, math.inf], "shape": {"b": 2}, "tag": "a"})
            logger.emit("probe", {"grads": [math.nan], "shape": {"c": 3}, "tag": 7})
        frame = read_frame(path, "probe")
        assert frame["grads"].dtype == object
        assert frame["grads"][0] == [1.0, math.inf]
        assert math.isnan(frame["grads"][1][0])
        assert frame["shape"].tolist() == [{"b": 2}, {"c": 3}]
        assert frame["tag"].tolist() == ["a", 7]

    def test_chosen_events_and_an_absent_one(self, run_file: Path) -> None:
        """events= picks tables; one the run lacks is an empty DataFrame."""
        with pytest.warns(UnknownEventWarning):
            frames = read_frames(run_file, events=["eval", "nope"])
        assert list(frames) == ["eval", "nope"]
        assert frames["nope"].empty
        assert len(read_frame(run_file, "checkpoint")) == 3

    @pytest.mark.parametrize("library", ["pandas", "polars"])
    def test_a_misspelt_event_warns_naming_the_events_the_run_has(
        self, run_file: Path, library: Library
    ) -> None:
        """read_frame(run, "evall"): an empty frame and a warning listing the run's events."""
        typo = r"no 'evall' record.*the run has train_start, train_step"
        with pytest.warns(UnknownEventWarning, match=typo):
            assert len(read_frame(run_file, "evall", library=library)) == 0
        with pytest.warns(UnknownEventWarning, match="'train_stepp'"):
            read_frames(run_file, events=["train_stepp"], library=library)

    def test_a_catalog_event_the_run_lacks_is_quietly_empty(self, tmp_path: Path) -> None:
        """An eval frame of a run without evals is empty, without a warning: the name is right."""
        path = tmp_path / "m.jsonl"
        path.write_text('{"event":"train_step","step":1,"loss":1.0}\n')
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert read_frame(path, "eval").empty

    def test_a_torn_last_line_is_skipped(self, run_file: Path) -> None:
        """read_records' rules: a killed writer's torn line is not a row."""
        with run_file.open("a") as file:
            file.write('{"event":"train_step","step":301,"lo')
        assert len(read_frame(run_file, "train_step")) == STEPS

    def test_not_a_run_is_a_run_error(self, tmp_path: Path) -> None:
        """A path without JSONL raises the reader's RunError."""
        with pytest.raises(RunError):
            read_frames(tmp_path)


class TestReadFramesPolars:
    def test_typed_columns(self, run_file: Path) -> None:
        """Int64 steps, Float64 loss with NaN and inf restored, a UTC datetime timestamp."""
        frames = read_frames(run_file, library="polars")
        steps = frames["train_step"]
        assert steps.schema["step"] == pl.Int64
        assert steps.schema["loss"] == pl.Float64
        assert steps.schema["timestamp"] == pl.Datetime("us", "UTC")
        assert math.isnan(steps["loss"][NAN_AT - 1])
        assert steps["loss"][INF_AT - 1] == math.inf
        assert frames["train_end"]["final_loss"].to_list() == [1.0 / STEPS]

    def test_gaps_are_null_in_an_integer_column(self, run_file: Path) -> None:
        """A key only one record has: Int64 with nulls."""
        evals = read_frame(run_file, "eval", library="polars")
        assert evals.schema["perplexity"] == pl.Int64
        assert evals["perplexity"].to_list() == [None, 12, None]


class TestMissingLibrary:
    @pytest.mark.parametrize("library", ["pandas", "polars"])
    def test_install_hint(self, library: str, run_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without the library: ModuleNotFoundError naming it and the extra to install."""
        monkeypatch.setitem(sys.modules, library, None)  # what importing a missing module finds
        hint = r"requires .*pip install 'speedtronic\[frames\]'"
        with pytest.raises(ModuleNotFoundError, match=hint) as info:
            read_frames(run_file, library=library)  # type: ignore[arg-type]  # the parametrized name
        assert info.value.name == library

    def test_unknown_library(self, run_file: Path) -> None:
        """A library name other than pandas or polars is a ValueError."""
        with pytest.raises(ValueError, match="library"):
            read_frames(run_file, library="arrow")  # type: ignore[arg-type]  # the error under test

    def test_importing_runs_imports_no_dataframe_library(self) -> None:
        """speedtronic.runs stays light: pandas and polars load only when frames are read."""
        from tests.reliability.conftest import python

        result = python(
            "import sys, speedtronic.runs, speedtronic.runs.frames;"
            "print(sorted({'pandas', 'polars', 'pyarrow'} & set(sys.modules)))"
        )
        assert result.stdout.strip() == "[]", result.stderr


class TestRestoreNonFiniteThroughTheReader:
    def test_reader_and_restore_non_finite_agree(self, steps_file: Path) -> None:
        """restore_non_finite on each raw line gives what read_records gives: NaN and inf back."""
        raw = [restore_non_finite(json.loads(line)) for line in steps_file.read_text().splitlines()]
        read = list(read_records(steps_file))
        assert math.isnan(raw[NAN_AT - 1]["loss"])
        assert raw[INF_AT - 1]["loss"] == math.inf
        assert math.isnan(read[NAN_AT - 1].payload["loss"])
        assert read[INF_AT - 1].payload["loss"] == math.inf
        from_reader = [(r.payload["step"], r.payload["loss"]) for r in read]
        assert same([(r["step"], r["loss"]) for r in raw], from_reader)
