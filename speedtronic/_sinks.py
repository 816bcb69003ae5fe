"""Where rendered lines go: the JSONL file and the text log's stdlib logger.

Both report I/O failures to a callback instead of raising: a full disk must not end a training run.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

__all__ = ["JSONLFile", "LineRecord", "open_text_logger"]

OnWriteError = Callable[[OSError, str], None]


class JSONLFile:
    """An append-only file receiving one whole line per ``write``, each reaching the OS at once.

    Opened with ``O_APPEND``, so each record is one ``write(2)`` at the end of the file; there is no
    user-space buffer, so a killed process loses at most the record being written. A file whose last
    line is torn (a killed writer) gets a newline first, so the next record starts on its own line.
    """

    def __init__(self, path: str | os.PathLike[str], on_error: OnWriteError) -> None:
        self.path = Path(path)
        self._on_error = on_error
        self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        self._fd: int | None = os.open(self.path, flags, 0o644)
        self._torn = _ends_torn(self._fd)

    def write(self, line: bytes) -> None:
        """Append ``line`` plus a newline; on failure, report it and make sure the next starts clean."""
        fd = self._fd
        if fd is None:
            raise ValueError(f"JSONL file {self.path} is closed")
        data = b"\n" + line + b"\n" if self._torn else line + b"\n"
        written = 0
        try:
            while written < len(data):
                written += os.write(fd, data[written:])
            self._torn = False
        except OSError as error:
            self._torn = self._torn or written > 0
            self._on_error(error, str(self.path))

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _ends_torn(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


class LineRecord(logging.LogRecord):
    """A ``LogRecord`` for a line that is already formatted, built without ``LogRecord``'s costly parts.

    It carries every attribute a ``logging.Formatter`` reads, so handlers a user adds to
    ``MetricLogger.text_logger`` format it as usual; there is just no caller (``pathname``,
    ``lineno``, ``funcName`` are empty) because the line is about an event, not a call site.
    """

    def __init__(self, name: str, levelno: int, line: str) -> None:
        now = time.time()
        self.name, self.msg, self.args = name, line, None
        self.levelno, self.levelname = levelno, logging.getLevelName(levelno)
        self.pathname = self.filename = self.module = ""
        self.lineno, self.funcName = 0, ""
        self.exc_info = self.exc_text = self.stack_info = None
        self.created, self.msecs = now, int(now % 1 * 1000)
        self.relativeCreated = (now - logging._startTime) * 1000  # type: ignore[attr-defined]  # stdlib's
        self.thread, self.threadName = threading.get_ident(), ""
        self.process, self.processName = os.getpid(), ""
        self.taskName = None


class _LineWriter:
    """Writes a ``LineRecord``'s line as is; any other record (or a set formatter) goes the usual way."""

    formatter: logging.Formatter | None
    on_error: OnWriteError

    def emit(self, record: logging.LogRecord) -> None:
        if self.formatter is not None or type(record) is not LineRecord:
            logging.StreamHandler.emit(self, record)  # type: ignore[arg-type]  # a StreamHandler mixin
            return
        try:
            stream = self.stream  # type: ignore[attr-defined]  # StreamHandler's
            stream.write(record.msg + "\n")
            stream.flush()
        except Exception:
            self.handleError(record)  # type: ignore[attr-defined]  # Handler's


class _ReportingFileHandler(_LineWriter, logging.FileHandler):
    def handleError(self, record: logging.LogRecord) -> None:  # stdlib's name
        _report_current(self.on_error, self.baseFilename)


class _ReportingStreamHandler(_LineWriter, logging.StreamHandler):  # type: ignore[type-arg]  # IO[str]
    def handleError(self, record: logging.LogRecord) -> None:  # stdlib's name
        _report_current(self.on_error, getattr(self.stream, "name", "<stream>"))


def _report_current(on_error: OnWriteError, where: str) -> None:
    error = sys.exc_info()[1]
    on_error(error if isinstance(error, OSError) else OSError(str(error)), str(where))


def open_text_logger(
    name: str,
    level: int,
    file: str | os.PathLike[str] | None,
    stream: IO[str] | None,
    on_error: OnWriteError,
) -> tuple[logging.Logger, logging.Handler]:
    """A stdlib logger of its own, outside logging's registry, that never propagates to the root.

    It writes to ``file`` (appended, UTF-8, parent directories created) or ``stream`` (default
    stdout). The caller owns it and closes the returned handler.
    """
    handler: _ReportingFileHandler | _ReportingStreamHandler
    if file is not None:
        Path(file).parent.mkdir(parents=True, exist_ok=True)
        handler = _ReportingFileHandler(file, mode="a", encoding="utf-8")
    else:
        handler = _ReportingStreamHandler(stream if stream is not None else sys.stdout)
    handler.on_error = on_error
    logger = logging.Logger(name, level)
    logger.propagate = False
    logger.addHandler(handler)
    return logger, handler
