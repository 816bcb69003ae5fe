"""The JSONL note read by generic readers with their defaults, and read_frames' dtypes for pandas."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from speedtronic.runs.frames import read_frame
from tests.runs.conftest import write_run

LATE = 30_005
"""The record (0-based) whose grad_norm is the run's first non-finite value: past DuckDB's 20,480-row
sample and polars' 100-row default."""


@pytest.fixture(scope="module")
def late_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run: grad_norm finite for 30,005 records, +inf once, finite again; loss always finite."""
    path = tmp_path_factory.mktemp("late") / "metrics.jsonl"
    events = (
        ("train_step", {"step": step, "loss": 1 / (step + 1), "grad_norm": math.inf if step == LATE else 0.5})
        for step in range(LATE + 10)
    )
    write_run(path, events)
    return path


class TestLateNonFinite:
    def test_duckdb_defaults(self, late_file: Path) -> None:
        """read_json_auto, default options: no error, no DATE column, the late pointer is in the note."""
        duckdb = pytest.importorskip("duckdb")
        relation = duckdb.sql(f"select * from read_json_auto('{late_file}')")
        types = dict(zip(relation.columns, map(str, relation.types), strict=True))
        assert types["grad_norm"] == "DOUBLE"
        assert "DATE" not in " ".join(types.values())
        [(grad_norm, inf)] = duckdb.sql(
            "select grad_norm, json_extract_string(to_json(_speedtronic.non_finite), '$.inf[*]') "
            f"from read_json_auto('{late_file}') where step = {LATE}"
        ).fetchall()
        assert grad_norm is None
        assert inf == ["/grad_norm"]

    def test_polars_whole_file_schema(self, late_file: Path) -> None:
        """polars.read_ndjson(infer_schema_length=None): grad_norm Float64, the note lists the pointer."""
        pl = pytest.importorskip("polars")
        frame = pl.read_ndjson(late_file, infer_schema_length=None)
        assert frame.schema["grad_norm"] == pl.Float64
        row = frame.filter(pl.col("step") == LATE).to_dicts()[0]
        assert row["grad_norm"] is None
        assert row["_speedtronic"]["non_finite"] == {"nan": [], "inf": ["/grad_norm"], "neg_inf": []}

    def test_pyarrow_defaults(self, late_file: Path) -> None:
        """pyarrow.json.read_json, default options: the same."""
        pa_json = pytest.importorskip("pyarrow.json")
        table = pa_json.read_json(late_file)
        row = table.slice(LATE, 1).to_pylist()[0]
        assert (row["step"], row["grad_norm"]) == (LATE, None)
        assert row["_speedtronic"]["non_finite"]["inf"] == ["/grad_norm"]

    def test_read_frames_restores_it(self, late_file: Path) -> None:
        """read_frame: grad_norm float64 with +inf at that step, 0.5 everywhere else."""
        pytest.importorskip("pandas")
        frame = read_frame(late_file, "train_step")
        assert str(frame["grad_norm"].dtype) == "float64"
        assert frame["grad_norm"][LATE] == math.inf
        assert set(frame["grad_norm"].drop(LATE)) == {0.5}


class TestPandasDtypes:
    def test_whole_valued_floats_stay_float64(self, tmp_path: Path) -> None:
        """A loss of 4.0, 2.0, 1.0 is float64 through read_frames (pandas.read_json makes it int64)."""
        pytest.importorskip("pandas")
        path = tmp_path / "m.jsonl"
        write_run(path, [("train_step", {"step": step, "loss": 4.0 / step}) for step in (1, 2, 4)])
        frame = read_frame(path, "train_step")
        assert (str(frame["step"].dtype), str(frame["loss"].dtype)) == ("int64", "float64")
        assert list(frame["loss"]) == [4.0, 2.0, 1.0]

    def test_strings_that_spell_numbers_stay_strings(self, tmp_path: Path) -> None:
        """A column of "NaN"/"Infinity" strings the trainer logged is text, not floats."""
        pytest.importorskip("pandas")
        path = tmp_path / "m.jsonl"
        verdicts = ["NaN", "Infinity", "-Infinity"]
        write_run(path, [("eval", {"step": step, "verdict": text}) for step, text in enumerate(verdicts)])
        assert list(read_frame(path, "eval")["verdict"]) == verdicts

    def test_the_documented_read_json_recipe_keeps_every_digit(self, tmp_path: Path) -> None:
        """docs/shipping.md's pandas.read_json recipe (precise_float=True) reads back 5,000 random
        losses bit for bit, where pandas' default float parser misreads many of them."""
        import random

        pandas = pytest.importorskip("pandas")
        rng = random.Random(0)
        losses = [rng.uniform(0, 5) for _ in range(5_000)]
        path = tmp_path / "m.jsonl"
        write_run(path, [("train_step", {"step": step, "loss": loss}) for step, loss in enumerate(losses)])
        recipe = pandas.read_json(path, lines=True, dtype={"loss": "float64"}, precise_float=True)
        assert recipe["loss"].tolist() == losses
        default = pandas.read_json(path, lines=True, dtype={"loss": "float64"})
        assert default["loss"].tolist() != losses  # why the recipe names precise_float
        docs = (Path(__file__).resolve().parents[2] / "docs" / "shipping.md").read_text()
        assert 'dtype={"loss": "float64"}, precise_float=True)' in docs
