"""``speedtronic tail``'s end line: how each rank's run ended, in text and in JSON."""

from __future__ import annotations

import json
from pathlib import Path

from speedtronic.commands.tail import end_line
from tests.commands.test_tail import tail


def ended_run(run: Path, statuses: dict[int, str | None]) -> None:
    """A run directory of one file per rank, each rank started, stepped and ended with ``statuses``."""
    run.mkdir()
    for rank, status in statuses.items():
        end = {"event": "train_end", "step": 7, "rank": rank, "world_size": len(statuses)}
        end |= {} if status is None else {"status": status}
        if status == "failed":
            end["error"] = "RuntimeError: Connection reset by peer"
        lines = [
            {"event": "train_start", "rank": rank, "world_size": len(statuses), "target_step": 7},
            {"event": "train_step", "step": 7, "rank": rank, "world_size": len(statuses), "loss": 1.0},
            end,
        ]
        name = "metrics.jsonl" if rank == 0 else f"metrics.rank{rank}.jsonl"
        (run / name).write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_a_failed_run_says_so_in_its_end_line(tmp_path: Path) -> None:
    """Rank 1 killed: rank 0's train_end says failed, rank 1's (after a SIGTERM) interrupted, rank 2
    completed: the end line names how the others ended, ranks grouped by status (was: only "run ended")."""
    ended_run(tmp_path / "r", {0: "failed", 1: "interrupted", 2: "completed", 3: "failed"})
    watcher = tail(tmp_path / "r", "--no-state")
    out, err = watcher.communicate(timeout=120)
    assert watcher.returncode == 0, err
    assert out.splitlines()[-1] == (
        "run ended (train_end from ranks 0-3): failed on ranks 0, 3; interrupted on rank 1"
    )
    watcher = tail(tmp_path / "r", "--no-state", "--json")
    out, err = watcher.communicate(timeout=120)
    assert watcher.returncode == 0, err
    assert json.loads(out.splitlines()[-1]) == {
        "kind": "end",
        "ranks": [0, 1, 2, 3],
        "statuses": ["failed", "interrupted", "completed", "failed"],
    }


def test_a_completed_run_keeps_its_short_end_line(tmp_path: Path) -> None:
    """Every rank completed (or wrote no status): the line names the ranks only."""
    ended_run(tmp_path / "r", {0: "completed", 1: None})
    watcher = tail(tmp_path / "r", "--no-state")
    out, err = watcher.communicate(timeout=120)
    assert watcher.returncode == 0, err
    assert out.splitlines()[-1] == "run ended (train_end from ranks 0, 1)"


def test_a_thousand_rank_job_ends_in_a_short_line() -> None:
    """Ranks are written in spans: 1,000 ranks are ``0-999``, not 1,000 numbers (was: a 3,890-character
    line), and the ranks that failed among them as well."""
    statuses = ["completed"] * 1000
    for rank in (3, 4, 5, 900):
        statuses[rank] = "failed"
    assert end_line(list(range(1000)), statuses) == (
        "run ended (train_end from ranks 0-999): failed on ranks 3-5, 900"
    )


def test_a_node_local_run_directory_ends_with_its_own_ranks(tmp_path: Path) -> None:
    """Two nodes on node-local disks: node 1's directory holds rank 1's file and a ranks.json naming
    rank 1 alone; rank 0's file is on node 0. Followed on node 1, the run ends when rank 1 does (was:
    the watcher waited for rank 0 of world_size 2 for ever)."""
    ended_run(tmp_path / "n0", {0: "completed", 1: "completed"})
    node1 = tmp_path / "n1"
    node1.mkdir()
    (tmp_path / "n0" / "metrics.rank1.jsonl").rename(node1 / "metrics.rank1.jsonl")
    ranks = {
        "launch": "a1",
        "world_size": 2,
        "ranks": [{"rank": 1, "node_rank": 1, "host": "n1", "local_rank": 0}],
    }
    (node1 / "ranks.json").write_text(json.dumps(ranks))
    watcher = tail(node1, "--no-state")
    try:
        out, err = watcher.communicate(timeout=120)
    finally:
        watcher.kill()
    assert watcher.returncode == 0, err
    assert out.splitlines()[-1] == "run ended (train_end from rank 1)"
