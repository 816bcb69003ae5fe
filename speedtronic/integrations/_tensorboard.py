"""``TensorboardHook``: each event's numbers as TensorBoard scalars, one ``Event`` record per event."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from speedtronic.processors.convert import to_python

if TYPE_CHECKING:
    from speedtronic.integrations._tensorboard_process import ProcessWriter

__all__ = ["TensorboardHook"]


class TensorboardHook:
    """Writes every numeric payload value as the scalar ``<event>/<key>``.

    Numbers are ints and floats (0-d tensors and numpy scalars included, converted); bools, strings,
    lists and other values are skipped, not errors. The step is the payload's integer ``step`` when it
    has one, else a counter per event name (0, 1, 2...). All of one event's scalars go into one
    ``Event`` record (a ``Summary`` with several values), as ``SummaryWriter.add_scalars`` can't.
    Values are TensorBoard's float32 ``simple_value``, as ``SummaryWriter.add_scalar`` writes them.

    The hook owns one event file, created here (``events.out.tfevents.*`` in ``log_dir``) by
    tensorboard's ``EventFileWriter``, which writes in a background thread and flushes every
    ``flush_secs`` seconds: a killed run loses at most the last ``flush_secs`` of points, a run that
    calls ``close()`` (or ``MetricLogger.close()``) loses none. After ``close()``, writing raises
    ``RuntimeError``; no second event file is ever created.

    With ``process=True`` the event file is written by a process of its own
    (``speedtronic.integrations._tensorboard_process``): the hook only sends each event's scalars
    down a pipe, and the child builds the protobuf messages and computes tensorboard's pure-Python
    record checksums, so neither competes with training for the GIL. That costs one interpreter
    start (about a second, once) and is worth it for long runs; a training process that is killed
    still gets every point it sent written, since the writer closes the file when the pipe ends.

    Args:
        log_dir: directory for the event file (created if missing).
        flush_secs: longest time a written point waits in memory before it reaches the file.
        max_queue: events buffered for the writer thread before ``on_event`` waits for it.
        process: write the event file from a separate process (see above).
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str] = "runs/tensorboard",
        *,
        flush_secs: float = 2.0,
        max_queue: int = 100,
        process: bool = False,
    ) -> None:
        try:
            from tensorboard.compat.proto.event_pb2 import Event
            from tensorboard.compat.proto.summary_pb2 import Summary
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ModuleNotFoundError as error:
            if error.name != "tensorboard":  # a broken or shadowed install: its own error says more
                raise
            raise ModuleNotFoundError(
                "speedtronic.integrations.TensorboardHook requires tensorboard: "
                "pip install 'speedtronic[tensorboard]'",
                name="tensorboard",
            ) from error
        self.log_dir = os.fspath(log_dir)
        self._writer: ProcessWriter | _InProcessWriter
        # Imported here: the writer process runs that module as __main__, which must not be imported
        # before (by this package's __init__).
        from speedtronic.integrations._tensorboard_process import ProcessWriter, scalar_event

        if process:
            self._writer = ProcessWriter(self.log_dir, flush_secs=flush_secs, max_queue=max_queue)
        else:
            writer = EventFileWriter(self.log_dir, max_queue_size=max_queue, flush_secs=flush_secs)
            self._writer = _InProcessWriter(writer, functools.partial(scalar_event, Event, Summary))
        self._counters: dict[str, int] = {}
        self._closed = False

    def on_event(self, event: str, payload: Mapping[Any, Any]) -> None:
        """Write the event's numbers at its step; an event without any numbers writes nothing."""
        if self._closed:
            raise RuntimeError(f"TensorboardHook({self.log_dir!r}) is closed; create a new hook")
        step = payload.get("step")
        if type(step) is not int:
            step = self._counters.get(event, 0)
            self._counters[event] = step + 1
        tags, values = [], []
        for key, raw in payload.items():
            value = to_python(raw)
            if type(value) in (int, float):
                tags.append(f"{event}/{key}")
                values.append(value)
        if values:
            self._writer.add_scalars(time.time(), step, tags, values)

    def flush(self) -> None:
        """Block until every point written so far is in the file."""
        if not self._closed:
            self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file; idempotent."""
        if not self._closed:
            self._closed = True
            self._writer.close()

    def __repr__(self) -> str:
        return f"<TensorboardHook {'closed' if self._closed else 'open'} log_dir={self.log_dir!r}>"


class _InProcessWriter:
    """tensorboard's ``EventFileWriter`` (a writer thread in this process) behind ``add_scalars``."""

    def __init__(self, writer: Any, make_event: Callable[[float, int, list[str], list[Any]], Any]) -> None:
        self._writer, self._make_event = writer, make_event

    def add_scalars(self, wall_time: float, step: int, tags: list[str], values: list[Any]) -> None:
        self._writer.add_event(self._make_event(wall_time, step, tags, values))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
