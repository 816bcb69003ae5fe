"""The emit path writes the same bytes as the reference commit: ``benchmarks/same_output.py`` with a fuzz of
varied and hostile events, run against a copy of ``REFERENCE`` (``git archive``) in a separate interpreter.

``REFERENCE`` is the last commit before the emit path was rebuilt for speed (release 0.3.0's work). The fuzz
leaves out the deliberate byte changes made since (the default-repr placeholder, ``str``-subclass keys written
as their value, the new redactions); a later deliberate change to the bytes moves ``REFERENCE`` forward."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = "488442600314499846b036dbf671d24741399502"


def reference_checkout(into: Path) -> Path:
    """``REFERENCE``'s files under ``into``; skipped where there is no git or a shallow clone lacks it."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    archive = into / "reference.tar"
    made = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--output", str(archive), REFERENCE],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"the reference commit is not in this clone: {made.stderr.strip()}")
    checkout = into / "reference"
    with tarfile.open(archive) as tar:
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python 3.10.12+
        tar.extractall(checkout, **safe)  # our own repository's files
    return checkout


class TestSameBytesAsReference:
    def test_fuzzed_events_write_the_same_text_and_jsonl(self, tmp_path: Path) -> None:
        """400 seeded random events (wide payloads with repeating and fresh key sets, hostile keys and
        values) plus the fixed set give byte-identical text logs and JSONL files, timestamps aside."""
        other = reference_checkout(tmp_path)
        result = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "same_output.py"), str(other), "--fuzz", "400"],
            capture_output=True, text=True, timeout=600, cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
        assert result.stdout.count("identical") == 4, result.stdout
