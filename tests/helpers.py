"""Helpers the tests share: reading what a logger wrote, a journaling hook, the virtualenv's PATHs, a
webhook receiver (a real HTTP server on 127.0.0.1).

Import them from here (``from tests.helpers import read_jsonl``); ``conftest.py`` holds fixtures only.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "ACTIVATED_PATH",
    "SCRIPTS",
    "UNACTIVATED_PATH",
    "WEBHOOK_TOKEN",
    "Journal",
    "WebhookHandler",
    "WebhookReceiver",
    "parse_jsonl",
    "read_jsonl",
    "run_records",
    "tensorboard_scalars",
]

SCRIPTS = Path(sys.executable).parent
"""Where this Python's commands are (``speedtronic``, ``tensorboard``): the virtualenv's ``bin``."""
ACTIVATED_PATH = os.pathsep.join([str(SCRIPTS), os.environ.get("PATH", "")])
"""``PATH`` of a shell with the virtualenv activated: the commands speedtronic prints are bare names."""
UNACTIVATED_PATH = os.pathsep.join(
    entry
    for entry in os.environ.get("PATH", "").split(os.pathsep)
    if entry and Path(entry).resolve() != SCRIPTS.resolve()
)
"""``PATH`` of a shell that never activated it (as after ``make run``)."""


def read_jsonl(path: str | os.PathLike[str], *, strict: bool = True) -> list[dict[str, Any]]:
    """Every line of a JSONL file, parsed strictly (NaN/Infinity literals are refused), or as Python's
    ``json`` reads them (``strict=False``: a test hook's own journal, written by ``json.dumps``)."""
    return parse_jsonl(Path(path).read_text("utf-8"), strict=strict)


def run_records(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a run directory's ``metrics.jsonl`` (``read_jsonl``)."""
    return read_jsonl(Path(run_dir) / "metrics.jsonl")


def parse_jsonl(text: str, *, strict: bool = True) -> list[dict[str, Any]]:
    """Every line of JSONL text (a child's stdout), parsed as ``read_jsonl`` parses a file's."""

    def refuse(token: str) -> None:
        raise ValueError(f"non-standard JSON constant {token}")

    if not strict:
        return [json.loads(line) for line in text.splitlines()]
    return [json.loads(line, parse_constant=refuse) for line in text.splitlines()]


def tensorboard_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag in ``log_dir`` with its (step, value) points, read by TensorBoard itself."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: [(point.step, point.value) for point in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


class Journal:
    """A hook that journals ``"<name> <event>"`` and ``"<name> close"`` into a shared list, so a test
    asserts the order of calls across hooks (pluggy's way)."""

    def __init__(self, name: str, out: list[str]) -> None:
        self.name, self.out = name, out

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self.out.append(f"{self.name} {event}")

    def close(self) -> None:
        self.out.append(f"{self.name} close")


WEBHOOK_TOKEN = "T0SECRET/B0SECRET/xyzWEBHOOKTOKENxyz"
"""The secret part of ``WebhookReceiver.url``'s path, as in a Slack incoming webhook's URL."""


class WebhookReceiver(ThreadingHTTPServer):
    """A webhook receiver on 127.0.0.1, serving in a thread from ``start``: ``mode`` says how it
    answers (``ok``, ``hang``, ``500``, ``drop``); a list of modes is used one request after another
    (the last one repeats). ``requests`` holds each request's path, headers and JSON body."""

    daemon_threads = True

    def __init__(self, modes: list[str]) -> None:
        super().__init__(("127.0.0.1", 0), WebhookHandler)
        self.modes = modes
        self.requests: list[dict[str, Any]] = []
        self.received = threading.Event()  # a request arrived
        self.release = threading.Event()  # a hanging handler may return
        self.lock = threading.Lock()

    @classmethod
    def start(cls, *modes: str) -> WebhookReceiver:
        """A receiver answering with ``modes`` (``ok`` when none), serving in a daemon thread."""
        server = cls(list(modes or ["ok"]))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def stop(self) -> None:
        """Let hanging handlers return, stop serving, close the socket."""
        self.release.set()
        self.shutdown()
        self.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/services/{WEBHOOK_TOKEN}"


class WebhookHandler(BaseHTTPRequestHandler):
    server: WebhookReceiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            index = len(self.server.requests)
            mode = self.server.modes[min(index, len(self.server.modes) - 1)]
            self.server.requests.append(
                {"path": self.path, "headers": dict(self.headers), "body": json.loads(body), "mode": mode}
            )
        self.server.received.set()
        if mode == "hang":
            self.server.release.wait(120)
            self.close_connection = True
            return
        if mode == "drop":
            self.close_connection = True  # no status line: the client sees the connection closed
            return
        status = 500 if mode == "500" else 200
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:
        pass


def assert_health_split(run: Path, steps: int, pause: float) -> None:
    """An adapter run of ``steps`` steps whose batches (4 draws each) and forward passes each slept
    ``pause``: ``run_health`` gives a goodput and splits the lost time into data waiting, evaluation
    and checkpoints, the parts adding up to the wall time."""
    from speedtronic.runs.health import PARTS, run_health

    health = run_health(run)
    assert health.goodput is not None
    assert 0 < health.goodput < 1
    assert health.data_wait_s >= steps * 4 * pause
    assert health.eval_s > 0
    assert health.checkpoint_s > 0
    assert health.productive_s >= steps * pause
    assert sum(getattr(health, part) for part in PARTS) == pytest.approx(health.wall_s)


def user_package(lib: Path, name: str, source: str) -> None:
    """A package of the user's, ``lib/<name>/__init__.py`` holding ``source`` (``lib`` goes on the
    ``PYTHONPATH`` of the process that imports it, as a hook's ``package:factory`` type)."""
    (lib / name).mkdir(parents=True)
    (lib / name / "__init__.py").write_text(source)
