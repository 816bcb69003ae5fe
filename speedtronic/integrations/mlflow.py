"""``MlflowHook``: every number of every event as an MLflow metric ``<event>/<key>`` at its step, and
the run's config as the MLflow run's params."""

from __future__ import annotations

import atexit
import os
import re
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from speedtronic.extras import require
from speedtronic.integrations._names import SKIPPED_KEYS, StepAxis, metric_name, tracked
from speedtronic.integrations._uploads import UPLOAD_TIMEOUT_S, Uploads, check_timeout
from speedtronic.lifecycle import close_loggers_first_at_exit
from speedtronic.record import timestamp_ns
from speedtronic.record.values import json_safe_record, to_python

__all__ = ["CHANGED_PREFIX", "MlflowHook", "mlflow_name"]

END_STATUSES = ("FINISHED", "FAILED", "KILLED")
"""What ``close(status=...)`` accepts: MLflow's statuses of an ended run."""

_END_STATUS = {"failed": "FAILED", "interrupted": "KILLED"}
"""A ``train_end`` status and the run status it ends the run with (any other: ``FINISHED``)."""

_LAST_ALERT = "speedtronic.alert.last"
_TAG_LENGTH = 5000
"""The longest tag value kept (MLflow's limit is 5000 or 8000 characters, by version)."""

_REFUSED = re.compile(r"[^\w./ -]")
_PER_BATCH = 100
"""MLflow takes at most 100 params and tags, and 1000 entities in all, per ``log_batch``."""

CHANGED_PREFIX = "changed."
"""A param whose value changed (a resumed run's new ``train.steps``) keeps the run's first value; the
new one is the tag ``changed.<param>`` (``changed.train.steps``)."""


def mlflow_name(name: str) -> str:
    """``name`` with each character MLflow refuses in a metric or param name (anything but letters,
    digits, ``_``, ``-``, ``.``, ``/`` and spaces) written ``_``: ``eval%2Fval/loss`` is
    ``eval_2Fval/loss``."""
    return _REFUSED.sub("_", name)


def _params(config: Mapping[Any, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """``config`` flattened: nested mappings' keys joined with ``.``, values as their ``str()``."""
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from _params(value, f"{name}.")
        else:
            yield mlflow_name(name), value if isinstance(value, str) else str(value)


def _artifact_uri(location: str | os.PathLike[str]) -> str:
    """A local directory (``runs/r/mlartifacts``, ``file:///...``) as an absolute ``file://`` URI;
    any other URI (``s3://...``) as it is."""
    text = os.fspath(location)
    if text.startswith("file://"):
        text = text[len("file://") :]
    elif "://" in text:
        return text
    return Path(text).expanduser().resolve().as_uri()


def _chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), _PER_BATCH):
        yield items[start : start + _PER_BATCH]


