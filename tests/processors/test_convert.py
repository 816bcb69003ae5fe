"""Value conversion walks each container once: cycles become markers, shared ones are converted once."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog
import structlog.contextvars
from structlog.testing import LogCapture

from speedtronic.processors import ConvertValues
from speedtronic.processors.convert import (
    CYCLE,
    MAX_REPEATS,
    Truncated,
    json_safe_record,
    to_python,
    truncate,
)
from speedtronic.record import empty_note, restore_non_finite
from tests.reliability.conftest import python


def cyclic_dict() -> dict[str, Any]:
    loop: dict[str, Any] = {"name": "loop"}
    loop["self"] = loop
    return loop


def doubling(levels: int, leaf: Any) -> Any:
    """``x = [x, x]`` nested ``levels`` times: 2**levels paths through ``levels + 1`` objects."""
    x = leaf
    for _ in range(levels):
        x = [x, x]
    return x


class TestToPython:
    def test_a_cycle_becomes_a_marker(self) -> None:
        """A container met inside itself is the ``<cycle>`` marker, a ``Truncated`` string."""
        out = to_python(cyclic_dict())
        assert out == {"name": "loop", "self": CYCLE}
        assert isinstance(out["self"], Truncated)

    def test_a_shared_container_is_converted_once(self) -> None:
        """A list shared by two places is converted once and the result used in both."""
        shared = [1, 2]
        out = to_python({"a": shared, "b": (shared, shared)})
        assert out == {"a": [1, 2], "b": [[1, 2], [1, 2]]}
        assert out["b"][0] is out["a"]

    def test_nesting_deeper_than_the_limit_is_a_marker(self) -> None:
        """Containers below 32 levels are cut with a marker instead of being passed on as they are."""
        deep: Any = []
        for _ in range(40):
            deep = [deep]
        out = to_python(deep)
        for _ in range(32):
            out = out[0]
        assert out == "<truncated: nested deeper than 32 levels>"

    def test_numpy_object_arrays_are_converted_inside(self) -> None:
        """An object array's items are converted like any value (tensors, numpy numbers)."""
        import numpy as np

        out = to_python(np.array([{"x": np.float32(0.5)}, np.int64(3)], dtype=object))
        assert out == [{"x": 0.5}, 3]
        assert type(out[1]) is int

    def test_repeats_are_bounded(self) -> None:
        """Repeats of shared containers stop adding values past ``MAX_REPEATS``: later ones are markers."""
        out = to_python(doubling(24, 0.5))
        text = json.dumps(out)
        assert "repeated>" in text
        assert text.count("0.5") <= MAX_REPEATS + 25


class TestJsonSafeRecord:
    def test_cycle_is_noted_as_truncated(self) -> None:
        """A cycle is written as ``<cycle>`` and its key listed under ``truncated``."""
        record = json_safe_record({"loop": cyclic_dict()})
        assert record["loop"] == {"name": "loop", "self": "<cycle>"}
        assert record["_speedtronic"] == {**empty_note(), "truncated": ["loop"]}

    def test_shared_container_keeps_every_note(self) -> None:
        """A shared container's notes and non-finite pointers hold at every place it appears."""
        shared = {"y": [1.0, math.nan], "raw": b"x"}
        record = json_safe_record({"p": shared, "q": [shared, shared]})
        assert record["_speedtronic"] == {
            **empty_note(),
            "converted": ["p", "q"],
            "non_finite": {"nan": ["/p/y/1", "/q/0/y/1", "/q/1/y/1"], "inf": [], "neg_inf": []},
        }
        back = restore_non_finite(json.loads(orjson.dumps(record)))
        assert all(math.isnan(v) for v in (back["p"]["y"][1], back["q"][0]["y"][1], back["q"][1]["y"][1]))

    def test_self_containing_list_pairs(self) -> None:
        """``a = []; a.extend([a, a])`` is two cycle markers."""
        a: list[Any] = []
        a.extend([a, a])
        assert json_safe_record({"a": a})["a"] == ["<cycle>", "<cycle>"]


class TestTruncate:
    def test_head_of_a_shared_structure(self) -> None:
        """``truncate`` writes only the head it keeps, in Python's text style, with cycles marked."""
        a: list[Any] = []
        a.extend([a, a])
        assert truncate(a, 50) == "<truncated: list of 2 items; first 18 chars: [<cycle>, <cycle>]>"
        text = "<truncated: dict of 1 items; first 15 chars: {'a': [1, 'b']}>"
        assert truncate({"a": [1, "b"]}, 100) == text
        assert truncate(doubling(60, 1), 20) == f"<truncated: list of 2 items; first 20 chars: {'[' * 20}>"


