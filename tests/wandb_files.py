"""What an offline W&B run recorded, read back from its ``.wandb`` transaction log: for the tests.

W&B has no public reader for offline runs; this one decodes the transaction log (LevelDB log blocks
of ``wandb_internal_pb2.Record``), so a test asserts what reached the run without patching the SDK.
It lives with the tests (it reads W&B's internal file format, which no user of speedtronic needs).
"""

from __future__ import annotations

import json
import os
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["WandbOfflineRun", "read_wandb_run"]


@dataclass
class WandbOfflineRun:
    """What an offline W&B run recorded, read back from its ``.wandb`` transaction log."""

    history: list[dict[str, Any]] = field(default_factory=list)
    """Each ``run.log`` row in order, with W&B's ``_step``; nested keys joined with ``/``."""
    step_metrics: dict[str, str] = field(default_factory=dict)
    """``define_metric`` calls: metric name or glob -> its x-axis (``""`` when it has none)."""
    exit_code: int | None = None
    """The exit code the run was finished with; ``None`` while it was never finished."""
    config: dict[str, Any] = field(default_factory=dict)
    """The run's config (``run.config``), its updates applied in order."""
    summary: dict[str, Any] = field(default_factory=dict)
    """The run's summary: each key's last value (nested keys joined with ``/``), W&B's own included."""
    alerts: list[dict[str, Any]] = field(default_factory=list)
    """Each ``run.alert``: ``title``, ``text``, ``level`` and ``wait_duration`` (milliseconds)."""
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    """Each logged artifact: ``name``, ``type``, ``aliases``, ``metadata`` and its ``files``
    (``{path in the artifact: the local file W&B staged}``)."""


_WANDB_HEADER = struct.Struct("<4sHB")  # b":W&B", magic 0xBEE1, version 0
_RECORD_HEADER = struct.Struct("<IHB")  # crc32 of type+data, length, type (LevelDB log format)
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def read_wandb_run(path: str | os.PathLike[str], *, wait_s: float = 120.0) -> WandbOfflineRun:
    """Read an offline run (its ``offline-run-*`` directory or its ``.wandb`` file) back.

    W&B has no public reader for offline runs; this one decodes the transaction log (LevelDB log
    blocks of ``wandb_internal_pb2.Record``), so tests can assert what reached the run without
    patching the SDK. Needs wandb (for the protobuf classes).

    W&B's service process writes the log asynchronously, so right after ``run.finish()`` (or
    ``WandbHook.close()``) it may still be incomplete on a busy machine: this waits up to ``wait_s``
    seconds for the run's exit record, then returns what is there.
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            run = _read_wandb_run(Path(path))
        except ValueError:
            if time.monotonic() >= deadline:
                raise
        else:
            if run.exit_code is not None or time.monotonic() >= deadline:
                return run
        time.sleep(0.05)


def _read_wandb_run(location: Path) -> WandbOfflineRun:
    from wandb.proto import wandb_internal_pb2

    if location.is_dir():
        files = sorted(location.glob("*.wandb"))
        if len(files) != 1:
            raise ValueError(f"read_wandb_run: expected one .wandb file in {location}, found {len(files)}")
        location = files[0]
    run = WandbOfflineRun()
    for data in _wandb_records(location.read_bytes(), location):
        record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]  # protobuf makes it at runtime
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = record.history.item
            run.history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items})
        elif kind == "config":
            run.config.update(
                {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in record.config.update
                }
            )
        elif kind == "summary":
            run.summary.update(
                {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in record.summary.update
                }
            )
        elif kind == "metric":
            run.step_metrics[record.metric.name or record.metric.glob_name] = record.metric.step_metric
        elif kind == "artifact":
            artifact = record.artifact
            run.artifacts.append(
                {
                    "name": artifact.name,
                    "type": artifact.type,
                    "aliases": list(artifact.aliases),
                    "metadata": json.loads(artifact.metadata or "{}"),
                    "files": {entry.path: entry.local_path for entry in artifact.manifest.contents},
                }
            )
        elif kind == "alert":
            alert = record.alert
            run.alerts.append(
                {
                    "title": alert.title,
                    "text": alert.text,
                    "level": alert.level,
                    "wait_duration": alert.wait_duration,
                }
            )
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    return run


def _wandb_records(data: bytes, path: Path) -> Iterator[bytes]:
    ident, magic, _version = _WANDB_HEADER.unpack_from(data)
    if ident != b":W&B" or magic != 0xBEE1:
        raise ValueError(f"read_wandb_run: {path} is not a W&B transaction log")
    position, pending = _WANDB_HEADER.size, b""
    while position + _RECORD_HEADER.size <= len(data):
        if _BLOCK - position % _BLOCK < _RECORD_HEADER.size:  # a block's tail too short for a header
            position += _BLOCK - position % _BLOCK
            continue
        checksum, length, kind = _RECORD_HEADER.unpack_from(data, position)
        start = position + _RECORD_HEADER.size
        chunk = data[start : start + length]
        if kind == 0 or len(chunk) < length or zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != checksum:
            return  # zero padding, or a torn tail of a run that is still writing
        position = start + length
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            yield pending + chunk
