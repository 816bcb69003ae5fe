"""pytest fixtures for testing code that uses speedtronic (``metric_logger``, ``captured_events``,
``recording_hook``), registered through the ``pytest11`` entry point."""

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
