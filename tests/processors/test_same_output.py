"""The emit path writes the same bytes as ``main``: ``benchmarks/same_output.py`` with a fuzz of varied and
hostile events, run against a copy of the ``main`` branch (``git archive``) in a separate interpreter."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def main_checkout(into: Path) -> Path:
    """The ``main`` branch's files under ``into``; skipped where there is no git or no ``main``."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    archive = into / "main.tar"
    made = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--output", str(archive), "main"], capture_output=True, text=True
    )
    if made.returncode != 0:
        pytest.skip(f"no main branch to compare with: {made.stderr.strip()}")
    checkout = into / "main"
    with tarfile.open(archive) as tar:
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python 3.10.12+
        tar.extractall(checkout, **safe)  # our own repository's files
    return checkout


class TestSameBytesAsMain:
    def test_fuzzed_events_write_the_same_text_and_jsonl(self, tmp_path: Path) -> None:
        """400 seeded random events (wide payloads with repeating and fresh key sets, hostile keys and
        values) plus the fixed set give byte-identical text logs and JSONL files, timestamps aside."""
        other = main_checkout(tmp_path)
        result = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "same_output.py"), str(other), "--fuzz", "400"],
            capture_output=True, text=True, timeout=600, cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
        assert result.stdout.count("identical") == 4, result.stdout
