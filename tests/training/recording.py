"""Hooks for the runtime tests, importable by path from a config (``tests.training.recording:...``)."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

from tests.helpers import read_jsonl


class RecordingHook:
    """Records every event it receives as ``(event, payload)``, and whether it was closed."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.closed = 0

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self.events.append((event, payload))

    def close(self) -> None:
        self.closed += 1

    def named(self, event: str) -> list[dict[str, Any]]:
        return [payload for name, payload in self.events if name == event]


class JournalHook:
    """Keeps a file open for its whole life and journals each event, then ``close``, into it."""

    def __init__(self, path: str, fail_on: str | None = None) -> None:
        self._file = Path(path).open("a", encoding="utf-8")  # noqa: SIM115  # open until close()
        self._fail_on = fail_on

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self._file.write(json.dumps({"event": event, "step": payload.get("step")}) + "\n")
        if event == self._fail_on:
            raise RuntimeError(f"JournalHook fails on {event}")

    def close(self) -> None:
        self._file.write(json.dumps({"event": "close"}) + "\n")
        self._file.close()


class ThreadJournalHook(JournalHook):
    """A ``JournalHook`` that journals, with each event, the name of the thread that called it."""

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self._file.write(json.dumps({"event": event, "thread": threading.current_thread().name}) + "\n")


def journal(path: str | Path) -> list[dict[str, Any]]:
    return read_jsonl(path, strict=False)


def broken_factory(**kwargs: Any) -> Any:
    raise RuntimeError("this factory always fails")


def not_a_hook(**kwargs: Any) -> Any:
    return 42


class ExitAt:
    """Ends the process abruptly (``os._exit``, like a killed job) when ``event`` for ``step`` arrives."""

    def __init__(self, event: str, step: int) -> None:
        self._event, self._step = event, step

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        if event == self._event and payload.get("step") == self._step:
            os._exit(3)


class SignalAt:
    """Sends its own process SIGTERM (a scheduler preempting the job) when ``event`` for ``step`` arrives."""

    def __init__(self, event: str, step: int) -> None:
        self._event, self._step = event, step

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        if event == self._event and payload.get("step") == self._step:
            os.kill(os.getpid(), signal.SIGTERM)


class DumpHook:
    """Writes the ``repr`` of every event it gets to ``path``: what a hook could send anywhere.

    Takes any other keyword (``api_key=``, ``password=``), as a hook with credentials does."""

    def __init__(self, path: str, **credentials: Any) -> None:
        self._path = Path(path)
        self._credentials = credentials

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        with self._path.open("a", encoding="utf-8") as file:
            file.write(f"{event} {payload!r}\n")


class WaitAt:
    """At ``event`` for ``step``: creates the file ``ready``, then waits until the file ``go`` exists
    (at most ``timeout_s``), so a test can act while the run is known to be in the middle of training.
    Once only: a later run of the same config (a resume) finds ``ready`` and goes on."""

    def __init__(self, event: str, step: int, ready: str, go: str, timeout_s: float = 120) -> None:
        self._event, self._step = event, step
        self._ready, self._go, self._timeout_s = Path(ready), Path(go), timeout_s

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        if event != self._event or payload.get("step") != self._step or self._ready.exists():
            return
        import time

        self._ready.touch()
        deadline = time.monotonic() + self._timeout_s
        while not self._go.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
