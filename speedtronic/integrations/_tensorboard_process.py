"""TensorBoard event files from batches of scalars: in this process (``InProcessWriter``), or in a
child process of their own (``ProcessWriter``), so the training process's GIL stays free."""

from __future__ import annotations

import contextlib
import marshal
import math
import os
import select
import signal
import struct
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any

from speedtronic.integrations._names import metric_name

__all__ = ["ConfigPoint", "InProcessWriter", "Point", "ProcessWriter", "Restart", "main", "write_batch"]

Point = tuple[str, float, int, Sequence[str], Sequence[float]]
"""One event's scalars: ``(event, wall_time, step, keys, values)``; each key is written as the tag
``<event>/<key>`` (``speedtronic.integrations._names.metric_name``)."""
ConfigPoint = tuple[str, float, int, str, Mapping[str, "bool | int | float | str"]]
"""One text: ``(tag, wall_time, step, text, hparams)``: ``text`` (Markdown) for the Text dashboard's
``tag`` (``<event>/config``, ``<event>/values``), ``hparams`` (flat; none: no HParams session) for the
HParams dashboard."""
Restart = tuple[str, float, int, None, None]
"""A resumed run's restart, ``("", wall_time, step, None, None)``: TensorBoard drops the points at
``step`` and after that earlier files hold (what ``SummaryWriter(purge_step=step)`` writes)."""

# Building, checksumming (pure-Python CRC32C) and writing TensorBoard's records holds the GIL, so by
# default a child interpreter does it. Parent to child on stdin: frames of a 4-byte big-endian length,
# then a kind byte (S points, F flush, C close) and the points as one marshal frame (C code; NaN and
# infinities kept; both ends run the same interpreter). The child answers "ok" (or an error) on stdout,
# one line, once started and after each flush and close; at the end of the pipe (the trainer died) it
# closes the file with everything it was sent. It is a plain subprocess (python -m), not
# multiprocessing's spawn, so the user's main module is never imported again.
_POINTS, _FLUSH, _CLOSE = b"S", b"F", b"C"
_HEADER = struct.Struct(">I")


def _as_float(value: float) -> float:
    try:
        return float(value)
    except OverflowError:  # an int beyond a double: as far as float32 goes anyway
        return math.inf if value > 0 else -math.inf


def write_batch(writer: Any, batch: Sequence[Point | ConfigPoint | Restart]) -> None:
    """Add one TensorBoard ``Event`` per point to ``writer`` (an ``EventFileWriter``): a float32
    ``simple_value`` per tag, what ``SummaryWriter.add_scalar`` writes; for a config, a text summary
    and the HParams plugin's session start (what ``SummaryWriter.add_text`` and ``add_hparams`` write);
    for a restart, the session start ``SummaryWriter(purge_step=...)`` writes."""
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog
    from tensorboard.compat.proto.summary_pb2 import Summary

    for event, wall_time, step, keys, values in batch:
        if keys is None:
            start = SessionLog(status=SessionLog.START)
            writer.add_event(Event(wall_time=wall_time, step=step, session_log=start))
            continue
        if isinstance(keys, str):
            from tensorboard.plugins.hparams.summary_v2 import hparams_pb
            from tensorboard.plugins.text.summary_v2 import text_pb

            assert isinstance(values, Mapping)
            text = text_pb(event, keys)  # event: the text's tag
            writer.add_event(Event(wall_time=wall_time, step=step, summary=text))
            if values:
                hparams = hparams_pb(dict(values), start_time_secs=wall_time)
                writer.add_event(Event(wall_time=wall_time, step=step, summary=hparams))
            continue
        assert values is not None
        assert not isinstance(values, Mapping)
        summary = Summary(
            value=[
                Summary.Value(tag=metric_name(event, key), simple_value=_as_float(value))
                for key, value in zip(keys, values, strict=True)
            ]
        )
        writer.add_event(Event(wall_time=wall_time, step=step, summary=summary))


class InProcessWriter:
    """tensorboard's ``EventFileWriter`` in this process: ``write``, ``flush``, ``close``."""

    def __init__(self, log_dir: str, *, flush_secs: float) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._writer = EventFileWriter(log_dir, flush_secs=flush_secs)

    def write(self, batch: Sequence[Point | ConfigPoint | Restart]) -> None:
        write_batch(self._writer, batch)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()

    def abandon(self) -> None:
        """Nothing to stop: the file writer's own thread is a daemon."""


