"""``speedtronic.training.launch``: how the ranks agree to start, from the facts each one reports, and
a start that can't complete failing within ``train.dist_timeout_s``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from speedtronic.training.launch import StartError, decide

ROOT = Path(__file__).resolve().parents[2]


def fact(
    rank: int,
    run_dir: str = "/n{node}/run",
    *,
    node: int | None = None,
    shared: bool = False,
    holds_run: bool = True,
    checkpoints: tuple[int, ...] = (3, 6),
    recorded: list[int] | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """What one rank reports; one rank per node unless ``node`` says otherwise."""
    node = rank if node is None else node
    return {
        "node": {"rank": rank, "node_rank": node, "host": f"host{node}", "local_rank": 0},
        "run_dir": run_dir.format(node=node),
        "error": error,
        "shared": shared or rank == 0,
        "holds_run": holds_run,
        "checkpoints": list(checkpoints),
        "recorded": [rank] if recorded is None else recorded,
    }


class TestDecide:
    def test_node_local_directories_that_match_start(self) -> None:
        """Each node's directory holds its own ranks' run and checkpoints: no error, no note."""
        assert decide([fact(0), fact(1)], resume=True) == []

    def test_a_shared_directory_starts(self) -> None:
        """Every rank in rank 0's directory, ranks.json naming all of them."""
        facts = [fact(r, "/shared/run", shared=True, recorded=[0, 1, 2, 3], node=r // 2) for r in range(4)]
        assert decide(facts, resume=True) == []

    def test_a_rank_that_could_not_claim_its_directory_is_named(self) -> None:
        """The first rank's claim error, with its node: the same line on every rank."""
        facts = [fact(0), fact(1, error="/n1/run: already holds a run; continue it with --resume")]
        with pytest.raises(StartError) as caught:
            decide(facts, resume=False)
        assert str(caught.value) == (
            "rank 1 (node 1, host host1, local rank 0): /n1/run: already holds a run; continue it with "
            "--resume"
        )

    def test_ranks_moved_between_nodes_are_detected(self) -> None:
        """Node 1's directory held rank 1 and now gets rank 0: the message says to pin node ranks or
        share the directory."""
        facts = [fact(0, "/n1/run", recorded=[1]), fact(1, "/n0/run", recorded=[0])]
        with pytest.raises(
            StartError,
            match=r"^--resume: rank 1 .*/n0/run holds the files of rank\(s\) 0 "
            r"from the last launch, and now would get rank\(s\) 1: the ranks moved between "
            r"nodes .* static rendezvous .* shared file system$",
        ):
            decide(facts, resume=True)

    def test_more_ranks_on_a_shared_directory_are_no_move(self) -> None:
        """A shared directory's ranks may sit on any node: two more ranks resuming it are told they lack
        the checkpoint, not that ranks moved."""
        facts = [
            fact(
                r,
                "/shared/run",
                shared=True,
                recorded=[0, 1],
                node=r // 2,
                checkpoints=(3, 6) if r < 2 else (),
            )
            for r in range(4)
        ]
        with pytest.raises(
            StartError,
            match=r"^--resume: rank 2 .* missing /shared/run/checkpoints/"
            r"step_00000006.rank2.pt",
        ):
            decide(facts, resume=True)

    def test_a_missing_checkpoint_names_the_node_rank_and_file(self) -> None:
        with pytest.raises(
            StartError,
            match=r"^--resume: rank 1 \(node 1, host host1, local rank 0\) has no "
            r"checkpoint of step 6: missing /n1/run/checkpoints/step_00000006.rank1.pt: "
            r"rank\(s\) 0 hold it\.",
        ):
            decide([fact(0), fact(1, checkpoints=())], resume=True)

    def test_rank_0_without_checkpoints_while_another_holds_some_fails(self) -> None:
        """Never a quiet restart from step 0: rank 0 is named, with the newest step another holds."""
        with pytest.raises(
            StartError,
            match=r"rank 0 .* has no checkpoint of step 6: missing "
            r"/n0/run/checkpoints/step_00000006.pt",
        ):
            decide([fact(0, checkpoints=()), fact(1)], resume=True)

    def test_a_rank_behind_resumes_everyone_from_the_newest_common_step_with_a_note(self) -> None:
        (note,) = decide([fact(0, checkpoints=(3, 6)), fact(1, checkpoints=(3,))], resume=True)
        assert note == (
            "--resume: rank 1 (node 1, host host1, local rank 0) has no checkpoint of step 6: missing "
            "/n1/run/checkpoints/step_00000006.rank1.pt; every rank resumes from step 3, the newest all of "
            "them hold"
        )

    def test_a_node_directory_without_a_run_fails_when_another_holds_one(self) -> None:
        """No checkpoint anywhere, but node 0's directory holds a run and node 1's none: a wrong --run-dir."""
        facts = [fact(0, checkpoints=()), fact(1, holds_run=False, checkpoints=(), recorded=[])]
        with pytest.raises(StartError, match=r"^--resume: rank 1 .*/n1/run holds no run, while rank 0 "):
            decide(facts, resume=True)

    def test_a_fresh_job_with_resume_starts_from_scratch(self) -> None:
        """No directory holds anything yet: --resume has nothing to resume, and that is no error."""
        facts = [fact(r, holds_run=False, checkpoints=(), recorded=[]) for r in (0, 1)]
        assert decide(facts, resume=True) == []

    def test_without_resume_the_checkpoints_are_not_looked_at(self) -> None:
        assert decide([fact(0, recorded=[1]), fact(1, checkpoints=())], resume=False) == []


STALLED = textwrap.dedent(
    """
    import datetime, os, sys, time
    if os.environ["RANK"] == "0":
        from speedtronic.commands.cli import main
        sys.exit(main(["train", "--no-progress", "--config", sys.argv[1], "--run-dir", sys.argv[2]]))
    import torch.distributed as dist
    # Waits as long as rank 0 takes to come (its start imports more: seconds later on a loaded
    # machine; a short wait here would fail this rank first and torchrun would stop rank 0).
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    time.sleep(600)  # joins the group, then never takes part in the start
    """
)


def test_a_peer_that_never_joins_the_start_is_one_line_within_the_timeout(tmp_path: Path) -> None:
    """Rank 1 forms the process group and then stalls: rank 0 fails with one line naming itself and
    train.dist_timeout_s (2 s here) instead of waiting torch's 30 minutes."""
    pytest.importorskip("torch")
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump({"train": {"dist_timeout_s": 2, "device": "cpu"}, "logging": {"hooks": []}})
    )
    script = tmp_path / "stalled.py"
    script.write_text(STALLED)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(script),
            str(config),
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert result.returncode != 0
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("speedtronic: error:")]
    assert line.startswith("speedtronic: error: rank 0 (node 0, host "), line
    assert "within train.dist_timeout_s=2 s" in line
