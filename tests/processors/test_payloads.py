"""Bad and hostile payloads: emit never raises, JSONL stays strict, text stays one line per event."""

from __future__ import annotations

import decimal
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest

from speedtronic.profiling import MetricLogger
from tests.helpers import read_jsonl


def _circular() -> dict[str, Any]:
    d: dict[str, Any] = {"name": "loop"}
    d["self"] = d
    return d


def _deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    __repr__ = __str__


def _payloads() -> dict[str, dict[Any, Any]]:
    import numpy as np
    import torch

    return {
        "nan_inf": {"loss": math.nan, "up": math.inf, "down": -math.inf},
        "tensors": {
            "zero_d": torch.tensor(1.5),
            "grad": torch.tensor(2.0, requires_grad=True) * 2,
            "bf16": torch.tensor(3.0, dtype=torch.bfloat16),
            "nd": torch.arange(6).reshape(2, 3),
            "nan_tensor": torch.tensor(float("nan")),
        },
        "numpy": {
            "scalar": np.float64(0.5),
            "int": np.int32(7),
            "array": np.arange(6).reshape(2, 3)[:, ::2],
            "zero_d_array": np.array(4.0),
        },
        "non_str_keys": {1: "a", "1": "b", None: "c", math.nan: "d", (1, 2): "e", False: "f"},
        "odd_values": {
            "bytes": b"\x00\xff",
            "set": {1, 2},
            "decimal": decimal.Decimal("1.10"),
            "complex": 1 + 2j,
            "unprintable": Unprintable(),
        },
        "circular": {"loop": _circular()},
        "deep": {"deep": _deep(300)},
        "big_ints": {"big": 2**70, "huge": 10**5000, "neg": -(2**64)},
        "surrogates": {"lone": "a\ud800b", "\udcffkey": 1},
        "huge_string": {"text": "x" * 3_000_000},
        "line_breakers": {
            "newline\nkey": "new\nline",
            "cr": "a\rb",
            "ansi": "\x1b[2J\x1b[31mred",
            "seps": "a\u2028b\u2029c\x85d\x0b\x0c\x1c\x1d\x1e",
            "fake": "x | ERROR | forged=1\n2026-01-01 00:00:00 | ERROR | fake_event",
        },
        "event_key": {"event": "forged", "step": 1},
    }


CASES = list(_payloads())


@pytest.mark.parametrize("case", CASES)
def test_emit_never_raises_and_output_stays_valid(case: str, tmp_path: Path) -> None:
    """Each hostile payload gives exactly one strict-JSON record and one text line."""
    payload = _payloads()[case]
    text, jsonl = tmp_path / "train.log", tmp_path / "metrics.jsonl"
    seen: list[tuple[str, dict[Any, Any]]] = []
    with MetricLogger(file=text, json_file=jsonl, hooks=[lambda e, p: seen.append((e, p))]) as logger:
        logger.emit("custom", payload)
        logger.emit("after", {"ok": True})
        assert logger.write_errors == 0
    records = read_jsonl(jsonl)
    assert [r["event"] for r in records] == ["custom", "after"]
    raw = text.read_bytes()
    assert raw.count(b"\n") == 2
    assert len(raw.decode("utf-8").splitlines()) == 2
    assert b"\x1b" not in raw
    assert [e for e, _ in seen] == ["custom", "after"]


def test_non_finite_is_distinguishable_from_missing(jsonl_path: Path) -> None:
    """NaN is null and noted, None stays null and is not: a diverged loss is not hidden."""
    with MetricLogger(stream=io.StringIO(), json_file=jsonl_path) as logger:
        logger.emit("train_step", {"step": 1, "loss": math.nan, "grad_norm": None, "lr": math.inf})
    (record,) = read_jsonl(jsonl_path)
    assert (record["loss"], record["grad_norm"], record["lr"]) == (None, None, None)
    assert record["_speedtronic"]["non_finite"] == {"nan": ["/loss"], "inf": ["/lr"], "neg_inf": []}


def test_colliding_keys_stay_distinct(jsonl_path: Path) -> None:
    """1 and "1", None and "None" don't overwrite each other: no duplicate keys, no lost value."""
    with MetricLogger(stream=io.StringIO(), json_file=jsonl_path) as logger:
        logger.emit("x", {1: "int", "1": "str", None: "none", "None": "str-none"})
    line = jsonl_path.read_text().splitlines()[0]
    pairs = json.loads(line, object_pairs_hook=list)
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys))
    assert sorted(v for k, v in pairs if k not in ("event", "elapsed_s", "timestamp", "_speedtronic")) == [
        "int",
        "none",
        "str",
        "str-none",
    ]


def test_tensor_values_in_jsonl(jsonl_path: Path) -> None:
    """Tensors are written as numbers and lists; a NaN tensor is null, noted as NaN."""
    import torch

    with MetricLogger(stream=io.StringIO(), json_file=jsonl_path) as logger:
        logger.emit("x", {"a": torch.tensor(0.25), "b": torch.ones(2), "c": torch.tensor(float("nan"))})
    (record,) = read_jsonl(jsonl_path)
    assert (record["a"], record["b"], record["c"]) == (0.25, [1.0, 1.0], None)
    assert record["_speedtronic"]["non_finite"] == {"nan": ["/c"], "inf": [], "neg_inf": []}


def test_forged_line_stays_inside_its_field(tmp_path: Path) -> None:
    """A value imitating a log line stays one quoted field of the real line."""
    text = tmp_path / "t.log"
    with MetricLogger(file=text) as logger:
        logger.emit("x", {"msg": "ok\n2026-01-01 00:00:00 | ERROR | fake_event admin=1"})
    (line,) = text.read_text().splitlines()
    assert line.endswith(
        ' | INFO | x msg="ok\\n2026-01-01 00:00:00 | ERROR | fake_event admin=1" ' + line.rsplit(" ", 1)[1]
    )
