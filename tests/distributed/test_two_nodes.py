"""Two ``torchrun`` agents on 127.0.0.1 standing in for two nodes with node-local disks: each agent
runs in its own folder with its own run directory (static rendezvous, gloo on the CPU). Node 1 names
its run directory differently from node 0 (``--run-dir node1``): each node's own is honoured."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from speedtronic.processors.validate import payload_problems
from tests.helpers import read_jsonl

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
B_RUN = "node1"
"""Node 1's run directory: named unlike node 0's ``run``."""
WAIT_S = 300
"""How long a launch may take on a loaded machine: a bound against hangs, never an assertion."""
CONFIG = {
    "model": {"hidden": 16},
    "train": {
        "steps": 6,
        "checkpoint_every": 3,
        "batch_size": 4,
        "device": "cpu",
        "warmup_steps": 2,
        "outer_every": 3,
    },
    "logging": {"every_steps": 1, "hooks": [], "validate": True},
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def agent(folder: Path, node_rank: int, port: int, *args: str) -> subprocess.Popen[str]:
    """``torchrun --nnodes 2 --node-rank N ... -m speedtronic train ARGS`` started in ``folder``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "2",
            "--nproc-per-node",
            "1",
            "--node-rank",
            str(node_rank),
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(port),
            "-m",
            "speedtronic",
            "train",
            "--no-progress",
            *args,
        ],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def resume(
    nodes: dict[Path, int], *args: str, extra: dict[Path, list[str]] | None = None
) -> dict[Path, subprocess.CompletedProcess[str]]:
    """The documented restart, ``--run-dir <its run> --resume ARGS`` (then the folder's ``extra``), one
    agent per folder (with its node rank); each one's outcome once all end."""
    port = free_port()
    started = {
        folder: agent(
            folder,
            node_rank,
            port,
            "--run-dir",
            run_of(folder).name,
            "--resume",
            *args,
            *(extra or {}).get(folder, []),
        )
        for folder, node_rank in nodes.items()
    }
    return {folder: finish(process) for folder, process in started.items()}


