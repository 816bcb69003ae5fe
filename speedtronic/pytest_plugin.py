"""pytest fixtures for testing code that uses speedtronic; registered through the ``pytest11`` entry
point, so they are available in any test suite of an environment where speedtronic is installed.

- ``metric_logger``: a ``MetricLogger`` writing ``metrics.log`` and ``metrics.jsonl`` under
  ``tmp_path``, with ``strict_hooks=True`` (a failing hook fails the test); closed after the test.
- ``captured_events``: the events ``metric_logger`` delivers (``speedtronic.testing.capture_events``).
- ``recording_hook``: a ``speedtronic.testing.RecordingHook`` already appended to ``metric_logger``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from speedtronic.profiling import MetricLogger
from speedtronic.testing import RecordingHook, capture_events

__all__ = ["captured_events", "metric_logger", "recording_hook"]


@pytest.fixture
def metric_logger(tmp_path: Path) -> Iterator[MetricLogger]:
    """A logger of the test's own, its files in ``tmp_path``; closed (hooks too) after the test."""
    logger = MetricLogger(
        file=tmp_path / "metrics.log", json_file=tmp_path / "metrics.jsonl", strict_hooks=True
    )
    try:
        yield logger
    finally:
        logger.close()


@pytest.fixture
def captured_events(metric_logger: MetricLogger) -> Iterator[list[dict[str, Any]]]:
    """Every event ``metric_logger`` delivers during the test, as ``{"event": ..., **payload}``."""
    with capture_events(metric_logger) as events:
        yield events


@pytest.fixture
def recording_hook(metric_logger: MetricLogger) -> RecordingHook:
    """A ``RecordingHook`` on ``metric_logger``: its ``closes`` is 1 once the logger closes."""
    hook = RecordingHook()
    metric_logger.hooks.append(hook)
    return hook
