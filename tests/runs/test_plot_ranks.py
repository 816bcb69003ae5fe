"""plot --rank all: one series per rank, in the legend, capped with a note."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from speedtronic.runs.plot import MAX_RANK_SERIES, plot_runs
from tests.runs.conftest import speedtronic

pytest.importorskip("matplotlib")


def ranked_run(path: Path, ranks: int) -> Path:
    """One JSONL holding ``ranks`` ranks' train_step records (loss = rank + step / 10)."""
    lines = [
        {"event": "train_step", "step": step, "loss": rank + step / 10, "rank": rank}
        for step in (1, 2, 3)
        for rank in range(ranks)
    ]
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


class TestEveryRank:
    def test_one_series_per_rank(self, tmp_path: Path) -> None:
        """Three ranks: three loss series, each with its own rank's points and its label in the legend."""
        run = ranked_run(tmp_path / "m.jsonl", 3)
        result = plot_runs([run], tmp_path / "p.png", keys=["loss"], rank="all", labels=["run"])
        assert [(s.run, s.rank, list(s.x), list(s.y)) for s in result.series] == [
            (f"run rank {rank}", rank, [1.0, 2.0, 3.0], [rank + 0.1, rank + 0.2, rank + 0.3])
            for rank in range(3)
        ]
        assert result.ranks_not_drawn == {}
        assert (tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")

    def test_ranks_beyond_the_cap_are_counted_and_noted(self, tmp_path: Path) -> None:
        """MAX_RANK_SERIES ranks drawn, the rest counted; the CLI says so on one line."""
        extra = 4
        run = ranked_run(tmp_path / "m.jsonl", MAX_RANK_SERIES + extra)
        result = plot_runs([run], tmp_path / "p.svg", keys=["loss"], rank="all", labels=["run"])
        assert [s.rank for s in result.series] == list(range(MAX_RANK_SERIES))
        assert result.ranks_not_drawn == {"run": extra}
        assert f"{extra} more rank(s) not drawn" in (tmp_path / "p.svg").read_text()
        done = speedtronic("plot", run, "-o", "q.png", "--keys", "loss", "--rank", "all", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert f"{extra} more rank(s) not drawn" in done.stderr

    def test_one_rank_is_one_series_as_before(self, tmp_path: Path) -> None:
        """--rank 1 draws rank 1's points under the run's own name."""
        run = ranked_run(tmp_path / "m.jsonl", 3)
        result = plot_runs([run], tmp_path / "p.png", keys=["loss"], rank=1, labels=["run"])
        assert [(s.run, list(s.y)) for s in result.series] == [("run", [1.1, 1.2, 1.3])]
