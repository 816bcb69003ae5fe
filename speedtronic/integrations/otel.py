"""``OtelHook``: every event as an OpenTelemetry log record (severity, event name, attributes,
timestamp), handed to an OpenTelemetry ``LoggerProvider``: yours, or one exporting over OTLP/HTTP."""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from speedtronic._version import __version__
from speedtronic.checks import check_seconds, is_http_url
from speedtronic.extras import require
from speedtronic.integrations.structlog import exception_text
from speedtronic.levels import LEVEL_NAMES
from speedtronic.lifecycle import close_loggers_first_at_exit
from speedtronic.record import timestamp_ns
from speedtronic.record.safe_text import safe_str
from speedtronic.record.secrets import redact_exception
from speedtronic.record.values import to_python, unique_key

__all__ = ["SEVERITY_NUMBERS", "OtelHook", "attributes", "exception_attributes"]

SEVERITY_NUMBERS: Mapping[str, int] = {"DEBUG": 5, "INFO": 9, "WARNING": 13, "ERROR": 17, "CRITICAL": 21}
"""Each level's OpenTelemetry ``SeverityNumber`` (``DEBUG``, ``INFO``, ``WARN``, ``ERROR``, ``FATAL``)."""

_SCALARS = (str, bool, int, float)
_INT64 = range(-(2**63), 2**63)
_NEEDED_BY = "speedtronic.integrations.OtelHook"
_OTLP_HTTP = "opentelemetry-exporter-otlp-proto-http"


def attributes(payload: Mapping[Any, Any]) -> dict[str, Any]:
    """A payload as OpenTelemetry attributes: ``timestamp`` left out (it is the record's own), tensors
    as numbers, nested mappings flattened with ``.`` (``config.lr``), lists of one scalar type as
    they are, ``None`` left out, an exception as ``"ZeroDivisionError: division by zero"`` (and the
    first one also as ``exception_attributes``), anything else as its ``str()``."""
    out: dict[str, Any] = {}
    for key, value in payload.items():
        if key != "timestamp":
            _put(out, unique_key(out, key), to_python(value))
    return out


def exception_attributes(error: BaseException) -> dict[str, str]:
    """OpenTelemetry's semantic-convention attributes of ``error``, as the OpenTelemetry SDK's own
    ``LoggingHandler`` sends them for ``logger.exception(...)``: ``exception.type`` (the class name),
    ``exception.message`` and ``exception.stacktrace`` (the whole traceback, as Python prints it: its
    causes, contexts and notes too), the last two redacted (``redact_exception``)."""
    shown = redact_exception(error)
    return {
        "exception.type": type(error).__name__,
        "exception.message": shown.message,
        "exception.stacktrace": shown.printed,
    }


def _put(out: dict[str, Any], name: str, value: Any) -> None:
    kind = type(value)
    if value is None:
        return
    if kind in _SCALARS:
        out[name] = value if kind is not int or value in _INT64 else str(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _put(out, unique_key(out, f"{name}.{key}"), item)
    elif (
        isinstance(value, list)
        and len({type(item) for item in value}) <= 1
        and all(type(item) in _SCALARS and (type(item) is not int or item in _INT64) for item in value)
    ):
        out[name] = tuple(value)
    elif isinstance(value, BaseException):
        shown = redact_exception(value)
        out[name] = shown.line if shown.hidden else exception_text(value)
        if "exception.type" not in out:
            out.update(exception_attributes(value))
    else:
        out[name] = safe_str(value)


def _alert_severity_and_body(payload: Mapping[Any, Any], level: str) -> tuple[str, str]:
    """An alert's record: its own severity (``warning``: ``WARNING``, ``error``: ``ERROR``) whatever
    the record's level, and its one-line message as the body, which log viewers show."""
    severity = _ALERT_SEVERITIES.get(str(payload.get("severity")), level)
    return severity, safe_str(payload.get("message") or "alert")


_ALERT_SEVERITIES = {"warning": "WARNING", "error": "ERROR"}


def _handled_exception(error: object) -> dict[str, str]:
    """The exception attributes of the exception being handled on this thread, when the ``error`` text
    is that exception on one line (``"ZeroDivisionError: ..."``); else none. The message is the
    payload's (as redacted as the rest of the record), the stacktrace the exception's, redacted
    (``exception_attributes``): never more than the payload shows."""
    handled = sys.exc_info()[1]
    name = type(handled).__name__
    if handled is None or not isinstance(error, str) or not error.startswith(name):
        return {}
    return {**exception_attributes(handled), "exception.message": error[len(name) :].removeprefix(": ")}


class _CountingExporter:
    """The hook's exporter, wrapped: counts the records of every batch it failed to export, so the
    hook can raise it on the training thread, where the logger counts hook failures."""

    def __init__(self, exporter: Any) -> None:
        self._exporter = exporter
        self._lock = threading.Lock()
        self.failed = 0

    def export(self, batch: Sequence[Any]) -> Any:
        try:
            result = self._exporter.export(batch)
        except Exception:
            self._count(len(batch))
            raise
        if result.name != "SUCCESS":  # LogRecordExportResult (LogExportResult before 1.39): compared by name
            self._count(len(batch))
        return result

    def _count(self, records: int) -> None:
        with self._lock:
            self.failed += records

    def take(self) -> int:
        """Records that failed since the last call."""
        with self._lock:
            failed, self.failed = self.failed, 0
        return failed

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self._exporter.force_flush(timeout_millis))

    def shutdown(self) -> None:
        self._exporter.shutdown()


