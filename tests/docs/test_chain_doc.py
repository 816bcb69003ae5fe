"""docs/processors.md lists the chain's stages in the order MetricLogger runs them."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from speedtronic.distributed import RankInfo
from speedtronic.profiling import MetricLogger

DOC = Path(__file__).resolve().parents[2] / "docs" / "processors.md"
_ITEM = re.compile(r"^\d+\. \*\*(?:`(?P<stage>\w+)(?:\([^`]*\))?`|(?P<yours>Your processors))\*\*")


def documented_stages() -> list[str]:
    """The numbered list after ``<!-- chain -->``: each item's stage name, ``*`` for yours."""
    text = DOC.read_text("utf-8")
    lines = text[text.index("<!-- chain -->") :].splitlines()[1:]
    stages = []
    for line in lines:
        if not line.strip():
            if stages:
                break
            continue
        match = _ITEM.match(line)
        if match:
            stages.append(match["stage"] or "*")
    return stages


def mine(logger: Any, method_name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    return event_dict


def test_the_documented_chain_is_the_loggers(tmp_path: Path) -> None:
    """With every optional stage on, logger.processors has the documented stages in that order."""
    with MetricLogger(
        stream=io.StringIO(),
        json_file=tmp_path / "m.jsonl",
        processors=[mine],
        rank=RankInfo(rank=0, world_size=2, local_rank=0),
    ) as logger:
        actual = ["*" if stage is mine else type(stage).__name__ for stage in logger.processors]
    assert actual == documented_stages()
    assert (actual[0], actual[-1]) == ("CadenceFilter", "DispatchHooks")


def test_optional_stages_are_left_out(tmp_path: Path) -> None:
    """redact=False, one process and no json_file: Redact, AddRank and the JSONL writer are absent."""
    with MetricLogger(stream=io.StringIO(), redact=False) as logger:
        names = [type(stage).__name__ for stage in logger.processors]
    expected = [name for name in documented_stages() if name not in ("Redact", "AddRank", "*")]
    expected.remove("WriteLines")  # the text log's only
    assert names == expected
