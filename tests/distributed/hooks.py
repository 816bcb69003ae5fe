"""Hooks for the torchrun tests, named by path in their configs (``tests.distributed.hooks:...``)."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any


class OverlapHook:
    """Journals every event to ``<path>.<RANK>``, and counts calls that overlap another call."""

    def __init__(self, path: str) -> None:
        self._file = open(f"{path}.{os.environ.get('RANK', '0')}", "a", encoding="utf-8")  # noqa: SIM115
        self._busy = threading.Lock()
        self.overlaps = 0

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        if not self._busy.acquire(blocking=False):
            self.overlaps += 1
            self._file.write(json.dumps({"event": "OVERLAP"}) + "\n")
            return
        try:
            time.sleep(0.0005)  # widens the window in which a concurrent call would be caught
            self._file.write(json.dumps({"event": event, "thread": threading.current_thread().name}) + "\n")
        finally:
            self._busy.release()

    def close(self) -> None:
        self._file.write(json.dumps({"event": "close", "overlaps": self.overlaps}) + "\n")
        self._file.close()
