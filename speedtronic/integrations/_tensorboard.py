"""``TensorboardHook``: the numbers a person plots, as TensorBoard scalars written off the training thread."""

from __future__ import annotations

import atexit
import functools
import os
import queue
import threading
import time
import warnings
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from speedtronic.errors import SpeedtronicWarning
from speedtronic.events import Event
from speedtronic.processors.convert import to_python

if TYPE_CHECKING:
    from speedtronic.integrations._tensorboard_process import ProcessWriter

__all__ = ["TensorboardHook", "TensorboardWarning"]

_METRIC_EVENTS: dict[str, tuple[str, ...]] = {
    Event.TRAIN_STEP: ("loss", "lr", "grad_norm", "samples_per_s", "tokens_per_s", "memory_bytes"),
    Event.OUTER_STEP: ("included", "lag"),
    Event.DELTA_UPLOADED: ("upload_s", "bytes"),
}

_DEFAULT_EVENTS: Mapping[str, Collection[str] | None] = {
    **{str(event): () for event in Event},
    **{str(event): keys for event, keys in _METRIC_EVENTS.items()},
    "*": None,
}

_SKIPPED_KEYS: frozenset[str] = frozenset({"step", "elapsed_s", "memory_bytes"})


class TensorboardWarning(SpeedtronicWarning):
    """The TensorBoard writer fell ``max_queue`` events behind and events were dropped."""


class _Control:
    """A request the writer thread answers in order with the events before it: flush, or close."""

    __slots__ = ("close", "done")

    def __init__(self, *, close: bool) -> None:
        self.close = close
        self.done = threading.Event()


_PLAIN_TYPES = frozenset({int, float, str, bool, type(None)})
_is_plain = _PLAIN_TYPES.__contains__