class TestExponentialPayloadsFinish:
    @pytest.mark.parametrize(
        "setup",
        [
            'root = {"children": []}; root["children"] += [{"parent": root}] * 4; value = root',
            "a = []; a.extend([a, a]); value = a",
            "value = []\nfor _ in range(18): value = [value, value]",
            "value = [float('nan')]\nfor _ in range(31): value = [value, value]",
        ],
        ids=["parent_links", "self_pairs", "doubling_18", "doubling_31_nan"],
    )
    def test_every_walk_finishes(self, setup: str) -> None:
        """to_python, json_safe_record, truncate and a full JSONL render finish (20 s bound)."""
        result = python(
            setup
            + """
from speedtronic.processors.convert import json_safe_record, to_python, truncate
from speedtronic.processors.render import JSONLRenderer
to_python(value)
json_safe_record({"v": value})
truncate(value, 900)
line = JSONLRenderer(max_line_bytes=32_000)(None, "info", {"event": "e", "v": to_python(value)})
assert len(line) < 32_000
print("ok")
""",
            timeout=20,
        )
        assert result.stdout.strip() == "ok", result.stderr


class TestConvertValuesInAStockChain:
    def test_called_directly(self) -> None:
        """Numpy values become Python numbers; a value shared by two keys is converted once."""
        import numpy as np

        shared = [np.float64(1.5)]
        out = ConvertValues()(None, "info", {"event": "x", "a": shared, "b": shared, "n": np.int64(2)})
        assert out == {"event": "x", "a": [1.5], "b": [1.5], "n": 2}
        assert out["a"] is out["b"]

    def test_bound_context_and_contextvars(self) -> None:
        """Bound and contextvar fields are converted like the event's own."""
        import numpy as np

        capture = LogCapture()
        logger = structlog.wrap_logger(
            None, processors=[structlog.contextvars.merge_contextvars, ConvertValues(), capture]
        ).bind(lr=np.float32(0.25))
        structlog.contextvars.bind_contextvars(rank=np.int64(1))
        try:
            logger.info("train_step", loop=cyclic_dict())
        finally:
            structlog.contextvars.clear_contextvars()
        (entry,) = capture.entries
        assert (entry["lr"], entry["rank"]) == (0.25, 1)
        assert entry["loop"] == {"name": "loop", "self": "<cycle>"}


class RaisingStr(str):
    def __str__(self) -> str:
        raise RuntimeError("no __str__")


class RaisingFloat(float):
    def __float__(self) -> float:
        raise RuntimeError("no __float__")

    def __str__(self) -> str:
        raise RuntimeError("no __str__")


class RaisingInt(int):
    def __int__(self) -> int:
        raise RuntimeError("no __int__")

    def __index__(self) -> int:
        raise RuntimeError("no __index__")

    def __str__(self) -> str:
        raise RuntimeError("no __str__")


class TestRaisingConversions:
    def test_subclasses_with_raising_conversions_reach_every_sink(self, tmp_path: Path) -> None:
        """A str, float or int subclass whose __str__/__float__/__int__ raises: the text line, the
        JSONL record and the hooks all get its value."""
        import io

        from speedtronic.profiling import MetricLogger
        from tests.helpers import read_jsonl

        payloads: list[dict[str, Any]] = []
        text = io.StringIO()
        path = tmp_path / "m.jsonl"
        with MetricLogger(stream=text, json_file=path, hooks=[lambda e, p: payloads.append(p)]) as logger:
            logger.emit("x", {"s": RaisingStr("hello"), "f": RaisingFloat(1.5), "i": RaisingInt(7)})
            assert logger.write_errors == 0
        (record,) = read_jsonl(path)
        assert (record["s"], record["f"], record["i"]) == ("hello", 1.5, 7)
        assert " s=hello f=1.5 i=7 " in text.getvalue()
        assert len(payloads) == 1


class Image:
    """Stands in for a ``wandb.Image`` or a figure: an object with Python's default ``repr``."""


class TestObjectsWithTheDefaultRepr:
    def test_written_as_their_type_without_an_address(self, tmp_path: Path) -> None:
        """An object printing only ``<... object at 0x...>`` is written as ``<module.Type object>`` in
        the JSONL (noted as converted) and the text line, and the hooks still get the object."""
        from speedtronic.profiling import MetricLogger

        seen: list[Any] = []
        image = Image()
        logger = MetricLogger(
            file=tmp_path / "m.log",
            json_file=tmp_path / "m.jsonl",
            hooks=[lambda event, payload: seen.append(payload["sample"])],
        )
        logger.emit("eval", {"sample": image, "nested": [image]})
        logger.close()
        placeholder = f"<{__name__}.Image object>"
        record = json.loads((tmp_path / "m.jsonl").read_text())
        assert (record["sample"], record["nested"]) == (placeholder, [placeholder])
        assert record["_speedtronic"]["converted"] == ["sample", "nested"]
        assert f'sample="{placeholder}"' in (tmp_path / "m.log").read_text()
        assert seen == [image]

    def test_an_object_with_its_own_text_keeps_it(self) -> None:
        """A class with its own ``__repr__`` or ``__str__`` is written by it, as before."""

        class Own:
            def __repr__(self) -> str:
                return "Own(3)"

        assert json_safe_record({"o": Own(), "x": object()})["o"] == "Own(3)"
        assert json_safe_record({"x": object()})["x"] == "<object object>"
