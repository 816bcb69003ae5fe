"""``TensorboardHook``: every number of every event as a TensorBoard scalar, written off the training
thread and off its GIL."""

from __future__ import annotations

import atexit
import json
import os
import queue
import threading
import time
import warnings
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from speedtronic.checks import check_count, check_seconds
from speedtronic.errors import SpeedtronicWarning, capped
from speedtronic.extras import require
from speedtronic.integrations._names import (
    CONFIG_EVENTS,
    ONE_OFF_EVENTS,
    SKIPPED_KEYS,
    StepAxis,
    flat_items,
    metric_name,
    step_of,
)
from speedtronic.record.values import to_python

if TYPE_CHECKING:
    from speedtronic.integrations._tensorboard_process import ConfigPoint, Point, Restart

__all__ = ["TensorboardHook", "TensorboardWarning"]

_SKIPPED_KEYS: frozenset[str] = frozenset({"step", *SKIPPED_KEYS})

_SEND_EVERY_S = 0.2
"""How often the writer thread hands the points gathered so far to the writer."""
_SEND_AT = 1000
"""Points gathered that wake the writer thread before its time."""

_NUMBERS = (int, float)
_NOT_NUMBERS = frozenset({str, bool, type(None)})


class TensorboardWarning(SpeedtronicWarning):
    """The TensorBoard writer fell ``max_queue`` events behind and events were dropped."""


class _Control:
    """A request the writer thread answers once the points before it are written: flush, or close."""

    __slots__ = ("close", "done")

    def __init__(self, *, close: bool) -> None:
        self.close = close
        self.done = threading.Event()


