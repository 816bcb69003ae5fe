"""Every walk over a payload visits each container once: shared parts and cycles never cost more.

Payloads whose shared sub-objects once took exponential time (or never returned) go through a real
``MetricLogger`` with a text file, a JSONL file and a hook, each in a child process with a timeout,
so a regression fails the test instead of hanging the suite. No timed assertions.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speedtronic.processors.render import DEFAULT_MAX_LINE_BYTES
from tests.reliability.conftest import python, read_records

TIMEOUT_S = 30

LOG_ONE = """
import io, json
from speedtronic.profiling import MetricLogger
seen = []
with MetricLogger(file={text!r}, json_file={jsonl!r}, hooks=[lambda e, p: seen.append(p)]) as logger:
    logger.emit("custom", {{"value": value, "step": 1}})
print(json.dumps({{"hook_calls": len(seen), "hook_keys": sorted(seen[0]), "write_errors": logger.write_errors,
                   "hook_errors": dict(logger.hook_errors)}}))
"""


def log_one(setup: str, tmp_path: Path) -> dict[str, object]:
    """Run ``setup`` (which binds ``value``) and log it once; the child's report."""
    code = setup + "\n" + LOG_ONE.format(text=str(tmp_path / "run.log"), jsonl=str(tmp_path / "m.jsonl"))
    result = python(code, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert isinstance(report, dict)
    return report


class TestSharedSubObjects:
    @pytest.mark.parametrize(
        "setup",
        [
            'root = {"children": []}\nroot["children"] += [{"parent": root}] * 4\nvalue = root',
            "a = []\na.extend([a, a])\nvalue = a",
            "x = []\nfor _ in range(18):\n    x = [x, x]\nvalue = x",
        ],
        ids=["parent_links", "self_pairs", "doubling_18"],
    )
    def test_logged_everywhere_in_time(self, setup: str, tmp_path: Path) -> None:
        """The text log, the JSONL (one strict JSON record) and the hook each get the event."""
        report = log_one(setup, tmp_path)
        assert (report["hook_calls"], report["write_errors"], report["hook_errors"]) == (1, 0, {})
        assert {"step", "value"} <= set(report["hook_keys"])  # type: ignore[call-overload]
        (record,) = read_records(tmp_path / "m.jsonl")  # strict JSON: no NaN literals, no duplicate keys
        assert (record["event"], record["step"]) == ("custom", 1)
        assert "value" in record
        (line,) = (tmp_path / "run.log").read_text().splitlines()
        assert "custom" in line


class TestOverCap:
    def test_200_values_of_5_kb_fit_the_cap(self, tmp_path: Path) -> None:
        """One event of 200 x 5 KB strings: logged, and its JSONL record and text line fit the cap."""
        setup = 'value = {f"k{i}": chr(97 + i % 26) * 5_000 for i in range(200)}'
        report = log_one(setup, tmp_path)
        assert report["write_errors"] == 0
        assert report["hook_calls"] == 1
        data = (tmp_path / "m.jsonl").read_bytes()
        assert len(data) <= DEFAULT_MAX_LINE_BYTES  # the newline included
        (record,) = read_records(tmp_path / "m.jsonl")
        assert (record["event"], record["step"]) == ("custom", 1)
        text = (tmp_path / "run.log").read_bytes()
        assert len(text) <= DEFAULT_MAX_LINE_BYTES
        assert text.count(b"\n") == 1
