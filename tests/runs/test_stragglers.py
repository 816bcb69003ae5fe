"""Stragglers named from per-rank sync waits (`stragglers`, `summarize --health --rank all`), on
synthetic per-rank logs of a synchronous all-reduce with injected slow ranks."""

from __future__ import annotations

import math
import random
from pathlib import Path

import orjson
import pytest

from speedtronic.runs import summary
from speedtronic.runs.health import stragglers
from speedtronic.runs.summary import summarize_run
from tests.runs.conftest import speedtronic


def all_reduce_run(
    path: Path, ranks: int, steps: int, slow: dict[int, tuple[str, float]], seed: int, restart_at: int = 0
) -> Path:
    """A JSONL of ``ranks`` ranks doing ``steps`` synchronous steps: each rank draws data (2 ms) and
    computes (20 ms) with 3% lognormal noise, a rank in ``slow`` has one of them slowed by its factor,
    and every rank waits at the sync for the slowest. ``restart_at``: a second segment starts there
    (a ``train_start`` per rank), and its first steps are slow on rank 0 only (a warm-up)."""
    rng = random.Random(seed)
    lines = [orjson.dumps({"event": "train_start", "rank": r, "elapsed_s": 0.0}) for r in range(ranks)]
    for step in range(1, steps + 1):
        if restart_at and step == restart_at:
            lines += [
                orjson.dumps({"event": "train_start", "rank": r, "elapsed_s": 0.0}) for r in range(ranks)
            ]
        parts = []
        for rank in range(ranks):
            data = 0.002 * rng.lognormvariate(0, 0.03)
            compute = 0.020 * rng.lognormvariate(0, 0.03)
            kind, factor = slow.get(rank, ("", 1.0))
            data *= factor if kind == "data" else 1.0
            compute *= factor if kind == "compute" else 1.0
            if restart_at and rank == 0 and restart_at <= step < restart_at + 3:
                compute *= 3  # warm-up after the restart: not a straggler
            parts.append((data, compute))
        slowest = max(d + c for d, c in parts)
        for rank, (data, compute) in enumerate(parts):
            record = {"event": "train_step", "rank": rank, "step": step, "loss": 1.0, "data_wait_s": data,
                      "compute_s": compute, "sync_wait_s": slowest - data - compute,
                      "step_time_s": slowest + 0.001, "elapsed_s": step * 0.03}  # fmt: skip
            lines.append(orjson.dumps(record))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


