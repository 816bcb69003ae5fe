"""``Uploads``: a tracker hook's file uploads (checkpoints as artifacts) on a worker thread of its own."""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable
from typing import Any

from speedtronic.integrations.structlog import exception_text

__all__ = ["UPLOAD_TIMEOUT_S", "Uploads", "check_timeout"]

UPLOAD_TIMEOUT_S = 600.0
"""How long a hook's ``close()`` waits for its checkpoint uploads, by default (seconds)."""


def check_timeout(owner: str, timeout_s: Any) -> float:
    """``timeout_s`` as a float, or ``ValueError`` naming ``owner``'s ``upload_timeout_s``."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < math.inf:
        raise ValueError(f"{owner}: upload_timeout_s must be a positive number of seconds, got {timeout_s!r}")
    return float(timeout_s)


class Uploads:
    """Calls each submitted upload on one worker thread, in order; ``raise_failures()`` raises what failed.

    Args:
        owner: who uploads, for the error (``"WandbHook"``).
        timeout_s: how long ``close()`` waits for the uploads still queued or running.
    """

    def __init__(self, owner: str, timeout_s: float = UPLOAD_TIMEOUT_S) -> None:
        self._owner = owner
        self._timeout_s = check_timeout(owner, timeout_s)
        self._jobs: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._failed: list[str] = []
        self._given_up = False
        self._thread = threading.Thread(target=self._work, name=f"speedtronic-{owner}-uploads", daemon=True)
        self._thread.start()

    def submit(self, upload: Callable[..., Any], *args: Any) -> None:
        """Queue ``upload(*args)`` for the worker."""
        self._jobs.put((upload, args))

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            if self._given_up:
                continue
            upload, args = job
            try:
                upload(*args)
            except Exception as error:  # kept, and raised on the training thread
                with self._lock:
                    self._failed.append(exception_text(error))

    def raise_failures(self) -> None:
        """Raise ``RuntimeError`` naming the uploads that failed since the last call."""
        with self._lock:
            failed, self._failed = self._failed, []
        if failed:
            more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
            raise RuntimeError(f"{self._owner}: a checkpoint upload failed: {failed[0]}{more}")

    def close(self) -> None:
        """Wait for every queued upload, at most ``timeout_s``, then raise what failed: uploads not
        done by then are given up (the one running is left to its daemon thread) and reported."""
        self._jobs.put(None)
        self._thread.join(self._timeout_s)
        if self._thread.is_alive():
            self._given_up = True  # the queued ones are skipped
            with self._lock:
                self._failed.append(
                    f"not done within upload_timeout_s={self._timeout_s:g} s; the uploads still running "
                    "or queued were given up"
                )
        self.raise_failures()