class ProcessWriter:
    """A TensorBoard event file written by a child process: ``write``, ``flush``, ``close``, ``abandon``.

    The child is started here and not waited for: the first call waits (at most ``timeout_s``) for
    its ``ok``, so building a hook costs the training thread a ``fork``/``exec``, not an interpreter
    start.
    """

    def __init__(self, log_dir: str, *, flush_secs: float, timeout_s: float = 60.0) -> None:
        self._timeout_s = timeout_s
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._process = subprocess.Popen(
            [sys.executable, "-m", __name__, os.fspath(log_dir), str(flush_secs)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            bufsize=0,
        )
        self._started = False
        self._ended = False

    def write(self, batch: Sequence[Point | ConfigPoint | Restart]) -> None:
        """Send the points; the child writes them (see ``write_batch``)."""
        self._start()
        self._send(_POINTS, marshal.dumps(list(batch)))

    def flush(self) -> None:
        """Return once the child has written everything sent so far to the file."""
        self._start()
        self._send(_FLUSH)
        self._reply("flush")

    def close(self) -> None:
        """Have the child write what it has and close the file; then wait for it to end."""
        try:
            self._start()
            self._send(_CLOSE)
            self._reply("close")
        finally:
            self._end(kill=False)

    def abandon(self) -> None:
        """Kill the child (it stopped answering): a thread blocked writing to it gets an error."""
        self._end(kill=True)

    def _start(self) -> None:
        if self._ended:
            raise RuntimeError("TensorBoard writer process: ended after an earlier failure")
        if not self._started:
            try:
                self._reply("start")
            except BaseException:
                self._end(kill=True)
                raise
            self._started = True

    def _end(self, *, kill: bool) -> None:
        """Close both pipes and reap the child (killed when asked, or when it won't end in time)."""
        if self._ended:
            return
        self._ended = True
        process = self._process
        assert process.stdin is not None
        assert process.stdout is not None
        if kill:
            process.kill()
        with contextlib.suppress(OSError):
            process.stdin.close()
        try:
            process.wait(self._timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()

    def _send(self, kind: bytes, data: bytes = b"") -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(_HEADER.pack(len(data) + 1) + kind + data)

    def _reply(self, what: str) -> None:
        stdout = self._process.stdout
        assert stdout is not None
        if not select.select([stdout], [], [], self._timeout_s)[0]:
            raise TimeoutError(f"TensorBoard writer process: no answer to {what} in {self._timeout_s} s")
        reply = stdout.readline().strip()
        if reply != b"ok":
            code = self._process.poll()
            detail = reply.decode(errors="replace") or f"ended with exit code {code}"
            raise RuntimeError(f"TensorBoard writer process failed at {what}: {detail}")


def _read_exactly(stream: IO[bytes], size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def main(argv: list[str]) -> int:
    """The child: write each batch received; flush or close when told; stop at the end of stdin."""
    # Ctrl-C, and the SIGTERM of `timeout` or Slurm, hit the whole process group: the parent decides,
    # and closes this process through the pipe (or by ending, which ends stdin).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(OSError):  # background work: training gets the cores first
        os.nice(10)
    log_dir, flush_secs = argv[0], float(argv[1])
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    try:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        writer = EventFileWriter(log_dir, flush_secs=flush_secs)
    except Exception as error:
        stdout.write(f"{type(error).__name__}: {error}\n".encode())
        stdout.flush()
        return 1
    stdout.write(b"ok\n")
    stdout.flush()
    try:
        while True:
            header = _read_exactly(stdin, _HEADER.size)
            frame = _read_exactly(stdin, _HEADER.unpack(header)[0]) if header else None
            if frame is None:  # the training process is gone: keep what it sent
                break
            kind = frame[:1]
            if kind == _POINTS:
                write_batch(writer, marshal.loads(frame[1:]))
            elif kind == _FLUSH:
                writer.flush()
                stdout.write(b"ok\n")
                stdout.flush()
            elif kind == _CLOSE:
                break
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            stdout.write(b"ok\n")
            stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