class OtelHook:
    """Hands each event to an OpenTelemetry ``LoggerProvider`` as one log record.

    **The record**: ``event_name`` and ``body`` are the event's name; ``severity_text`` is the
    record's level as the text log writes it (``INFO``, ``WARNING``, ``ERROR``...) and
    ``severity_number`` its OpenTelemetry number (``SEVERITY_NUMBERS``); ``timestamp`` is the record's
    own (the JSONL record's instant, in nanoseconds); ``attributes`` are the payload
    (``attributes()``: ``step``, ``loss``, ``elapsed_s``..., nested mappings flattened with ``.``).
    The current span's context is the record's, so a record emitted inside your span carries its
    trace and span ids. Logger (instrumentation scope): ``speedtronic``, at speedtronic's version.

    **Alerts**: an ``alert`` event's record has the alert's own severity (``WARNING`` or ``ERROR``,
    from its ``severity``) and its message as the ``body``; ``event_name`` is ``alert`` and the
    attributes are its fields (``rule``, ``key``, ``step``, ``value``, ``threshold``, ``rank``...).

    **Exceptions** carry OpenTelemetry's semantic-convention attributes ``exception.type``,
    ``exception.message`` and ``exception.stacktrace`` (``exception_attributes``), as the OTel SDK's
    own ``LoggingHandler`` sends them: for an exception in the payload, and for an event whose
    ``error`` text names the exception being handled where it is emitted (``speedtronic train``'s
    ``train_end`` with ``status="failed"``, when the hook is called inside ``emit``: the stdlib's
    ``logger.exception()`` rule of taking ``sys.exc_info()``). They are redacted whole
    (``speedtronic.processors.redact.redact_exception``: the message, notes, causes and contexts and
    the printed stack), whatever the logger's ``redact``; a handled exception's message is the
    payload's ``error`` text, so the record shows no more than the payload.

    **Whose provider**: ``logger_provider=`` is yours (an SDK ``LoggerProvider`` with your processors
    and exporters): ``close()`` flushes it and leaves shutting it down to you. Without one, the hook
    builds its own: an SDK ``LoggerProvider`` with a ``BatchLogRecordProcessor`` exporting over
    OTLP/HTTP (``opentelemetry-exporter-otlp-proto-http``) to ``endpoint`` (default: the
    ``OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT`` environment, else
    ``http://localhost:4318/v1/logs``), with ``headers`` and the resource attributes ``resource``
    (merged over ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``); ``close()`` shuts it down.

    **Off the training thread; failures reported.** ``on_event`` only builds the record and queues it;
    the SDK's batch thread exports it. With the hook's own provider, records that failed to export
    (collector down, refused) are counted in ``dropped`` and raised by the next ``on_event``,
    ``flush()`` or ``close()`` as ``RuntimeError``, which the logger counts and reports as a hook
    failure; training goes on. An export gives up after ``timeout_s`` (retries included); ``close()``
    waits for the last batch at most that long.

    Args:
        endpoint: the OTLP/HTTP logs URL of the hook's own provider (``http://collector:4318/v1/logs``).
        logger_provider: your ``LoggerProvider`` instead; then no ``endpoint``, ``headers``, ``resource``.
        headers: HTTP headers of each export (a collector's auth).
        resource: resource attributes of the hook's own provider (``{"service.name": "trainer"}``).
        timeout_s: longest an export, ``flush()`` or ``close()`` waits.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        logger_provider: Any = None,
        headers: Mapping[str, str] | None = None,
        resource: Mapping[str, Any] | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        if logger_provider is not None and not (endpoint is None and headers is None and resource is None):
            raise ValueError(
                "OtelHook: pass either logger_provider= or endpoint=/headers=/resource= (for the hook's own "
                "provider), not both"
            )
        check_seconds("OtelHook: timeout_s", timeout_s)
        if endpoint is not None and not is_http_url(endpoint):  # the SDK would fail at the first export
            raise ValueError(
                "OtelHook: endpoint must be an http:// or https:// URL with a host (the OTLP/HTTP logs URL, "
                "http://collector:4318/v1/logs)"
            )
        api = require("opentelemetry._logs", "otel", needed_by=_NEEDED_BY, package="opentelemetry-api")
        self._severities = {name: api.SeverityNumber(number) for name, number in SEVERITY_NUMBERS.items()}
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self._exporter: _CountingExporter | None = None
        if logger_provider is None:
            logger_provider = self._own_provider(endpoint, headers, resource)
        self.logger_provider: Any = logger_provider
        """The provider the records go to (public: add processors, flush it)."""
        self._logger = logger_provider.get_logger("speedtronic", __version__)
        self._flush = getattr(logger_provider, "force_flush", None)  # the API's provider has none
        self._dropped = 0
        self._closed = False
        self._pid = os.getpid()
        atexit.register(self._close_at_exit)
        close_loggers_first_at_exit()  # a logger still holding events for this hook closes first

    def _own_provider(
        self, endpoint: str | None, headers: Mapping[str, str] | None, resource: Mapping[str, Any] | None
    ) -> Any:
        sdk, export, resources, otlp = (
            require(module, "otel", needed_by=_NEEDED_BY, package=package)
            for module, package in (
                ("opentelemetry.sdk._logs", "opentelemetry-sdk"),
                ("opentelemetry.sdk._logs.export", "opentelemetry-sdk"),
                ("opentelemetry.sdk.resources", "opentelemetry-sdk"),
                ("opentelemetry.exporter.otlp.proto.http._log_exporter", _OTLP_HTTP),
            )
        )
        exporter = otlp.OTLPLogExporter(endpoint=endpoint, headers=headers, timeout=self.timeout_s)
        self._exporter = _CountingExporter(exporter)
        # The hook shuts its provider down (at close, or at exit before the SDK's own teardown).
        described = resources.Resource.create(dict(resource or {}))
        provider = sdk.LoggerProvider(resource=described, shutdown_on_exit=False)
        provider.add_log_record_processor(
            export.BatchLogRecordProcessor(self._exporter, export_timeout_millis=self.timeout_s * 1000)
        )
        return provider

    @property
    def dropped(self) -> int:
        """Records the hook's own provider failed to export (reported so far)."""
        return self._dropped

    def on_event(self, event: str, payload: Mapping[Any, Any], *, level: str = "info") -> None:
        """Emit the event as one log record (see the class); raise the export failures seen since."""
        if self._closed:
            raise RuntimeError(f"OtelHook.on_event({event!r}) after close()")
        severity = LEVEL_NAMES.get(level, "INFO")
        body = event
        if event == "alert":
            severity, body = _alert_severity_and_body(payload, severity)
        stamp = timestamp_ns(payload.get("timestamp"))
        described = attributes(payload)
        if "error" in payload and "exception.type" not in described:
            described.update(_handled_exception(payload["error"]))
        self._logger.emit(
            timestamp=time.time_ns() if stamp is None else stamp,
            severity_number=self._severities[severity],
            severity_text=severity,
            body=body,
            attributes=described,
            event_name=event,
        )
        self._raise_failures()

    def flush(self, timeout_s: float | None = None) -> None:
        """Export every record handed over so far; raise the failures (``RuntimeError``)."""
        if self._flush is not None and not self._closed:
            self._flush(int((self.timeout_s if timeout_s is None else timeout_s) * 1000))
        self._raise_failures()

    def close(self) -> None:
        """Shut the hook's own provider down (exporting what is queued, at most ``timeout_s``), or flush
        yours; then raise what failed to export. Idempotent."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._close_at_exit)
        if self._exporter is not None:
            self.logger_provider.shutdown()
        elif self._flush is not None:
            self._flush(int(self.timeout_s * 1000))
        self._raise_failures()

    def _raise_failures(self) -> None:
        failed = self._exporter.take() if self._exporter is not None else 0
        if failed:
            self._dropped += failed
            where = self.endpoint or "the OTLP endpoint of OTEL_EXPORTER_OTLP_*"
            raise RuntimeError(
                f"OtelHook: {failed} log records not exported to {where} "
                f"({self._dropped} in all; the OpenTelemetry SDK's log says why)"
            )

    def _close_at_exit(self) -> None:
        # A forked child inherits the handler, not the SDK's batch thread: the provider is the parent's.
        if os.getpid() == self._pid:
            self.close()

    def __repr__(self) -> str:
        return f"<OtelHook {'closed' if self._closed else 'open'} provider={self.logger_provider!r}>"
