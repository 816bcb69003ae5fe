"""``WebhookHook``: each alert (or each event you name) as an HTTP POST of JSON, off the training thread."""

from __future__ import annotations

import atexit
import json
import os
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from speedtronic._version import __version__
from speedtronic.checks import check_count, check_seconds, is_http_url
from speedtronic.errors import HookFailureWarning
from speedtronic.events import Event
from speedtronic.integrations.structlog import exception_text
from speedtronic.lifecycle import close_loggers_first_at_exit
from speedtronic.processors.redact import Redact
from speedtronic.record import NOTE_KEY
from speedtronic.record.secrets import redact_text
from speedtronic.record.text import format_fields
from speedtronic.record.values import json_safe_record

__all__ = ["RETRIED_STATUSES", "WebhookHook", "alert_text"]

RETRIED_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
"""HTTP statuses worth another try; any other 4xx is the request's fault and is not retried."""

_STOP = object()
_MAX_BACKOFF_S = 30.0
_NOT_IN_TEXT = ("event", "timestamp", "elapsed_s", "world_size", NOTE_KEY)
_SLACK_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def alert_text(record: Mapping[str, Any], name: str | None = None) -> str:
    """The one-line text of a record: ``[name] WARNING spike (rank 1): <message>`` for an alert (the
    rank left out where the message names it: ``ERROR stall: rank 1: no train_step ...``),
    ``[name] <event>: key=value ...`` for any other event."""
    prefix = f"[{name}] " if name else ""
    if record.get("event") != Event.ALERT:
        return f"{prefix}{record.get('event')}:{format_fields(record, skip=_NOT_IN_TEXT)}"
    severity = str(record.get("severity", "warning")).upper()
    message = record.get("message") or format_fields(record, skip=(*_NOT_IN_TEXT, "rule", "severity")).strip()
    rank = f" (rank {record['rank']})" if record.get("rank") is not None else ""
    if rank and f"rank {record['rank']}: " in str(message):  # a stall's message names its rank itself
        rank = ""
    return f"{prefix}{severity} {record.get('rule')}{rank}: {message}"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not a new request: urllib would follow a 302 as a GET without the body."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)
"""How the hook posts: urllib's default handlers (its proxies from the environment included), no
redirects followed (a 3xx is refused, not retried)."""


class _Undelivered(Exception):
    """A post that failed every try; its message says why."""


class _Refused(_Undelivered):
    """A post the receiver refused for good (HTTP 3xx, and 4xx other than 408/429): not tried again."""


def _names(values: object) -> bool:
    """Whether ``values`` is a collection of strings (not one string: its letters are no list)."""
    return (
        not isinstance(values, str)
        and isinstance(values, Iterable)
        and all(isinstance(value, str) for value in values)
    )


