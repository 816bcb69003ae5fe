"""Odd and hostile payloads beyond the core's: emit never raises, JSONL is strict, changes are noted."""

from __future__ import annotations

import decimal
import io
import math
from pathlib import Path
from typing import Any

import pytest

from speedtronic.profiling import MetricLogger
from speedtronic.record import NOTE_KEY, NOTE_VERSION
from tests.reliability.conftest import python, read_records


def _nested_lists(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


def _nested_dicts(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"d": value}
    return value


def log_one(path: Path, payload: dict[Any, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Emit ``payload``; the JSONL record and the hook's payload."""
    seen: list[dict[str, Any]] = []
    with MetricLogger(stream=io.StringIO(), json_file=path, hooks=[lambda e, p: seen.append(p)]) as logger:
        logger.emit("custom", payload)
        assert logger.write_errors == 0
    (record,) = read_records(path)
    return record, seen[0]


def note(record: dict[str, Any]) -> dict[str, Any]:
    """The record's note without its fixed entries (contract, origin) and empty lists."""
    full = dict(record[NOTE_KEY])
    assert (full.pop("v"), full.pop("origin")) == (NOTE_VERSION, "user")
    assert (full.pop("part"), full.pop("parts")) == (0, 1)  # a whole record
    full["non_finite"] = {kind: at for kind, at in full["non_finite"].items() if at}
    return {key: value for key, value in full.items() if value}


class TestArraysAndTensors:
    def test_non_contiguous_numpy_arrays(self, jsonl_path: Path) -> None:
        """Transposed, strided and 0-d arrays are written as their values."""
        import numpy as np

        grid = np.arange(12, dtype=np.float32).reshape(3, 4)
        record, hooked = log_one(
            jsonl_path,
            {"t": grid.T, "strided": grid[::2, ::3], "zero_d": np.array(7), "f16": np.float16(0.5)},
        )
        assert record["t"] == grid.T.tolist()
        assert record["strided"] == [[0.0, 3.0], [8.0, 11.0]]
        assert (record["zero_d"], record["f16"]) == (7, 0.5)
        assert hooked["t"] == grid.T.tolist()
        assert note(record) == {}

    def test_nd_bf16_and_grad_tensors(self, jsonl_path: Path) -> None:
        """n-d bf16, requires_grad and non-contiguous tensors become exact lists."""
        import torch

        bf16 = torch.tensor([[1.5, -2.0], [0.25, 3.0]], dtype=torch.bfloat16)
        grad = torch.ones(2, 2, requires_grad=True) * 2
        record, _ = log_one(jsonl_path, {"bf16": bf16, "grad": grad, "t": torch.arange(6).reshape(2, 3).T})
        assert record["bf16"] == [[1.5, -2.0], [0.25, 3.0]]
        assert record["grad"] == [[2.0, 2.0], [2.0, 2.0]]
        assert record["t"] == [[0, 3], [1, 4], [2, 5]]

    def test_large_tensor_is_summarised_and_noted(self, jsonl_path: Path) -> None:
        """A tensor above 1,024 elements is a shape summary, listed as truncated."""
        import torch

        record, _ = log_one(jsonl_path, {"weights": torch.zeros(64, 64)})
        assert record["weights"] == "<tensor shape=[64, 64] dtype=torch.float32>"
        assert note(record) == {"truncated": ["weights"]}


class TestKeys:
    def test_none_nan_and_null_keys_never_collide(self, jsonl_path: Path) -> None:
        """None, "None", "null", two NaN keys and "NaN": six distinct keys, six values, no duplicates."""
        payload = {None: 1, "None": 2, "null": 3, float("nan"): 4, float("nan"): 5, "NaN": 6}
        assert len(payload) == 6  # two NaN objects are two keys
        record, _ = log_one(jsonl_path, payload)  # read_records refuses duplicate keys
        values = {k: v for k, v in record.items() if k not in ("event", "elapsed_s", "timestamp", NOTE_KEY)}
        assert values == {"None#2": 1, "None": 2, "null": 3, "NaN#2": 4, "NaN#3": 5, "NaN": 6}

    def test_a_string_key_keeps_its_name(self, jsonl_path: Path) -> None:
        """A non-string key colliding with a string one is renamed; the string key keeps its name."""
        record, hooked = log_one(jsonl_path, {"step": 1, 1: "int", "1": "str"})
        assert (record["1"], record["1#2"]) == ("str", "int")
        assert (hooked["1"], hooked["1#2"]) == ("str", "int")


class TestDepthAndSize:
    @pytest.mark.parametrize("make", [_nested_lists, _nested_dicts], ids=["lists", "dicts"])
    def test_nesting_deeper_than_orjson_allows(self, make: Any, jsonl_path: Path) -> None:
        """1,000 levels (orjson refuses 255): the record is written, cut at 32 levels, noted."""
        record, _ = log_one(jsonl_path, {"deep": make(1_000), "step": 3})
        assert record["step"] == 3
        assert note(record) == {"truncated": ["deep"]}
        assert "nested deeper than 32 levels" in jsonl_path.read_text()

    def test_multi_megabyte_list(self, jsonl_path: Path) -> None:
        """A 1,000,000-item list is truncated with a marker naming its size; the hook gets it whole."""
        big = list(range(1_000_000))
        record, hooked = log_one(jsonl_path, {"ids": big, "step": 1})
        assert record["step"] == 1
        assert record["ids"].startswith("<truncated: list of 1,000,000 items; first ")
        assert note(record) == {"truncated": ["ids"]}
        assert hooked["ids"] == big

    def test_circular_reference(self, jsonl_path: Path) -> None:
        """A dict containing itself is written with a ``<cycle>`` marker and noted as truncated."""
        loop: dict[str, Any] = {"name": "loop"}
        loop["self"] = loop
        record, hooked = log_one(jsonl_path, {"loop": loop})
        assert record["loop"] == hooked["loop"] == {"name": "loop", "self": "<cycle>"}
        assert note(record) == {"truncated": ["loop"]}

    def test_shared_value_is_written_at_every_place(self, jsonl_path: Path) -> None:
        """A dict shared by two keys is written in full at both, with its NaN noted at both."""
        shared = {"lr": 0.1, "loss": math.nan}
        record, _ = log_one(jsonl_path, {"a": shared, "b": [shared]})
        assert record["a"] == record["b"][0] == {"lr": 0.1, "loss": None}
        assert note(record) == {"non_finite": {"nan": ["/a/loss", "/b/0/loss"]}}

    @pytest.mark.parametrize(
        "setup",
        [
            'root = {"children": []}; root["children"] += [{"parent": root}] * 4; value = root',
            "a = []; a.extend([a, a]); value = a",
            "value = []\nfor _ in range(18): value = [value, value]",
            "value = [0.5]\nfor _ in range(30): value = [value, value]",
        ],
        ids=["parent_links", "self_pairs", "doubling_18", "doubling_30"],
    )
    def test_shared_sub_objects_finish(self, setup: str, tmp_path: Path) -> None:
        """Payloads whose shared parts once took exponential time are logged everywhere (20 s bound)."""
        result = python(
            setup
            + f"""
import io
from speedtronic.profiling import MetricLogger
seen = []
with MetricLogger(stream=io.StringIO(), json_file={str(tmp_path / "m.jsonl")!r},
                  hooks=[lambda e, p: seen.append(p)]) as logger:
    logger.emit("custom", {{"value": value, "step": 1}})
print(len(seen), logger.write_errors)
""",
            timeout=20,
        )
        assert result.stdout.split() == ["1", "0"], result.stderr
        (record,) = read_records(tmp_path / "m.jsonl")
        assert record["step"] == 1


class TestConversionNotes:
    def test_non_finite_and_text_nan_are_told_apart(self, jsonl_path: Path) -> None:
        """loss=NaN is null with its pointer noted; a logged string "NaN" is not noted; None is null."""
        record, _ = log_one(jsonl_path, {"loss": math.nan, "label": "NaN", "grad": None, "lr": -math.inf})
        values = (record["loss"], record["label"], record["grad"], record["lr"])
        assert values == (None, "NaN", None, None)
        assert note(record) == {"non_finite": {"nan": ["/loss"], "neg_inf": ["/lr"]}}

    def test_values_written_as_text_are_listed(self, jsonl_path: Path) -> None:
        """bytes, sets, Decimal, huge ints and lone surrogates are converted, and say so."""
        payload = {
            "ok": 1,
            "raw": b"\x00\xff",
            "tags": {"a"},
            "price": decimal.Decimal("1.10"),
            "big": 2**70,
            "text": "a\ud800b",
            "nested": {"inner": {1, 2}},
        }
        record, _ = log_one(jsonl_path, payload)
        assert record["price"] == "1.10"
        assert record["big"] == str(2**70)
        assert record["text"] == "a\\ud800b"
        assert note(record) == {"converted": ["raw", "tags", "price", "big", "text", "nested"]}
        assert list(record)[-2:] == ["_speedtronic", "timestamp"]

    def test_plain_record_has_an_empty_note(self, jsonl_path: Path) -> None:
        """An ordinary record carries the note in its fixed shape, every list empty: its contract."""
        record, _ = log_one(jsonl_path, {"step": 1, "loss": 0.5, "tags": ["a", "b"], "cfg": {"lr": 1e-3}})
        assert note(record) == {}