class TestStragglers:
    def test_a_balanced_run_names_none(self, tmp_path: Path) -> None:
        """Eight ranks alike: no straggler."""
        assert stragglers(all_reduce_run(tmp_path / "m.jsonl", 8, 60, {}, seed=1)) == []

    @pytest.mark.parametrize(("kind", "factor"), [("data", 3.0), ("compute", 1.1), ("compute", 1.3)])
    def test_the_slowed_rank_is_named_with_its_cause(self, tmp_path: Path, kind: str, factor: float) -> None:
        """One of eight ranks slowed (data 3x: +20% of a step; compute +10%, +30%): it alone, and why."""
        run = all_reduce_run(tmp_path / "m.jsonl", 8, 60, {5: (kind, factor)}, seed=2)
        (found,) = stragglers(run)
        assert found.rank == 5
        assert found.cause == ("data loading" if kind == "data" else "compute")
        assert found.sync_wait_s < found.median_sync_wait_s

    def test_the_warm_up_after_a_restart_is_ignored(self, tmp_path: Path) -> None:
        """Rank 0 slow for the first steps after a restart only: not named."""
        run = all_reduce_run(tmp_path / "m.jsonl", 8, 60, {}, seed=3, restart_at=30)
        assert stragglers(run) == []

    def test_a_thousand_ranks(self, tmp_path: Path) -> None:
        """1,000 ranks, 20 slowed by 10-30% in data or compute: precision >= 99%, recall >= 95%."""
        rng = random.Random(4)
        slow = {
            rank: (rng.choice(["data", "compute"]), 1 + rng.uniform(0.1, 0.3))
            for rank in rng.sample(range(1000), 20)
        }
        slow = {
            rank: (kind, factor if kind == "compute" else 1 + 10 * (factor - 1))
            for rank, (kind, factor) in slow.items()
        }
        named = {
            item.rank for item in stragglers(all_reduce_run(tmp_path / "m.jsonl", 1000, 40, slow, seed=5))
        }
        true = named & slow.keys()
        assert len(true) / max(len(named), 1) >= 0.99
        assert len(true) / len(slow) >= 0.95

    def test_summarize_names_them(self, tmp_path: Path) -> None:
        """summarize --health --rank all: the straggler's line, and its object in --json."""
        run = all_reduce_run(tmp_path / "m.jsonl", 4, 40, {2: ("compute", 1.3)}, seed=6)
        done = speedtronic("summarize", run, "--health", "--rank", "all", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "rank 2: others wait" in done.stdout
        done = speedtronic("summarize", run, "--health", "--rank", "all", "--json", cwd=tmp_path)
        (row,) = orjson.loads(done.stdout)
        assert [item["rank"] for item in row["health"]["stragglers"]] == [2]


def with_int_waits(path: Path) -> Path:
    """``path`` with every 7th step's ``sync_wait_s`` written as the integer 0 and every 11th without
    one (numbers a fold must read one by one, and steps it must leave out)."""
    lines = []
    for number, raw in enumerate(path.read_bytes().splitlines()):
        record = orjson.loads(raw)
        if record["event"] == "train_step" and number % 7 == 0:
            record["sync_wait_s"] = 0
        elif record["event"] == "train_step" and number % 11 == 0:
            del record["sync_wait_s"]
        lines.append(orjson.dumps(record))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


class TestStragglersInTheSummary:
    """``summarize_run(..., stragglers=True)`` sums each rank's step times in its one pass over the run,
    in pieces and workers: ``rank_times.stragglers()`` names what ``stragglers`` names."""

    @pytest.mark.parametrize("piece_bytes", [1, 300, None])
    @pytest.mark.parametrize("workers", [1, 2])
    @pytest.mark.parametrize("ints", [False, True])
    def test_the_summary_names_what_stragglers_names(
        self,
        tmp_path: Path,
        piece_bytes: int | None,
        workers: int,
        ints: bool,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Eight ranks in one file, restarted once, one slowed: every rank's figures alike, whether the
        file is read whole or a line or two a piece (each segment's warm-up running across pieces)."""
        run = all_reduce_run(tmp_path / "m.jsonl", 8, 60, {5: ("compute", 1.2)}, seed=7, restart_at=30)
        run = with_int_waits(run) if ints else run
        every = stragglers(run, threshold=-math.inf)  # every rank, with its score
        if piece_bytes is not None:
            monkeypatch.setattr(summary, "PIECE_BYTES", piece_bytes)
        read = summarize_run(run, rank="all", workers=workers, stragglers=True)
        assert read.rank_times is not None
        assert read.rank_times.stragglers(-math.inf) == every
        assert [item.rank for item in read.rank_times.stragglers()] == [5]
        assert len(every) == 8

    def test_pieces_of_many_steps_give_the_same_ranks(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Pieces of dozens of steps (a segment's sums added up apart, then together): the same ranks in
        the same order, the figures equal up to rounding."""
        run = all_reduce_run(tmp_path / "m.jsonl", 8, 200, {3: ("data", 3.0)}, seed=8, restart_at=90)
        every = stragglers(run, threshold=-math.inf)
        monkeypatch.setattr(summary, "PIECE_BYTES", 20_000)
        got = summarize_run(run, rank="all", workers=2, stragglers=True).rank_times
        assert got is not None
        found = got.stragglers(-math.inf)
        assert [item.rank for item in found] == [item.rank for item in every]
        for mine, theirs in zip(found, every, strict=True):
            assert vars(mine) == pytest.approx(vars(theirs), rel=1e-12)
            assert mine.cause == theirs.cause

    def test_without_stragglers_nothing_is_summed(self, tmp_path: Path) -> None:
        """The default summary sums no step times (``rank_times`` is ``None``)."""
        run = all_reduce_run(tmp_path / "m.jsonl", 2, 10, {}, seed=9)
        assert summarize_run(run, rank="all").rank_times is None

    def test_a_run_without_sync_waits_names_none(self, tmp_path: Path) -> None:
        """Steps without ``sync_wait_s``: no rank named, as ``stragglers`` says."""
        path = tmp_path / "m.jsonl"
        lines = [{"event": "train_step", "rank": r, "step": s, "step_time_s": 0.1, "elapsed_s": s * 0.1}
                 for s in range(1, 20) for r in range(3)]  # fmt: skip
        path.write_bytes(b"\n".join(map(orjson.dumps, lines)) + b"\n")
        got = summarize_run(path, rank="all", stragglers=True).rank_times
        assert got is not None
        assert got.stragglers() == [] == stragglers(path)
        assert got.sums == {}

    def test_a_run_with_nothing_to_rank_is_not_called_balanced(self, tmp_path: Path) -> None:
        """summarize --rank all --health of ranks without sync_wait_s (or only warm-up steps): the
        stragglers line says there was nothing to rank (was: "none (no rank makes the others wait)")."""
        path = tmp_path / "m.jsonl"
        lines = [{"event": "train_step", "rank": r, "step": s, "step_time_s": 0.1, "elapsed_s": s * 0.1}
                 for s in range(1, 20) for r in range(3)]  # fmt: skip
        path.write_bytes(b"\n".join(map(orjson.dumps, lines)) + b"\n")
        short = all_reduce_run(tmp_path / "short.jsonl", 2, 4, {1: ("data", 3.0)}, seed=1)  # warm-up only
        for run in (path, short):
            done = speedtronic("summarize", run, "--health", "--rank", "all", cwd=tmp_path)
            assert done.returncode == 0, done.stderr
            (line,) = [line for line in done.stdout.splitlines() if line.startswith("stragglers")]
            assert line == (
                "stragglers     - (nothing to rank: sync_wait_s after each segment's warm-up from 0 rank(s), "
                "2 needed)"
            )
