"""The watcher's own state, kept in the followed run's directory under ``.speedtronic-tail/``: read
positions and the alerts already sent."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from speedtronic.runs.follow import Position, run_home

__all__ = ["STATE_DIR", "WatchState", "alert_id"]

STATE_DIR = ".speedtronic-tail"


def alert_id(payload: dict[str, Any], segment: object = None) -> str:
    """A file name for one alert: the same alert, raised by any watcher, gets the same id."""
    parts = [payload.get(key) for key in ("rule", "rank", "step", "key")] + [segment]
    text = json.dumps(parts, default=str)
    name = f"{payload.get('rule')}-r{payload.get('rank', 0)}-s{payload.get('step')}"
    safe = "".join(char if char.isalnum() or char in "-_" else "_" for char in name)[:80]
    return f"{safe}-{hashlib.sha1(text.encode()).hexdigest()[:12]}"


class WatchState:
    """The state of watchers of the run at ``path``: ``<directory>/.speedtronic-tail/`` for a run
    directory, ``<its directory>/.speedtronic-tail/<name>/`` for a JSONL file (two files side by side
    are two runs, each with its own positions and alerts sent)."""

    __slots__ = ("directory", "home")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        run = Path(path)
        self.home = run_home(run)  # where the state goes: it must be writable
        self.directory = self.home / STATE_DIR if run == self.home else self.home / STATE_DIR / run.name

    def load(self) -> tuple[dict[str, Position], dict[str, Any]]:
        """The positions saved last, and the watcher's notes on the run (its ranks: ended or not, their
        last step and segment, their processes); both empty when there is no state yet, or it can't be
        read."""
        try:
            data = json.loads((self.directory / "positions.json").read_text())
            files = {str(key): tuple(value) for key, value in data["files"].items()}
            return files, dict(data["run"])
        except (OSError, ValueError, TypeError, AttributeError, KeyError):
            return {}, {}

    def save(self, positions: dict[str, Position], run: dict[str, Any]) -> None:
        """Keep ``positions`` (``Follower.positions()``) and ``run`` (what ``load`` gives back)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        partial = self.directory / f".positions.{os.getpid()}"
        partial.write_text(json.dumps({"files": positions, "run": run}))
        os.replace(partial, self.directory / "positions.json")

    def forget(self) -> None:
        """Drop the positions and the alerts sent: the run they were about is gone (a new one in its
        place would otherwise have its alerts taken as sent)."""
        with contextlib.suppress(OSError):
            (self.directory / "positions.json").unlink()
        with contextlib.suppress(OSError):
            for sent in (self.directory / "alerts").iterdir():
                with contextlib.suppress(OSError):
                    sent.unlink()

    def claim(self, alert: str) -> bool:
        """Whether this watcher is the first to send the alert with id ``alert`` (and now owns it)."""
        folder = self.directory / "alerts"
        folder.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(folder / alert, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with contextlib.suppress(OSError):
            os.close(fd)
        return True