class WebhookHook:
    """POSTs each alert (``events``) as JSON to ``url`` from a worker thread; see the module.

    Args:
        url: the ``http://`` or ``https://`` URL to post to (a Slack incoming webhook's, yours).
        url_env: instead of ``url``, the environment variable that holds it: the URL (a token) then
            stays out of the config file and out of the run's recorded config.
        events: the events posted (default: ``alert`` only); every other event costs one set lookup.
        name: shown first in ``text`` (``[run-42] WARNING spike: ...``), to tell runs apart in a channel.
        headers: extra HTTP headers (a receiver's ``Authorization``); never written anywhere.
        timeout_s: longest one post waits for the connection and for each read of the answer.
        retries: further tries after a failed post (0: one try), each after a back-off of
            ``backoff_s``, doubled each time (at most 30 s).
        backoff_s: the first back-off.
        queue_size: events waiting for the worker; past it an event is dropped and counted
            (``dropped``), never waited for.
        close_timeout_s: longest ``close()`` waits to deliver what is queued; past it the rest is
            counted as not delivered.
        redact: ``True`` (the logs' default rules), ``False``, or your extra key patterns, as
            ``MetricLogger(redact=...)`` takes them.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        url_env: str | None = None,
        events: Collection[str] = (Event.ALERT,),
        name: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 5.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        queue_size: int = 1000,
        close_timeout_s: float = 10.0,
        redact: bool | Iterable[str] = True,
    ) -> None:
        if (url is None) == (url_env is None):
            raise ValueError("WebhookHook: pass either url= or url_env= (the environment variable with it)")
        where = "url"
        if url_env is not None:
            if url_env not in os.environ:
                raise ValueError(
                    f"WebhookHook: the environment variable {url_env!r} (url_env) is not set; set it to the "
                    "http:// or https:// URL to post to"
                )
            url, where = os.environ[url_env], f"the environment variable {url_env!r} (url_env)"
        if not is_http_url(url):
            raise ValueError(f"WebhookHook: {where} must be an http:// or https:// URL with a host")
        parts = urllib.parse.urlsplit(url)
        self.shown_url = f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}/…"
        """The URL as the hook writes it: scheme and host only (its path or query may hold a token)."""
        if not _names(events):
            raise ValueError(f"WebhookHook: events must be a list of event names, got {events!r}")
        if headers is not None and not (
            isinstance(headers, Mapping) and _names([*headers, *headers.values()])
        ):
            # not shown: a header's value is often a token
            raise ValueError(
                f"WebhookHook: headers must be a mapping of header names to values (text), got a "
                f"{type(headers).__name__}"
            )
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"WebhookHook: retries must be an int >= 0, got {retries!r}")
        check_seconds("WebhookHook: timeout_s", timeout_s)
        check_seconds("WebhookHook: backoff_s", backoff_s)
        check_seconds("WebhookHook: close_timeout_s", close_timeout_s)
        check_count("WebhookHook: queue_size", queue_size)
        self._url = url
        self._events = frozenset(events)
        self._name = name
        self._headers = {
            "Content-Type": "application/json",
            "User-Agent": f"speedtronic/{__version__}",
            **dict(headers or {}),
        }
        self._timeout_s = timeout_s
        self._retries = retries
        self._backoff_s = backoff_s
        self._close_timeout_s = close_timeout_s
        self._redact = None if redact is False else Redact() if redact is True else Redact(redact)
        self._queue: queue.Queue[Any] = queue.Queue(queue_size)
        self._give_up = threading.Event()  # close() ran out of time: no more tries, no more waits
        self._lock = threading.Lock()
        self._failures: list[str] = []  # undelivered, not yet raised on the training thread
        self.sent = 0
        """Events the receiver took (a 2xx answer)."""
        self.failed = 0
        """Events not delivered: every try failed, the receiver refused, or ``close()`` ran out of time."""
        self.dropped = 0
        """Events dropped because the queue was full (or arrived after ``close()``)."""
        self._closed = False
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="speedtronic-webhook", daemon=True)
        self._thread.start()
        atexit.register(self._close_at_exit)
        close_loggers_first_at_exit()  # a logger still holding events for this hook closes first

    def on_event(self, event: str, payload: Mapping[Any, Any]) -> None:
        """Queue the event when it is one of ``events`` (never waiting); raise what failed since."""
        if event in self._events:
            if self._closed:
                self._fail(f"{event!r} arrived after close(): not posted", dropped=True)
            else:
                try:
                    self._queue.put_nowait((event, payload))
                except queue.Full:
                    self._fail(f"queue full ({self._queue.maxsize} waiting): {event!r} dropped", dropped=True)
        if self._failures:
            self._raise_failures()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every queued event is posted or given up (at most ``timeout_s``, default
        ``close_timeout_s``); ``False`` when time ran out. Raises what failed."""
        deadline = time.monotonic() + (self._close_timeout_s if timeout_s is None else timeout_s)
        with self._queue.all_tasks_done:
            done = self._queue.all_tasks_done.wait_for(
                lambda: self._queue.unfinished_tasks == 0, max(0.0, deadline - time.monotonic())
            )
        self._raise_failures()
        return done

    def close(self, timeout_s: float | None = None) -> None:
        """Post what is queued (at most ``timeout_s``, default ``close_timeout_s``), stop the worker,
        raise what failed (what was still queued at the deadline included). Idempotent."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._close_at_exit)
        timeout_s = self._close_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        try:
            self._queue.put(_STOP, timeout=timeout_s)
            stop_queued = 1
        except queue.Full:
            stop_queued = 0
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            self._give_up.set()  # the worker stops trying; what it still holds is counted here
            left = max(self._queue.unfinished_tasks - stop_queued, 1)  # queued, and the one in hand
            self._fail(f"close() ran out of time after {timeout_s} s: {left} events not posted", count=left)
        self._raise_failures()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                if self._give_up.is_set():
                    continue  # counted by close()
                event, payload = item
                try:
                    self._post(self._body(event, payload))
                    self.sent += 1
                except Exception as error:
                    why = str(error) if isinstance(error, _Undelivered) else exception_text(error)
                    if not self._give_up.is_set():
                        self._fail(f"{event!r} not posted: {self._shown(why)}")
            finally:
                self._queue.task_done()

    def _body(self, event: str, payload: Mapping[Any, Any]) -> bytes:
        """The JSON body: the record, redacted and made strict JSON, and its ``text`` line."""
        record: Any = {"event": event, **payload}
        if self._redact is not None:
            record = self._redact(None, "info", record)
        safe = json_safe_record(record)
        text = alert_text(safe, self._name).translate(_SLACK_ESCAPES)
        if self._redact is not None:
            text = redact_text(text)  # the name, too
        return json.dumps({"text": text, "record": safe}, ensure_ascii=False).encode()

    def _post(self, body: bytes) -> None:
        """POST ``body``: one try, then ``retries`` more after a doubling back-off, unless refused."""
        tries = self._retries + 1
        for attempt in range(tries):
            if attempt and self._give_up.wait(min(self._backoff_s * 2 ** (attempt - 1), _MAX_BACKOFF_S)):
                raise TimeoutError("close() ran out of time")
            try:
                request = urllib.request.Request(self._url, data=body, headers=self._headers, method="POST")
                with _OPENER.open(request, timeout=self._timeout_s) as response:
                    response.read(65536)
                return
            except urllib.error.HTTPError as error:
                error.close()
                if error.code not in RETRIED_STATUSES:
                    raise _Refused(f"HTTP {error.code} {error.reason}: refused, not retried") from None
                last: Exception = error
            except Exception as error:
                last = error
        raise _Undelivered(
            f"{tries} {'try' if tries == 1 else 'tries'} failed, the last: {exception_text(last)}"
        )

    def _shown(self, text: str) -> str:
        return redact_text(text.replace(self._url, self.shown_url))

    def _fail(self, why: str, *, dropped: bool = False, count: int = 1) -> None:
        with self._lock:
            if dropped:
                self.dropped += count
            else:
                self.failed += count
            self._failures.append(why)

    def _raise_failures(self) -> None:
        with self._lock:
            failures, self._failures = self._failures, []
        if failures:
            more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
            raise RuntimeError(
                f"WebhookHook({self.shown_url}): {failures[0]}{more}; "
                f"{self.failed} failed and {self.dropped} dropped in all"
            )

    def _close_at_exit(self) -> None:
        """Close a hook nobody closed (no logger holds it) at exit; what failed is a warning, as no
        logger is left to count it."""
        if os.getpid() != self._pid:  # a forked child's copy has no worker: the parent's to close
            return
        try:
            self.close()
        except RuntimeError as error:
            warnings.warn(str(error), HookFailureWarning, stacklevel=1)

    def __repr__(self) -> str:
        return f"<WebhookHook {'closed' if self._closed else 'open'} url={self.shown_url!r}>"