class TensorboardHook:
    """Writes every number of every event as a TensorBoard scalar ``<event>/<key>``, off the training thread.

    **What is written.** By default every int and float of every event (0-d tensors and numpy scalars
    included, converted), a nested mapping's under ``<key>/<inner key>`` (``eval/metrics/f1``), except
    the keys in ``skip`` (default ``SKIPPED_KEYS``: ``step``, the x-axis, and ``elapsed_s``). Other
    values (strings, bools, lists, tensors of several elements) are no scalars and are skipped, not
    errors (W&B keeps them in its table, and charts none of them either). Or choose: ``events`` maps
    an event name to the keys to write (``None``: every number but ``skip``; ``()``: nothing), and its
    entry ``"*"`` applies to the events not named, e.g. ``events={"train_step": ["loss"], "*": ()}``.
    All of one event's scalars go into one ``Event`` record, as TensorBoard's float32
    ``simple_value`` (what ``SummaryWriter.add_scalar`` writes).

    **The x is W&B's**: the payload's whole-number ``step`` (``5``, ``5.0``, a 0-d tensor), else the
    last step seen (0 before the first), so an ``outer_step`` is drawn at the training step it
    happened at, in TensorBoard as in ``WandbHook``'s charts (``speedtronic.integrations._names``).

    **A resumed run's curve never runs backwards.** A ``train_start`` whose ``start_step`` is above 0
    (a run resumed from the checkpoint of that step) first writes TensorBoard's restart marker at
    ``start_step + 1`` (what ``SummaryWriter(purge_step=...)`` writes): TensorBoard drops the points
    at that step and after that earlier event files in ``log_dir`` hold (the steps a killed run logged
    after its last checkpoint), so the steps the resumed run logs again are shown once.

    **Hyperparameters**: the ``config`` mapping of ``train_start`` and ``hyperparams`` (when ``events``
    chooses it: by default) goes to the HParams dashboard (nested keys joined with ``/``; values other
    than numbers, strings and bools as JSON text) and, as indented JSON, to the Text dashboard under
    ``<event>/config``; never as scalars.

    **One-off events are no charts**: the chosen values of ``ONE_OFF_EVENTS`` (``train_start``,
    ``train_end``...; text and numbers) go, as indented JSON, to the Text dashboard under
    ``<event>/values``, never as single-point scalars.

    **Tags can't collide.** A tag is the event name, a ``/``, the key as it is; in the event name
    ``/`` and ``%`` are written ``%2F`` and ``%25``, so the first ``/`` of a tag always ends the event:
    event ``eval`` with key ``val/loss`` is ``eval/val/loss``, event ``eval/val`` with key ``loss`` is
    ``eval%2Fval/loss``. (``WandbHook`` names its metrics the same way.)

    **Off the training thread, and off its GIL.** ``on_event`` picks the numbers (reading device
    values with ``.item()`` there, on the caller's thread) and appends one tuple to a list; nothing
    else happens on the training thread. The hook's writer thread wakes every 0.2 s (or at 1000
    points) and sends what is gathered, as one ``marshal`` frame, to a writer process of its own
    (``python -m speedtronic.integrations._tensorboard_process``, started with the hook, not waited
    for), which builds, checksums and writes the records: work that, on a thread of the training
    process, would hold the GIL training needs. ``process=False`` writes from the writer thread
    instead (no child process; the records are built in this process). When the writer is
    ``max_queue`` events behind (a stalled disk), further events are dropped, counted in ``dropped``
    and reported once with a ``TensorboardWarning``. (``on_event`` expects one caller at a time, as
    ``MetricLogger`` calls hooks under its lock.)

    **Failures never stop training.** A failed writer (disk full, a killed writer process) is raised
    by the next ``on_event``, ``flush`` or ``close`` as ``RuntimeError``, so the logger counts and
    reports it as a hook failure and carries on; the events it lost are counted in ``dropped``.
    ``flush()`` and ``close()`` wait at most ``timeout_s`` and raise ``TimeoutError`` past it; a
    writer process that stops answering is then killed, so nothing waits on it at exit.

    The event file (``events.out.tfevents.*`` in ``log_dir``, one per hook) is flushed every
    ``flush_secs`` seconds: a killed run loses at most the last ``flush_secs`` + 0.2 s of points (a
    killed training process none of what it sent: the writer process reads the end of its pipe and
    closes the file), a run that calls ``close()`` (or ``MetricLogger.close()``, or exits normally)
    loses none. After ``close()``, ``on_event`` raises ``RuntimeError``; no second event file is ever
    created. Don't log through one hook from a forked child process.

    Args:
        log_dir: directory for the event file (created here: a ``ValueError`` names it when it can't be).
        events: event name → keys to write (see above); default: every number of every event.
        skip: keys not written where every number is (``events`` entries ``None``, or the default).
        flush_secs: longest time a written point waits in memory before it reaches the file.
        max_queue: events waiting for the writer before new ones are dropped.
        timeout_s: longest wait of ``flush()`` and ``close()``.
        process: write from a child process (default) or from the writer thread.
    """

    SKIPPED_KEYS: ClassVar[frozenset[str]] = _SKIPPED_KEYS
    """Keys not written by default: ``step`` is the x-axis, ``elapsed_s`` the logger's clock."""

    def __init__(
        self,
        log_dir: str | os.PathLike[str] = "runs/tensorboard",
        *,
        events: Mapping[str, Collection[str] | None] | None = None,
        skip: Collection[str] = _SKIPPED_KEYS,
        flush_secs: float = 2.0,
        max_queue: int = 10_000,
        timeout_s: float = 30.0,
        process: bool = True,
    ) -> None:
        # What the writer needs, imported here so a missing or broken install fails now.
        for module in ("tensorboard.compat.proto.event_pb2", "tensorboard.summary.writer.event_file_writer"):
            require(module, "tensorboard", needed_by="speedtronic.integrations.TensorboardHook")
        check_count("TensorboardHook: max_queue", max_queue)
        check_seconds("TensorboardHook: flush_secs", flush_secs)
        check_seconds("TensorboardHook: timeout_s", timeout_s)
        self.log_dir = os.fspath(log_dir)
        try:
            os.makedirs(self.log_dir, exist_ok=True)
        except OSError as error:
            raise ValueError(f"TensorboardHook(log_dir={self.log_dir!r}): can't create it: {error}") from None
        self.timeout_s = timeout_s
        self.max_queue = max_queue
        events = {"*": None} if events is None else events
        self._events = {event: None if keys is None else tuple(keys) for event, keys in events.items()}
        self._other = self._events.pop("*", ())
        self._skip = frozenset(skip)
        # Imported here: the writer process runs that module as __main__, which must not be imported
        # before (by this package's __init__).
        from speedtronic.integrations._tensorboard_process import InProcessWriter, ProcessWriter

        self._writer: ProcessWriter | InProcessWriter = (
            ProcessWriter(self.log_dir, flush_secs=flush_secs)
            if process
            else InProcessWriter(self.log_dir, flush_secs=flush_secs)
        )
        self._points: list[
            Point | ConfigPoint | Restart
        ] = []  # appended by on_event, taken by the writer thread
        self._sending = 0  # points the writer thread has taken and not yet handed over
        self._axis = StepAxis()
        self._full_drops = 0  # the training thread's count...
        self._lost = 0  # ...and the writer thread's
        self._failure: Exception | None = None
        self._closed = False
        self._controls: queue.SimpleQueue[_Control] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._write, name="speedtronic-tensorboard", daemon=True)
        self._thread.start()
        atexit.register(self._close_at_exit)

    @property
    def dropped(self) -> int:
        """Events not written: the writer was ``max_queue`` events behind, or failed."""
        return self._full_drops + self._lost

    @property
    def pending(self) -> int:
        """Events handed to the hook and not yet handed to the writer."""
        return len(self._points) + self._sending

    def on_event(self, event: str, payload: Mapping[Any, Any]) -> None:
        """Gather the event's numbers for the writer thread; they are written at the event's step.

        The least work possible here, on the training thread: the numbers picked (device values
        read now, with ``.item()``, so never from another thread or stream) and one append.
        """
        if self._closed:
            raise RuntimeError(f"TensorboardHook({self.log_dir!r}) is closed; create a new hook")
        step = step_of(payload["step"]) if "step" in payload else None
        if event == "train_start" and "start_step" in payload:
            start = step_of(payload["start_step"])
            if start is not None and start > 0:  # resumed: earlier files' later points are purged
                self._gather(("", time.time(), start + 1, None, None))
        x = self._axis.at(step)
        keys = self._events.get(event, self._other)
        config = payload.get("config") if event in CONFIG_EVENTS else None
        if isinstance(config, Mapping) and (keys is None or "config" in keys):
            self._gather_config(event, x, config)
        if keys is None:
            chosen = flat_items(payload, self._skip | {"config"} if config is not None else self._skip)
        else:
            chosen = flat_items({key: payload[key] for key in keys if key in payload and key != "config"})
        if event in ONE_OFF_EVENTS:  # one point is no chart: the Text dashboard shows the values
            values_text = {key: to_python(value) for key, value in chosen if key != "timestamp"}
            if values_text:
                self._gather_text(metric_name(event, "values"), x, values_text, {})
            if self._failure is not None:
                self._raise_failure()
            return
        names: list[str] = []
        values: list[float] = []
        for key, value in chosen:
            if type(value) not in _NUMBERS:
                if type(value) in _NOT_NUMBERS:
                    continue
                value = to_python(value)
                if type(value) not in _NUMBERS:
                    continue
            names.append(key)
            values.append(value)
        if values:
            self._gather((event, time.time(), x, names, values))
        if self._failure is not None:  # the writer failed: the logger counts it, training goes on
            self._raise_failure()

    def _gather(self, point: Point | ConfigPoint | Restart) -> None:
        if len(self._points) + self._sending >= self.max_queue:
            self._drop()
            return
        self._points.append(point)
        if len(self._points) >= _SEND_AT:
            self._wake.set()

    def _gather_config(self, event: str, x: int, config: Mapping[Any, Any]) -> None:
        """The config as the HParams dashboard's values and the Text dashboard's JSON."""
        plain = to_python(config)
        hparams: dict[str, bool | int | float | str] = {}
        for key, value in flat_items(plain):
            hparams[key] = value if type(value) in (bool, int, float, str) else json.dumps(value, default=str)
        self._gather_text(metric_name(event, "config"), x, plain, hparams)

    def _gather_text(
        self, tag: str, x: int, plain: Any, hparams: dict[str, bool | int | float | str]
    ) -> None:
        """``plain`` as indented JSON under the Text dashboard's ``tag``, with ``hparams`` (if any)."""
        text = json.dumps(plain, indent=2, default=str, sort_keys=True)
        self._gather((tag, time.time(), x, "\n".join(f"    {line}" for line in text.splitlines()), hparams))

    def flush(self, timeout_s: float | None = None) -> None:
        """Block until every point handed over so far is in the file; ``TimeoutError`` after ``timeout_s``."""
        if not self._closed:
            self._request(_Control(close=False), timeout_s)
            self._raise_failure()

    def close(self, timeout_s: float | None = None) -> None:
        """Write what is gathered and close the event file; idempotent.

        Raises ``TimeoutError`` when that takes longer than ``timeout_s`` (default: the hook's); a
        writer process is then killed, and the writer thread (a daemon) ends with it.
        """
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._close_at_exit)
        try:
            self._request(_Control(close=True), timeout_s)
        except TimeoutError:
            self._writer.abandon()
            raise
        self._thread.join()
        self._raise_failure()

    def _drop(self) -> None:
        self._full_drops += 1
        if self._full_drops == 1:
            warnings.warn(
                f"TensorboardHook({self.log_dir!r}): the writer is {self.max_queue} events behind; "
                "dropping events until it catches up (counted in .dropped)",
                TensorboardWarning,
                stacklevel=3,
            )

    def _request(self, control: _Control, timeout_s: float | None) -> None:
        timeout = self.timeout_s if timeout_s is None else timeout_s
        self._controls.put(control)
        self._wake.set()
        if not control.done.wait(timeout):
            what = "close" if control.close else "flush"
            raise TimeoutError(f"TensorboardHook({self.log_dir!r}): {what} not done in {timeout} s")

    def _raise_failure(self) -> None:
        failure, self._failure = self._failure, None
        if failure is not None:
            raise RuntimeError(f"TensorboardHook({self.log_dir!r}): writing failed: {failure!r}") from failure

    def _write(self) -> None:
        """The writer thread: every ``_SEND_EVERY_S`` (or when woken), the points gathered, then the
        requests made before them, until a close request."""
        while True:
            self._wake.wait(_SEND_EVERY_S)
            self._wake.clear()
            controls = []
            while not self._controls.empty():
                controls.append(self._controls.get())
            count = self._sending = len(self._points)  # every point gathered before the requests
            batch = self._points[:count]
            del self._points[:count]
            closing = any(control.close for control in controls)
            try:
                if batch:
                    self._writer.write(batch)
                if closing:
                    self._writer.close()
                elif controls:
                    self._writer.flush()
            except Exception as error:
                self._failure = error
                self._lost += count if batch else 0
            finally:
                self._sending = 0
                for control in controls:
                    control.done.set()
            if closing:
                return

    def _close_at_exit(self) -> None:
        # A forked child (a DataLoader worker) inherits the handler, not the thread: the file is the
        # parent's to close.
        if os.getpid() != self._pid:
            return
        try:
            self.close()
        except Exception as error:
            warnings.warn(capped(f"{self!r} at exit: {error}"), TensorboardWarning, stacklevel=1)

    def __repr__(self) -> str:
        return f"<TensorboardHook {'closed' if self._closed else 'open'} log_dir={self.log_dir!r}>"