class MlflowHook:
    """Logs each event's numbers to an MLflow run as metrics ``<event>/<key>`` at the event's step.

    **Metrics**: every int and float of every event (0-d tensors and numpy scalars converted), named
    ``<event>/<key>`` as ``WandbHook`` and ``TensorboardHook`` name them, with each character MLflow
    refuses in a name written ``_`` (``mlflow_name``). Bools, text and lists aren't MLflow metrics and
    are skipped (the JSONL record has them). Each value is logged at the payload's integer ``step``,
    else the last step seen (0 before the first), with the record's ``timestamp``. NaN is logged as NaN;
    MLflow's SQL stores keep infinities as the largest finite doubles.

    **Params**: ``train_start``'s or ``hyperparams``' ``config`` (``speedtronic train`` puts the run's
    resolved config there), flattened (``{"model": {"hidden": 8}}`` is the param ``model.hidden``,
    ``"8"``). MLflow params can't change: a param the run already has with another value (a resumed
    run whose config changed: ``--steps 40`` after ``20``) keeps the run's first value, and the new
    value is set as the tag ``changed.<param>`` (``changed.train.steps``: ``"40"``; tags can change,
    so it holds the latest value). No error: a resume that changes its config is a run going on. A
    param another writer logged into the same run in the meantime (Hugging Face's ``MLflowCallback``
    beside the hook) is read back and treated the same way, whoever logged first.

    **Alerts**: an ``alert`` event's numbers are metrics like any event's (``alert/value``,
    ``alert/threshold``...); it also sets the run tags ``speedtronic.alert.<rule>`` and
    ``speedtronic.alert.last`` to its message (and rank), so the runs table can show and filter on
    them, and writes the whole alert as ``alerts/step_<step>_<rule>[_rank<r>].json`` in the run's
    artifacts.

    **Which run**: ``run_id=`` resumes that run (a resumed run logs on from where it was); else the
    active run (your ``mlflow.start_run()``) is joined; else the hook creates a run in ``experiment``
    (default: ``MLFLOW_EXPERIMENT_NAME``, ``MLFLOW_EXPERIMENT_ID``, else MLflow's ``Default``).
    ``tags`` are set on the run in every case. Each ``on_event`` is one ``log_batch`` call, made on the
    caller's thread: wrap the hook in ``speedtronic.hooks.background(...)`` to keep a remote tracking
    server's latency off the training thread.

    Args:
        experiment: the experiment of a run the hook creates (created when missing).
        tracking_uri: where runs are stored: a server (``http://...``), a database
            (``sqlite:///mlflow.db``), ...; default: MLflow's (``MLFLOW_TRACKING_URI``,
            ``mlflow.set_tracking_uri``, else ``sqlite:///mlflow.db``).
        run_id: an existing run to log into (resume).
        run_name: the name of a run the hook creates.
        tags: tags to set on the run (values as their ``str()``).
        finish: whether ``close()`` ends the run; default: only a run the hook started (created, or
            resumed with ``run_id=``), never the active run it joined.
        skip: payload keys not logged (default ``elapsed_s``, the logger's clock; ``()`` logs it).
        log_checkpoints: upload each ``checkpoint`` event's file into the run's artifacts, under
            ``checkpoints/step_<step>/``, with the run's config as ``config.json`` beside it, on a
            worker thread of the hook's own: a failed upload is a hook failure, raised by the next
            ``on_event`` or ``close()``, never a stop to training. ``close()`` waits for the uploads
            before ending the run, at most ``upload_timeout_s``.
        artifact_location: where the artifacts of a run the hook creates go (a directory or a URI,
            ``{run_dir}/mlartifacts``), instead of the experiment's (a SQLite store's ``Default`` is
            ``./mlruns`` of the working directory). MLflow fixes an experiment's artifact location
            when the experiment is created, so this needs ``experiment``: created here with it, or
            an existing one with the same location (else ``ValueError`` naming both).
        upload_timeout_s: how long ``close()`` waits for the checkpoint uploads (default 600 s): the
            uploads not done by then are given up and reported as a failed upload (a hook failure),
            and the run is ended all the same.
        log_system_metrics: also start MLflow's own system-metrics monitor on the run (its
            ``system/...`` metrics in MLflow's System Metrics tab; needs psutil, and nvidia-ml-py for
            GPUs). Off by default: ``speedtronic train``'s ``system`` events already reach the run as
            ``system/cpu_percent``... metrics, from speedtronic's own sampler.
    """

    def __init__(
        self,
        experiment: str | None = None,
        *,
        tracking_uri: str | None = None,
        run_id: str | None = None,
        run_name: str | None = None,
        tags: Mapping[str, Any] | None = None,
        finish: bool | None = None,
        skip: Collection[str] = SKIPPED_KEYS,
        log_checkpoints: bool = False,
        log_system_metrics: bool = False,
        artifact_location: str | os.PathLike[str] | None = None,
        upload_timeout_s: float = UPLOAD_TIMEOUT_S,
    ) -> None:
        upload_timeout_s = check_timeout("MlflowHook", upload_timeout_s)
        mlflow = require("mlflow", "mlflow", needed_by="speedtronic.integrations.MlflowHook")
        self._entities = require("mlflow.entities", "mlflow", needed_by="speedtronic.integrations.MlflowHook")
        active = mlflow.active_run() if run_id is None else None
        creates = {"experiment": experiment, "run_name": run_name, "artifact_location": artifact_location}
        if (run_id is not None or active is not None) and any(
            value is not None for value in creates.values()
        ):
            which = f"run_id={run_id!r}" if active is None else f"the active run {active.info.run_id!r}"
            raise ValueError(
                "MlflowHook: experiment=, run_name= and artifact_location= describe a run the hook "
                f"creates; it logs into {which}"
            )
        if artifact_location is not None and experiment is None:
            raise ValueError(
                f"MlflowHook(artifact_location={os.fspath(artifact_location)!r}): name the experiment "
                "(experiment=...) whose artifact location it is; MLflow's Default experiment keeps the "
                "location it was created with"
            )
        self.client: Any = mlflow.MlflowClient(tracking_uri)
        """The ``MlflowClient`` the hook logs with (public: log your own artifacts into ``run_id``)."""
        started = True
        if run_id is not None:
            run = self._existing_run(run_id)
            if run.info.status != "RUNNING":
                self.client.update_run(run_id, status="RUNNING")
        elif active is not None:
            run, started = self._existing_run(active.info.run_id), False
        else:
            run = self.client.create_run(
                self._experiment_id(experiment, artifact_location), run_name=run_name
            )
        self.run_id: str = run.info.run_id
        """The MLflow run the events go to."""
        self._params: dict[str, str] = dict(run.data.params)
        self._changed = {
            key[len(CHANGED_PREFIX) :] for key in run.data.tags if key.startswith(CHANGED_PREFIX)
        }
        self._finish = started if finish is None else finish
        self._axis = StepAxis()  # the x of each point: the rule W&B and TensorBoard follow too
        self._skip = frozenset(skip)
        self._status = "FINISHED"
        self._closed = False
        self._pid = os.getpid()
        if tags:
            tag = self._entities.RunTag
            for chunk in _chunks([tag(str(key), str(value)) for key, value in tags.items()]):
                self.client.log_batch(self.run_id, tags=chunk)
        self._uploads = Uploads("MlflowHook", upload_timeout_s) if log_checkpoints else None
        self._flush_others: Callable[[], None] | None = mlflow.flush_async_logging if active else None
        """In the active run, which other writers of the process log to too (Hugging Face's
        ``report_to="mlflow"``, with ``synchronous=False``): MLflow's queue of their batches, written
        out before the hook logs params, so two writers never insert one param into the run at once
        (the loser's whole batch would fail). Only there: it flushes the default tracking store's."""
        self._config: Any = None  # the run's config, uploaded beside each checkpoint
        self._monitor: Any = None
        if log_system_metrics:
            monitors = require(
                "mlflow.system_metrics.system_metrics_monitor",
                "mlflow",
                needed_by="MlflowHook(log_system_metrics=True)",
            )
            self._monitor = monitors.SystemMetricsMonitor(  # its own thread, its own client
                self.run_id, resume_logging=run_id is not None, tracking_uri=tracking_uri
            )
            self._monitor.start()
        atexit.register(self._close_at_exit)
        close_loggers_first_at_exit()  # a logger still holding events for this hook closes first

    def _existing_run(self, run_id: str) -> Any:
        try:
            return self.client.get_run(run_id)
        except Exception as error:  # MlflowException: no such run (or the store can't be read)
            raise ValueError(f"MlflowHook(run_id={run_id!r}): can't read the run: {error}") from None

    def _experiment_id(self, name: str | None, artifacts: str | os.PathLike[str] | None = None) -> str:
        name = name or os.environ.get("MLFLOW_EXPERIMENT_NAME")
        if name is None:
            return os.environ.get("MLFLOW_EXPERIMENT_ID", "0")  # MLflow's Default experiment
        location = None if artifacts is None else _artifact_uri(artifacts)
        found = self.client.get_experiment_by_name(name)
        if found is None:
            return str(self.client.create_experiment(name, artifact_location=location))
        if location is not None and _artifact_uri(found.artifact_location) != location:
            raise ValueError(
                f"MlflowHook(artifact_location={location!r}): the experiment {name!r} keeps its artifacts "
                f"in {found.artifact_location!r} (MLflow fixes it when the experiment is created); pass "
                "that location, a new experiment name, or a tracking store of the run's own"
            )
        return str(found.experiment_id)

    def on_event(self, event: str, payload: Mapping[Any, Any]) -> None:
        """Log the event's numbers as metrics at its step, and its ``config`` (see the class) as params."""
        if self._closed:
            raise RuntimeError(f"MlflowHook.on_event({event!r}) after close(); run {self.run_id} is ended")
        at, config, items = tracked(self._axis, event, payload, self._skip)
        stamp = timestamp_ns(payload.get("timestamp"))
        millis = (time.time_ns() if stamp is None else stamp) // 1_000_000
        metrics: list[Any] = []
        params: dict[str, str] = {}
        if config is not None:
            self._config = to_python(config)
            params.update(_params(self._config))
        for key, value in items:
            value = to_python(value)
            if type(value) is float or type(value) is int:
                metric_key = mlflow_name(metric_name(event, key))
                metrics.append(self._entities.Metric(metric_key, value, millis, at))
        self._log(metrics, params)
        if event == "alert":
            self._alert(payload, at)
        if event == "train_start":
            self._status = "FAILED"  # until its train_end: training that never ends failed
        elif event == "train_end":
            self._status = _END_STATUS.get(str(payload.get("status")), "FINISHED")
        if self._uploads is not None:
            if event == "checkpoint" and "path" in payload:
                self._uploads.submit(self._upload_checkpoint, str(payload["path"]), at, self._config)
            self._uploads.raise_failures()

    def _alert(self, payload: Mapping[Any, Any], at: int) -> None:
        """An ``alert``: the tags ``speedtronic.alert.<rule>`` and ``speedtronic.alert.last`` (its
        message), and the whole alert as ``alerts/step_<step>_<rule>[_rank<r>].json`` in the artifacts."""
        rule = mlflow_name(str(payload.get("rule")))
        rank = payload.get("rank")
        message = f"{payload.get('message') or rule}{f' (rank {rank})' if rank is not None else ''}"
        tag = self._entities.RunTag
        text = message[:_TAG_LENGTH]
        self.client.log_batch(
            self.run_id, tags=[tag(f"speedtronic.alert.{rule}", text), tag(_LAST_ALERT, text)]
        )
        where = f"alerts/step_{at}_{rule}{f'_rank{rank}' if rank is not None else ''}.json"
        self.client.log_dict(self.run_id, json_safe_record({"event": "alert", **payload}), where)

    def _upload_checkpoint(self, path: str, step: int, config: Any) -> None:
        """On the uploads' thread: the checkpoint and the config into ``checkpoints/step_<step>/``."""
        where = f"checkpoints/step_{step}"
        self.client.log_artifact(self.run_id, path, artifact_path=where)
        if config is not None:
            self.client.log_dict(self.run_id, config, f"{where}/config.json")

    def _log(self, metrics: list[Any], params: dict[str, str]) -> None:
        """Log ``metrics``, the params the run lacks, and ``changed.<param>`` for each it has with
        another value (or had: a value changed back is set too)."""
        new = [self._entities.Param(key, value) for key, value in params.items() if key not in self._params]
        if new and self._flush_others is not None:
            self._flush_others()
        for chunk in _chunks(new):
            try:
                self.client.log_batch(self.run_id, params=chunk)
            except Exception:  # another writer logged some of them first: read the run's, log the rest
                self._params = dict(self.client.get_run(self.run_id).data.params)
                chunk = [param for param in chunk if param.key not in self._params]
                if chunk:
                    self.client.log_batch(self.run_id, params=chunk)
            self._params.update((param.key, param.value) for param in chunk)
        changed = [
            self._entities.RunTag(f"{CHANGED_PREFIX}{key}", value)
            for key, value in params.items()
            if self._params.get(key, value) != value or key in self._changed
        ]
        for chunk in _chunks(changed):
            self.client.log_batch(self.run_id, tags=chunk)
        self._changed.update(tag.key[len(CHANGED_PREFIX) :] for tag in changed)
        for chunk in _chunks(metrics):
            self.client.log_batch(self.run_id, metrics=chunk)

    def close(self, status: str | None = None) -> None:
        """End the run (when the hook started it, or ``finish=True``); idempotent.

        The status is ``status`` when given (``FINISHED``, ``FAILED`` or ``KILLED``); else ``FAILED``
        when the hook saw ``train_start`` without a ``train_end`` after it (training failed or was cut
        short) or a ``train_end`` whose ``status`` is ``failed``, ``KILLED`` for ``interrupted``, else
        ``FINISHED``.
        """
        if status is not None and status not in END_STATUSES:
            raise ValueError(f"MlflowHook.close(status={status!r}): status must be one of {END_STATUSES}")
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._close_at_exit)
        try:
            if self._monitor is not None:
                self._monitor.finish()
            if self._uploads is not None:
                self._uploads.close()  # every checkpoint uploaded before the run ends
        finally:
            if self._finish:
                self.client.set_terminated(self.run_id, status or self._status)

    def _close_at_exit(self) -> None:
        # A forked child (a DataLoader worker) inherits the handler; the run is the parent's to end.
        if os.getpid() == self._pid:
            self.close()

    def __repr__(self) -> str:
        return f"<MlflowHook {'closed' if self._closed else 'open'} run_id={self.run_id!r}>"