class TensorboardHook:
    """Writes the numbers a person plots as TensorBoard scalars ``<event>/<key>``, from a thread of its own.

    **What is written.** ``events`` maps an event name to the payload keys to write (``None``: every
    numeric key but ``SKIPPED_KEYS``; ``()``: nothing); the entry ``"*"`` applies to any event not
    named. The default, ``DEFAULT_EVENTS``, writes ``train_step``'s loss, lr, grad_norm, samples_per_s,
    tokens_per_s and memory_bytes, ``outer_step``'s included and lag, ``delta_uploaded``'s upload_s
    and bytes, nothing else from the catalog's events, and every number of events the catalog doesn't
    know (``eval/val_loss``). Choose yours, e.g. ``events={"train_step": ["loss"], "eval": None}``, or
    add to the default: ``events={**TensorboardHook.DEFAULT_EVENTS, "checkpoint": ["save_s"]}``.

    Numbers are ints and floats (0-d tensors and numpy scalars included, converted); bools, strings,
    lists and other values are skipped, not errors. The step is the payload's integer ``step`` when it
    has one, else a counter per event name (0, 1, 2...). All of one event's scalars go into one
    ``Event`` record, as TensorBoard's float32 ``simple_value`` (what ``SummaryWriter.add_scalar``
    writes).

    **Off the training thread.** ``on_event`` only copies the payload (reading device values with
    ``.item()`` there, on the caller's thread) and puts it on a ``queue.SimpleQueue``; the hook's
    writer thread picks the numbers, builds the records and hands them to tensorboard's
    ``EventFileWriter``, which checksums and writes them from its own thread. So an event costs the
    training thread a few microseconds, and ``on_event`` never waits. The queue is bounded: when the
    writer is ``max_queue`` events behind (a stalled disk), further events are dropped, counted in
    ``dropped`` and reported once with a ``TensorboardWarning``. (``on_event`` expects one caller at a
    time, as ``MetricLogger`` calls hooks under its lock.) ``flush()`` and ``close()`` wait at
    most ``timeout_s`` and raise ``TimeoutError`` past it. A failure of the writer (disk full) is
    raised by the next ``on_event``, ``flush`` or ``close``, so the logger counts it.

    The event file (``events.out.tfevents.*`` in ``log_dir``, one per hook) is flushed every
    ``flush_secs`` seconds: a killed run loses at most the last ``flush_secs`` of points, a run that
    calls ``close()`` (or ``MetricLogger.close()``, or exits normally) loses none. After ``close()``,
    ``on_event`` raises ``RuntimeError``; no second event file is ever created.

    With ``process=True`` the event file is written by a process of its own
    (``speedtronic.integrations._tensorboard_process``) that the writer thread sends the scalars to,
    so building and checksumming records never competes with training for the GIL: worth it for a
    training loop that is busy in Python, at the cost of one interpreter start (about a second).

    Args:
        log_dir: directory for the event file (created if missing).
        events: event name → keys to write (see above); default ``TensorboardHook.DEFAULT_EVENTS``.
        flush_secs: longest time a written point waits in memory before it reaches the file.
        max_queue: events waiting for the writer thread before new ones are dropped.
        timeout_s: longest wait of ``flush()`` and ``close()``.
        process: write the event file from a separate process (see above).
    """

    DEFAULT_EVENTS: ClassVar[Mapping[str, Collection[str] | None]] = _DEFAULT_EVENTS
    """What ``TensorboardHook()`` writes: event name → the payload keys written as ``<event>/<key>``.

    Training metrics (``train_step``: loss, lr, grad_norm, samples_per_s, tokens_per_s,
    memory_bytes), the outer loop's (``outer_step``: included, lag; ``delta_uploaded``: upload_s,
    bytes), nothing for the catalog's other events (``train_start``, ``checkpoint``...: settings and
    one-off facts, not curves), and ``"*"``: every event the catalog doesn't name (your own ``eval``,
    say) with all its numbers. ``None`` means every numeric key but ``SKIPPED_KEYS``; ``()`` nothing."""

    SKIPPED_KEYS: ClassVar[frozenset[str]] = _SKIPPED_KEYS
    """Keys an event whose entry is ``None`` doesn't write: ``step`` is the x-axis, and ``elapsed_s``
    and ``memory_bytes`` are added to every event by the logger (memory is plotted as
    ``train_step/memory_bytes``)."""

    def __init__(
        self,
        log_dir: str | os.PathLike[str] = "runs/tensorboard",
        *,
        events: Mapping[str, Collection[str] | None] = _DEFAULT_EVENTS,
        flush_secs: float = 2.0,
        max_queue: int = 1000,
        timeout_s: float = 30.0,
        process: bool = False,
    ) -> None:
        try:
            from tensorboard.compat.proto.event_pb2 import Event as EventProto
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
        if max_queue < 1:
            raise ValueError(f"TensorboardHook: max_queue must be at least 1, not {max_queue!r}")
        self.log_dir = os.fspath(log_dir)
        self.timeout_s = timeout_s
        self._events = {event: None if keys is None else tuple(keys) for event, keys in events.items()}
        self._other = self._events.pop("*", ())
        # Imported here: the writer process runs that module as __main__, which must not be imported
        # before (by this package's __init__).
        from speedtronic.integrations._tensorboard_process import ProcessWriter, scalar_event

        self._writer: ProcessWriter | _InProcessWriter
        if process:
            self._writer = ProcessWriter(self.log_dir, flush_secs=flush_secs, max_queue=100)
        else:
            writer = EventFileWriter(self.log_dir, flush_secs=flush_secs)
            self._writer = _InProcessWriter(writer, functools.partial(scalar_event, EventProto, Summary))
        self.max_queue = max_queue
        self.dropped = 0
        """Events dropped because the writer was ``max_queue`` events behind."""
        self._counters: dict[str, int] = {}  # the writer thread's
        self._queue: queue.SimpleQueue[tuple[str, float, dict[Any, Any]] | _Control] = queue.SimpleQueue()
        self._accepted = 0  # the training thread's count...
        self._handed = 0  # ...and the writer thread's
        self._failure: Exception | None = None
        self._closed = False
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._write, name="speedtronic-tensorboard", daemon=True)
        self._thread.start()
        atexit.register(self._close_at_exit)

    @property
    def pending(self) -> int:
        """Events handed to the hook and not yet passed to the event file writer."""
        return self._accepted - self._handed

    def on_event(self, event: str, payload: Mapping[Any, Any]) -> None:
        """Queue the event for the writer thread; it writes the chosen numbers at the event's step.

        The least work possible here, on the training thread: a copy of the payload (device values
        read now, with ``.item()``, so never from another thread or stream) and a put on the queue.
        """
        if self._closed:
            raise RuntimeError(f"TensorboardHook({self.log_dir!r}) is closed; create a new hook")
        if self._failure is not None:
            self._raise_failure()
        if self._queue.qsize() >= self.max_queue:
            self._drop()
            return
        if all(map(_is_plain, map(type, payload.values()))):
            fields = dict(payload)
        else:
            fields = {key: to_python(value) for key, value in payload.items()}
        self._accepted += 1
        self._queue.put((event, time.time(), fields))

    def flush(self, timeout_s: float | None = None) -> None:
        """Block until every point queued so far is in the file; ``TimeoutError`` after ``timeout_s``."""
        if not self._closed:
            self._request(_Control(close=False), timeout_s)
            self._raise_failure()

    def close(self, timeout_s: float | None = None) -> None:
        """Write what is queued and close the event file; idempotent.

        Raises ``TimeoutError`` when that takes longer than ``timeout_s`` (default: the hook's); the
        writer thread (a daemon) then goes on writing until the process exits.
        """
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._close_at_exit)
        self._request(_Control(close=True), timeout_s)
        self._thread.join()
        self._raise_failure()

    def _drop(self) -> None:
        self.dropped += 1
        if self.dropped == 1:
            warnings.warn(
                f"TensorboardHook({self.log_dir!r}): the writer is {self.max_queue} events behind; "
                "dropping events until it catches up (counted in .dropped)",
                TensorboardWarning,
                stacklevel=3,
            )

    def _request(self, control: _Control, timeout_s: float | None) -> None:
        timeout = self.timeout_s if timeout_s is None else timeout_s
        self._queue.put(control)
        if not control.done.wait(timeout):
            what = "close" if control.close else "flush"
            raise TimeoutError(f"TensorboardHook({self.log_dir!r}): {what} not done in {timeout} s")

    def _raise_failure(self) -> None:
        failure, self._failure = self._failure, None
        if failure is not None:
            raise RuntimeError(f"TensorboardHook({self.log_dir!r}): writing failed: {failure!r}") from failure

    def _write(self) -> None:
        """The writer thread: each queued item in order, until a close request."""
        while True:
            item = self._queue.get()
            try:
                if isinstance(item, _Control):
                    if item.close:
                        self._writer.close()
                    else:
                        self._writer.flush()
                else:
                    self._write_event(*item)
            except Exception as error:
                self._failure = error
            finally:
                if isinstance(item, _Control):
                    item.done.set()
                else:
                    self._handed += 1
            if isinstance(item, _Control) and item.close:
                return

    def _write_event(self, event: str, wall_time: float, payload: dict[Any, Any]) -> None:
        keys = self._events.get(event, self._other)
        if keys is None:
            chosen = [(key, value) for key, value in payload.items() if key not in _SKIPPED_KEYS]
        else:
            chosen = [(key, payload[key]) for key in keys if key in payload]
        tags, values = [], []
        for key, value in chosen:
            if type(value) in (int, float):
                tags.append(f"{event}/{key}")
                values.append(value)
        if not values:
            return
        step = payload.get("step")
        if type(step) is not int:
            step = self._counters.get(event, 0)
            self._counters[event] = step + 1
        self._writer.add_scalars(wall_time, step, tags, values)

    def _close_at_exit(self) -> None:
        # A forked child (a DataLoader worker) inherits the handler, not the thread: the file is the
        # parent's to close.
        if os.getpid() != self._pid:
            return
        try:
            self.close()
        except Exception as error:
            warnings.warn(f"{self!r} at exit: {error}", TensorboardWarning, stacklevel=1)

    def __repr__(self) -> str:
        return f"<TensorboardHook {'closed' if self._closed else 'open'} log_dir={self.log_dir!r}>"


class _InProcessWriter:
    """tensorboard's ``EventFileWriter`` behind ``add_scalars``: records built here, written by its thread."""

    def __init__(self, writer: Any, make_event: Callable[[float, int, list[str], list[Any]], Any]) -> None:
        self._writer, self._make_event = writer, make_event

    def add_scalars(self, wall_time: float, step: int, tags: list[str], values: list[Any]) -> None:
        self._writer.add_event(self._make_event(wall_time, step, tags, values))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
