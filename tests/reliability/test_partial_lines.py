"""A record written only in part (a file-size limit): finished once across a fork, counted when given up."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from speedtronic import LoggingFailureWarning
from speedtronic.profiling import MetricLogger
from tests.helpers import parse_jsonl
from tests.reliability.conftest import ROOT, child_env, read_records
from tests.reliability.test_disk_full import small_tmpfs  # noqa: F401  # the fixture, used below

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE and os.fork are POSIX only")

# A real file-size limit (RLIMIT_FSIZE, lowered in this child process only): the record of step 1
# reaches the file in part (`cut`) or not at all (`lost`); then a fork (the limit lifted again), or a
# rotation (the old file stays at its limit, the new one has room).
LIMITED = """
import io, json, os, resource, signal, sys, warnings
warnings.simplefilter("ignore")
from speedtronic.profiling import MetricLogger

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
path, how, then = sys.argv[1:4]
logger = MetricLogger(json_file=path, stream=io.StringIO())
logger.emit("train_step", {"step": 0})
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
room = 800 if how == "cut" else 0
resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path) + room, hard))
logger.emit("train_step", {"step": 1, "pad": "y" * 2000})
if then == "fork":
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    pid = os.fork()
    who = "child" if pid == 0 else "parent"
    if pid:
        os.waitpid(pid, 0)
    logger.emit("train_step", {"step": 2, "who": who})
    lost = dict(logger.lost_records)
    logger.close()
    print(json.dumps({"who": who, "lost": lost}), flush=True)
    os._exit(0)
os.rename(path, path + ".1")  # logrotate's `create`, the old file still full: the next line goes to a new one
logger.emit("train_step", {"step": 2})
logger.close()
print(json.dumps({"lost": dict(logger.lost_records)}))
"""


def run_limited(path: Path, how: str, then: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-c", LIMITED, str(path), how, then],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return parse_jsonl(done.stdout)


def notes(records: list[dict[str, Any]]) -> list[int]:
    return [r["lost_records"] for r in records if r["event"] == "logging_error"]


class TestFork:
    def test_a_line_written_in_part_is_finished_once(self, tmp_path: Path) -> None:
        """A record cut by the size limit, then a fork: both log on, and the cut record is finished once."""
        path = tmp_path / "m.jsonl"
        told = run_limited(path, "cut", "fork")
        records = read_records(path)  # every line whole, strict JSON
        assert [r["step"] for r in records if r["event"] == "train_step"] == [0, 1, 2, 2]
        assert sorted(r.get("who", "") for r in records if r["step"] == 2) == ["child", "parent"]
        assert notes(records) == []
        assert [t["lost"] for t in told] == [{}, {}]

    def test_a_lost_record_is_noted_once(self, tmp_path: Path) -> None:
        """A record the size limit lost entirely, then a fork: one note says so, not one per process."""
        path = tmp_path / "m.jsonl"
        run_limited(path, "lost", "fork")
        records = read_records(path)
        assert [r["step"] for r in records if r["event"] == "train_step"] == [0, 2, 2]
        assert notes(records) == [1]


class TestRotation:
    def test_a_line_given_up_at_a_rotation_is_counted(self, tmp_path: Path) -> None:
        """A cut record rotated away: lost_records counts it, as the new file's note does."""
        path = tmp_path / "m.jsonl"
        (told,) = run_limited(path, "cut", "rotate")
        records = read_records(path)
        assert notes(records) == [1]
        assert [r["step"] for r in records if r["event"] == "train_step"] == [2]
        assert told["lost"] == {str(path): 1}
        rotated = (tmp_path / "m.jsonl.1").read_bytes().split(b"\n")
        assert json.loads(rotated[0])["step"] == 0
        assert not rotated[1].endswith(b"}")  # the cut record stays cut where it was


def parsable(path: Path) -> list[dict[str, Any]]:
    """The records of every line that parses (a record cut at a rotation stays as one that does not)."""
    found = []
    for line in path.read_bytes().split(b"\n"):
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


class TestRealFilesystem:
    def test_a_full_tmpfs_rotated_counts_every_record_missing(self, small_tmpfs: Path) -> None:  # noqa: F811
        """A real 64 KiB tmpfs filled up, the file rotated while a record is in it in part, then space
        returns: lost_records is exactly what is missing from the two files, and what their notes say."""
        path, filler = small_tmpfs / "m.jsonl", small_tmpfs / "filler"
        emitted = 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LoggingFailureWarning)
            logger = MetricLogger(stream=io.StringIO(), json_file=path)
            logger.emit("train_step", {"step": emitted, "blob": "x" * 300})
            with open(filler, "wb", buffering=0) as file:
                try:
                    while file.write(b"\0" * 4096):
                        pass
                except OSError:
                    pass
            while path.read_bytes().endswith(b"\n") and emitted < 1000:  # until one goes in part
                emitted += 1
                logger.emit("train_step", {"step": emitted, "blob": "x" * 300})
            assert not path.read_bytes().endswith(b"\n"), "no record went in part"
            os.rename(path, small_tmpfs / "m.jsonl.1")  # logrotate's `create`, the disk still full
            for _ in range(3):
                emitted += 1
                logger.emit("train_step", {"step": emitted, "blob": "x" * 300})
            filler.unlink()
            for _ in range(3):
                emitted += 1
                logger.emit("train_step", {"step": emitted, "blob": "x" * 300})
            logger.close()
        records = parsable(small_tmpfs / "m.jsonl.1") + parsable(path)
        written = {r["step"] for r in records if r["event"] == "train_step"}
        lost = logger.lost_records.get(str(path), 0)
        assert lost == (emitted + 1) - len(written)
        assert lost == sum(r["lost_records"] for r in records if r["event"] == "logging_error")
