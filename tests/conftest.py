"""Shared fixtures: temporary run directories and readers for what a logger wrote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Give the children the Ctrl-C a terminal gives. A suite started in the background (``&`` in a
    script, some CI runners) inherits SIGINT ignored, and so would every child it starts: the tests
    that press Ctrl-C on a child would wait for it forever. A caught signal is reset to its default
    on ``exec``, and Python then turns SIGINT into ``KeyboardInterrupt``, as in a terminal."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


CHECKOUT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

LONGEST_FIRST = (
    "training/test_resume_trackers.py",
    "training/test_rundir.py",
    "training/test_run_dirs.py",
    "commands/test_train_summary.py",
    "training/test_checkpoints.py",
    "distributed/test_two_nodes.py",
    "training/test_planted_links.py",
    "distributed/test_stragglers_ddp.py",
    "distributed/test_torchrun_train.py",
    "commands/test_progress_cli.py",
    "docs/test_snippets.py",
    "commands/test_alerts_cli.py",
    "commands/test_train.py",
    "commands/test_train_signals.py",
    "integrations/test_tensorboard.py",
    "reliability/test_stalled_hooks.py",
    "training/test_timing.py",
    "runs/test_restarts.py",
    "integrations/test_lightning.py",
    "reliability/test_wide_records.py",
)
"""The files that take longest (their tests' durations summed, ``pytest --durations=0`` on 2 workers,
2026-12-07), longest first. ``make test`` runs a file whole on one worker (``--dist loadfile``) and
hands out files in collection order (``--no-loadscope-reorder``): these go first, so the last files
handed out are short ones and no worker is left alone with a long file at the end."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the tests of ``LONGEST_FIRST``'s files to the front, in its order; the rest keep theirs.
    A name there that is no file (one renamed or removed) is an error, not an order silently lost."""
    missing = [name for name in LONGEST_FIRST if not (TESTS / name).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py: LONGEST_FIRST names no file at tests/{missing[0]}")
    rank = {f"tests/{name}": index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


_UNTOUCHED = pytest.StashKey[frozenset[str]]()
_CACHES = ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".coverage")
"""What running Python and the tools leave in a checkout by design; never a test's output."""


def _files_outside_git(root: Path) -> frozenset[str] | None:
    """The untracked and ignored paths in the checkout ``root`` (``git status``), the tools' caches
    left out; None when ``root`` is not a git checkout (an unpacked sdist)."""
    try:
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--ignored=matching", "--untracked-files"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if status.returncode != 0:
        return None
    return frozenset(
        line[3:]
        for line in status.stdout.splitlines()
        if line[:2] in ("??", "!!") and not any(cache in line for cache in _CACHES)
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    """Note what is in the checkout outside git before any test runs (the suite's controller only)."""
    if not hasattr(session.config, "workerinput"):
        before = _files_outside_git(CHECKOUT)
        if before is not None:
            session.config.stash[_UNTOUCHED] = before


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run when a test wrote into the checkout: tests write under their tmp_path only."""
    before = session.config.stash.get(_UNTOUCHED, None)
    after = _files_outside_git(CHECKOUT) if before is not None else None
    if before is None or after is None or after <= before:
        return
    written = ", ".join(sorted(after - before))
    writer = session.config.get_terminal_writer()
    writer.line()
    writer.line(f"tests wrote into the checkout {CHECKOUT}: {written}", red=True)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def fresh_wandb_session() -> None:
    """Start each test with no W&B session left by an earlier test in this worker.

    W&B reads its environment once per process, when its session starts (``wandb.setup``); an
    earlier test's session would make this test's ``WANDB_MODE=offline`` be ignored, and
    ``wandb.init`` ask for an API key. So the session is torn down first (``wandb.teardown()``).
    And ``WANDB_SERVICE`` is removed: W&B sets it in this process so that child processes join its
    wandb-core service; a child started by this test (an example, ``speedtronic train``) would join
    a service an earlier test stopped, and write no ``.wandb`` file. Each test's children start their
    own service, as a user's script does."""
    wandb = sys.modules.get("wandb")
    if wandb is not None:
        wandb.teardown()
    os.environ.pop("WANDB_SERVICE", None)


@pytest.fixture(autouse=True)
def no_mlflow_experiment_left() -> Iterator[None]:
    """End each test with the MLflow settings it found: ``mlflow.set_experiment`` (Hugging Face's
    ``MLflowCallback`` calls it) sets ``MLFLOW_EXPERIMENT_ID`` in this process, and a later test's hook
    in this worker would look for that experiment in its own, new store."""
    names = ("MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID", "MLFLOW_TRACKING_URI")
    before = {name: os.environ.get(name) for name in names}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def jsonl_path(tmp_path: Path) -> Path:
    return tmp_path / "run" / "metrics.jsonl"
