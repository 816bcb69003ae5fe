"""``SpeedtronicTracker``: a Hugging Face Accelerate tracker that logs through a ``MetricLogger``.
Importing this module imports Accelerate; ``docs/frameworks.md`` lists the records it writes."""

from __future__ import annotations

from typing import Any

from speedtronic.extras import missing

try:
    from accelerate.tracking import GeneralTracker
except ModuleNotFoundError as error:
    needed_by = "speedtronic.integrations.accelerate"
    raise missing(
        error, "accelerate.tracking", "accelerate", needed_by=needed_by, package="Accelerate"
    ) from None

from speedtronic.events import Event
from speedtronic.integrations import TrainSpan, emit_metrics
from speedtronic.integrations._metrics import FLUSH_TIMEOUT_S
from speedtronic.profiling import MetricLogger

__all__ = ["SpeedtronicTracker"]


class SpeedtronicTracker(GeneralTracker):  # type: ignore[misc]  # Accelerate's classes are untyped
    """An Accelerate tracker writing to a ``MetricLogger`` (see the module for what it records).

    Pass an existing ``MetricLogger`` (``logger=``; you close it) or ``MetricLogger``'s arguments
    (``json_file=``, ``file=``, ``hooks=``...; the logger is built by ``start()``, on the main process,
    and closed by ``finish()``).
    """

    name = "speedtronic"
    requires_logging_directory = False
    main_process_only = True

    def __init__(self, logger: MetricLogger | None = None, **logger_kwargs: Any) -> None:
        super().__init__()
        if logger is not None and logger_kwargs:
            raise TypeError(
                "SpeedtronicTracker: pass either logger= (a MetricLogger you close) or MetricLogger's "
                f"arguments, not both; got logger= and {', '.join(sorted(logger_kwargs))}"
            )
        if logger is not None and not isinstance(logger, MetricLogger):
            raise TypeError(f"SpeedtronicTracker(logger=...): expected a MetricLogger, got {logger!r}")
        self._logger = logger
        self._owns_logger = logger is None
        self._logger_kwargs = logger_kwargs
        self._span = TrainSpan()

    @property
    def tracker(self) -> MetricLogger | None:
        """The ``MetricLogger`` (``None`` before ``start()`` builds one from the arguments)."""
        return self._logger

    def start(self) -> None:
        if self._logger is None or (self._owns_logger and self._logger.closed):
            self._logger = MetricLogger(**self._logger_kwargs)

    def _started(self) -> MetricLogger:
        self.start()
        assert self._logger is not None  # start() built it
        return self._logger

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self._started().emit(Event.HYPERPARAMS, {"config": dict(values)}, level="debug")

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        emit_metrics(self._started(), step, values, self._span)

    def finish(self) -> None:
        logger = self._logger
        if logger is None or logger.closed:
            return
        self._span.end(logger, "completed")
        if self._owns_logger:
            logger.close()
        else:
            logger.flush(FLUSH_TIMEOUT_S)