def finish(process: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    try:
        out, err = process.communicate(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"torchrun did not end within {WAIT_S} s: {err[-3000:]}")
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def run_of(folder: Path) -> Path:
    return folder / ("run" if folder.name == "a" else B_RUN)


def our_errors(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("speedtronic: error:")]


def events(path: Path, name: str) -> list[dict[str, Any]]:
    return [record for record in read_jsonl(path) if record["event"] == name]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folders a (node 0) and b (node 1), each holding the run directory ``run`` its node wrote: 6
    steps of the outer loop, checkpoints at 3 and 6."""
    root = tmp_path_factory.mktemp("two-nodes")
    for name in "ab":
        (root / name).mkdir()
        (root / name / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    port = free_port()
    started = [
        agent(root / "a", 0, port, "--config", "config.yaml", "--run-dir", "run"),
        agent(root / "b", 1, port, "--config", "config.yaml", "--run-dir", B_RUN),
    ]
    results = [finish(process) for process in started]
    for result in results:
        assert result.returncode == 0, result.stderr[-4000:]
    return root


@pytest.fixture
def nodes(trained: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the trained folders, for a test to resume (or break) on its own."""
    shutil.copytree(trained, tmp_path, dirs_exist_ok=True)
    return tmp_path / "a", tmp_path / "b"


def test_each_node_directory_holds_its_own_ranks_files(trained: Path) -> None:
    """Node 0's run holds rank 0's JSONL and checkpoints, node 1's rank 1's; each holds the config
    and ranks.json naming the ranks that write there; both runs end completed."""
    a, b = trained / "a" / "run", run_of(trained / "b")
    assert sorted(p.name for p in (a / "checkpoints").iterdir()) == ["step_00000003.pt", "step_00000006.pt"]
    assert sorted(p.name for p in (b / "checkpoints").iterdir()) == [
        "step_00000003.rank1.pt",
        "step_00000006.rank1.pt",
    ]
    assert sorted(p.name for p in a.glob("metrics*")) == ["metrics.jsonl"]
    assert sorted(p.name for p in b.glob("metrics*")) == ["metrics.rank1.jsonl"]
    configs = [yaml.safe_load((run / "config.yaml").read_text()) for run in (a, b)]
    assert [(c["run_dir"], c["logging"]["json_file"]) for c in configs] == [
        ("run", "run/metrics.jsonl"),
        (B_RUN, f"{B_RUN}/metrics.jsonl"),
    ]
    assert [{**c, "run_dir": None, "logging": None} for c in configs] == [
        {**configs[0], "run_dir": None, "logging": None}
    ] * 2
    for run, rank in ((a, 0), (b, 1)):
        (recorded,) = yaml.safe_load((run / "ranks.json").read_text())["ranks"]
        assert (recorded["rank"], recorded["node_rank"]) == (rank, rank)
        path = run / ("metrics.jsonl" if rank == 0 else "metrics.rank1.jsonl")
        (end,) = events(path, "train_end")
        assert (end["status"], end["step"]) == ("completed", 6)


def test_the_documented_restart_resumes_every_node(nodes: tuple[Path, Path]) -> None:
    """--run-dir run --resume --steps 9, no --config, node 1's config.yaml gone: rank 0's recorded
    config reaches rank 1 (the outer loop on both, the same LR horizon), both resume at 6 and stop at
    9, even with node 1 asking for another horizon and target on its command line."""
    a, b = nodes
    (run_of(b) / "config.yaml").unlink()  # rank 1 alone would fall back to the defaults (DDP)
    (b / "other.yaml").write_text(yaml.safe_dump({"train": {"schedule_steps": 1000, "outer_every": 0}}))
    results = resume({a: 0, b: 1}, "--steps", "9", extra={b: ["--config", "other.yaml", "--steps", "12"]})
    for result in results.values():
        assert result.returncode == 0, result.stderr[-4000:]
    for path in (a / "run" / "metrics.jsonl", run_of(b) / "metrics.rank1.jsonl"):
        for record in read_jsonl(path):
            assert payload_problems(record["event"], record) == [], record
        first, again = events(path, "train_start")
        assert (again["start_step"], again["target_step"], again["outer_every"]) == (6, 9, 3)
        assert again["lr_schedule_steps"] == first["lr_schedule_steps"] == 6
        assert [r["step"] for r in events(path, "train_step")][-3:] == [7, 8, 9]
        ends = [(r["status"], r["step"]) for r in events(path, "train_end")]
        assert ends == [("completed", 6), ("completed", 9)]
    assert (run_of(b) / "config.yaml").exists()  # node 1 records rank 0's config again


def test_node_ranks_swapped_on_resume_fail_with_one_line(nodes: tuple[Path, Path]) -> None:
    """Rank 0 lands in node 1's folder (as c10d may place it): both nodes fail with one line saying
    the ranks moved and what to do; nothing is trained, no directory is written into."""
    a, b = nodes
    before = {path: path.stat().st_mtime_ns for path in (a / "run").rglob("*") if path.is_file()}
    results = resume({a: 1, b: 0}, "--steps", "9")
    for result in results.values():
        assert result.returncode != 0
        (line,) = our_errors(result)
        assert "ranks moved between nodes" in line, line
        assert "static rendezvous" in line
        assert "shared file system" in line
        assert f"{os.sep}speedtronic{os.sep}" not in result.stderr  # no traceback of ours (torchrun's only)
    assert len(events(a / "run" / "metrics.jsonl", "train_start")) == 1  # nothing new was run
    after = {path: path.stat().st_mtime_ns for path in (a / "run").rglob("*") if path.is_file()}
    assert {path: t for path, t in after.items() if path.name != ".speedtronic-launch"} == {
        path: t for path, t in before.items() if path.name != ".speedtronic-launch"
    }


def test_a_node_missing_its_checkpoint_fails_naming_node_rank_and_file(nodes: tuple[Path, Path]) -> None:
    """Node 1 lost its checkpoints: one line names rank 1, its node and the missing file, on both."""
    a, b = nodes
    shutil.rmtree(run_of(b) / "checkpoints")
    results = resume({a: 0, b: 1}, "--steps", "9")
    missing = run_of(b) / "checkpoints" / "step_00000006.rank1.pt"
    for result in results.values():
        assert result.returncode != 0
        (line,) = our_errors(result)
        assert "rank 1 (node 1, host " in line, line
        assert f"missing {missing}" in line


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (Linux)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def wait_for_steps(path: Path, process: subprocess.Popen[str]) -> None:
    """Until ``path`` holds a train_step record (the job is training), or fail if the agent ended."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if path.exists() and '"event":"train_step"' in path.read_text():
            return
        if process.poll() is not None:
            pytest.fail(f"the agent ended before training: {process.communicate()[1][-3000:]}")
        time.sleep(0.2)
    pytest.fail(f"no train_step in {path} within {WAIT_S} s")


@pytest.fixture
def long_job(tmp_path: Path) -> Iterator[tuple[Path, Path, subprocess.Popen[str], subprocess.Popen[str]]]:
    """Two agents training towards a step they never reach, both training already; node 0 passes
    ``--run-dir run``, node 1 none, so it writes to its own ``run``."""
    port = free_port()
    config = {
        **CONFIG,
        "train": {**CONFIG["train"], "steps": 1_000_000, "checkpoint_every": 0, "outer_every": 0},
    }
    started = []
    for node_rank, name in enumerate("ab"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text(yaml.safe_dump(config))
        own = ["--run-dir", "run"] if name == "a" else []  # node 1 takes rank 0's path: b/run
        started.append(agent(tmp_path / name, node_rank, port, "--config", "config.yaml", *own))
    a, b = tmp_path / "a", tmp_path / "b"
    try:
        wait_for_steps(b / "run" / "metrics.rank1.jsonl", started[1])
        wait_for_steps(a / "run" / "metrics.jsonl", started[0])
        yield a, b, started[0], started[1]
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.communicate()


def test_a_dead_peer_ends_the_survivor_failed(
    long_job: tuple[Path, Path, subprocess.Popen[str], subprocess.Popen[str]],
) -> None:
    """SIGKILL node 1's worker: node 0's rank writes train_end status=failed with the error, closes
    its logger (the file ends with that record) and its agent exits non-zero; one line on stderr."""
    a, _, agent0, agent1 = long_job
    (worker,) = children(agent1.pid)
    os.kill(worker, signal.SIGKILL)
    survivor = finish(agent0)
    assert survivor.returncode != 0
    end = read_jsonl(a / "run" / "metrics.jsonl")[-1]
    assert (end["event"], end["status"]) == ("train_end", "failed"), end
    assert end["error"].startswith("RuntimeError: ")
    assert payload_problems("train_end", end) == []
    (line,) = our_errors(survivor)
    assert line.startswith("speedtronic: error: rank 0: RuntimeError: "), line
    killed = finish(agent1)
    assert killed.returncode != 0
    (warning,) = [line for line in killed.stderr.splitlines() if line.startswith("speedtronic: warning:")]
    assert warning.startswith("speedtronic: warning: rank 1 (node 1, host "), warning
    own = (long_job[1] / "run").resolve()
    assert f"no --run-dir on this node: writing to {own}, the path rank 0 uses" in warning


def test_a_killed_agent_takes_its_worker_along(
    long_job: tuple[Path, Path, subprocess.Popen[str], subprocess.Popen[str]],
) -> None:
    """SIGKILL node 1's agent: its worker is told (SIGTERM), ends interrupted, and node 0 ends failed
    and exits non-zero instead of waiting in torch's exit barrier and exiting 0."""
    a, b, agent0, agent1 = long_job
    agent1.kill()
    agent1.communicate()
    survivor = finish(agent0)
    assert survivor.returncode != 0
    assert read_jsonl(a / "run" / "metrics.jsonl")[-1]["status"] == "failed"
    path = b / "run" / "metrics.rank1.jsonl"
    deadline = time.monotonic() + WAIT_S  # the worker (no child of ours) writes its last record alone
    while time.monotonic() < deadline and '"event":"train_end"' not in path.read_text():
        time.sleep(0.2)
    end = read_jsonl(path)[-1]
    assert (end["event"], end["status"], end["error"]) == ("train_end", "interrupted", "Terminated: SIGTERM")
