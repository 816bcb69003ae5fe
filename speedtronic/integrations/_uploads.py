"""``Uploads``: a tracker hook's file uploads (checkpoints as artifacts) on a worker thread of its own.

A checkpoint can be gigabytes: hashing and copying it must not hold up training. ``WandbHook`` and
``MlflowHook`` hand each upload to one worker thread, in order; an upload that fails is kept and
raised on the training thread by the hook's next ``on_event`` or ``close()``, where the logger counts
it as a hook failure, so a failed upload never stops training.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from speedtronic.integrations.structlog import exception_text

__all__ = ["Uploads"]


class Uploads:
    """Calls each submitted upload on one worker thread, in order; ``raise_failures()`` raises what failed.

    Args:
        owner: who uploads, for the error (``"WandbHook"``).
    """

    def __init__(self, owner: str) -> None:
        self._owner = owner
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"speedtronic-{owner}-uploads")
        self._lock = threading.Lock()
        self._failed: list[str] = []

    def submit(self, upload: Callable[..., Any], *args: Any) -> None:
        """Queue ``upload(*args)`` for the worker."""
        self._executor.submit(upload, *args).add_done_callback(self._done)

    def _done(self, future: Future[Any]) -> None:
        error = future.exception()
        if error is not None:
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
        """Wait for every queued upload, then raise what failed."""
        self._executor.shutdown(wait=True)
        self.raise_failures()
