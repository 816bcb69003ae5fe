"""A TensorBoard event file written by a process of its own, for ``TensorboardHook(process=True)``.

tensorboard's ``EventFileWriter`` computes each record's CRC32C in pure Python on a thread of the
training process, where it competes with training for the GIL. Here the training process only
serialises each ``Event`` (protobuf's C code) and writes the bytes to a pipe; a child interpreter
(``python -m speedtronic.integrations._tensorboard_process``: a plain subprocess, so the user's main
module is never imported again, as ``multiprocessing``'s spawn would) owns the ``EventFileWriter``
and does the rest. ``TensorboardHook``'s writer thread is the one writing to the pipe: when the child
falls behind, that thread waits, and the hook's bounded queue protects the training thread. If the
training process dies, the child reads the end of the pipe and closes the file with everything it
was sent.

The training process doesn't even build the protobuf messages: a frame carries the event's scalars
as ``marshal`` data (``(wall_time, step, tags, values)``: C code, NaN and infinities kept; both ends
run the same interpreter), and the child builds the ``Event`` with ``scalar_event``, the function
the in-process writer uses too.

Protocol, parent to child on stdin: frames of a 4-byte big-endian length, then a kind byte (``S``
scalars, ``F`` flush, ``C`` close) and the scalars. The child answers ``ok`` (or an error) on stdout,
one line, once started and after each flush and close.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import select
import signal
import struct
import subprocess
import sys
from typing import IO, Any

__all__ = ["ProcessWriter", "main", "scalar_event"]

_SCALARS, _FLUSH, _CLOSE = b"S", b"F", b"C"
_HEADER = struct.Struct(">I")


def scalar_event(
    event_type: Any, summary_type: Any, wall_time: float, step: int, tags: list[str], values: list[Any]
) -> Any:
    """One TensorBoard ``Event`` holding a scalar (float32 ``simple_value``) for each tag."""
    scalars = zip(tags, values, strict=True)
    summary = summary_type(value=[summary_type.Value(tag=tag, simple_value=value) for tag, value in scalars])
    return event_type(wall_time=wall_time, step=step, summary=summary)


class ProcessWriter:
    """A TensorBoard event file written by a child process: ``add_scalars``, ``flush``, ``close``."""

    def __init__(self, log_dir: str, *, flush_secs: float, max_queue: int, timeout_s: float = 60.0):
        self._timeout_s = timeout_s
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._process = subprocess.Popen(
            [sys.executable, "-m", __name__, os.fspath(log_dir), str(flush_secs), str(max_queue)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0,
        )
        try:
            self._reply("start")
        except BaseException:
            self._end(kill=True)
            raise

    def add_scalars(self, wall_time: float, step: int, tags: list[str], values: list[Any]) -> None:
        """Have the child write one ``Event`` with these scalars (see ``scalar_event``)."""
        self._send(_SCALARS, marshal.dumps((wall_time, step, tags, values)))

    def flush(self) -> None:
        """Return once the child has written everything sent so far to the file."""
        self._send(_FLUSH)
        self._reply("flush")

    def close(self) -> None:
        """Have the child write what it has and close the file; then wait for it to end."""
        try:
            self._send(_CLOSE)
            self._reply("close")
        finally:
            self._end(kill=False)

    def _end(self, *, kill: bool) -> None:
        """Close both pipes and reap the child (killed when asked, or when it won't end in time)."""
        process = self._process
        assert process.stdin is not None
        assert process.stdout is not None
        with contextlib.suppress(OSError):
            process.stdin.close()
        if kill:
            process.kill()
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
    """The child: write each event received; flush or close when told; stop at the end of stdin."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C hits the process group; the parent decides
    log_dir, flush_secs, max_queue = argv[0], float(argv[1]), int(argv[2])
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    try:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        writer = EventFileWriter(log_dir, max_queue_size=max_queue, flush_secs=flush_secs)
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
            if kind == _SCALARS:
                writer.add_event(scalar_event(Event, Summary, *marshal.loads(frame[1:])))
            elif kind == _FLUSH:
                writer.flush()
                stdout.write(b"ok\n")
                stdout.flush()
            elif kind == _CLOSE:
                break
    finally:
        writer.close()
        try:
            stdout.write(b"ok\n")
            stdout.flush()
        except OSError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
