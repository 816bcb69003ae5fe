"""``WandbHook``: every delivered event becomes one row of a W&B run, ``<event>/<key>`` against ``step``."""

from __future__ import annotations

import atexit
import json
import os
from collections.abc import Collection, Mapping
from typing import Any, Protocol

from speedtronic.extras import require
from speedtronic.integrations._names import ONE_OFF_EVENTS, SKIPPED_KEYS, StepAxis, metric_name, tracked
from speedtronic.integrations._uploads import UPLOAD_TIMEOUT_S, Uploads, check_timeout
from speedtronic.lifecycle import close_loggers_first_at_exit
from speedtronic.record.values import to_python

__all__ = ["WandbHook"]

STEP = "step"
"""The one x-axis of every metric the hook logs: the training step."""


_ALERT_LEVELS = {"warning": "WARN", "error": "ERROR"}
"""An alert's severity and its ``wandb.AlertLevel`` (by value; any other severity is ``INFO``)."""


class _Run(Protocol):
    """The part of ``wandb.Run`` the hook uses."""

    @property
    def config(self) -> Any: ...
    @property
    def summary(self) -> Any: ...
    def id(self) -> str: ...
    def log_artifact(self, artifact: Any, aliases: list[str] | None = None) -> Any: ...
    def log(self, data: dict[str, Any]) -> None: ...
    def define_metric(self, name: str, step_metric: str | None = None) -> Any: ...
    def finish(self, exit_code: int | None = None) -> None: ...
    def alert(self, title: str, text: str, level: str | None = None) -> None: ...


class WandbHook:
    """Logs each event to a W&B run as one row of metrics ``<event>/<key>``; ``close()`` finishes the run.

    **Metric names: ``<event>/<key>``**, for every event (``train_step/loss``, ``eval/loss``,
    ``checkpoint/save_s``), so no two events ever share a metric, its chart or its summary value,
    and W&B groups each event's charts in a section of its own. The key is the payload's own
    (non-string keys become strings, as in the JSONL record); an event name's ``/`` and ``%`` are
    written ``%2F`` and ``%25``, so the first ``/`` always ends the event: event ``eval`` with key
    ``val/loss`` is ``eval/val/loss``, event ``eval/val`` with key ``loss`` is ``eval%2Fval/loss``
    (the same names as ``TensorboardHook``'s tags). W&B's own keys (``_step``, ``_runtime``...) can't
    be hit: a payload ``_step`` is ``<event>/_step``.

    **One x-axis, ``step``**: every row carries ``step``, the payload's whole-number ``step`` (``5``,
    ``5.0``, a 0-d tensor; then not repeated as ``<event>/step``), else the last step seen (0 before
    the first), and each metric is plotted against it: ``define_metric(<name>, step_metric="step")``,
    name by name as each first appears, never ``"*"``, so neither the hook nor a tool sharing the run
    (Hugging Face's and Lightning's W&B loggers define ``"*"`` against their own step) re-points the
    other's charts. This is the x ``TensorboardHook`` gives the same event
    (``speedtronic.integrations._names``). A nested mapping's values are
    ``<event>/<key>/<inner key>``, as in TensorBoard. The hook never passes ``step=``
    to ``run.log``: W&B's own ``_step`` counts rows, so an ``outer_step`` between train steps, or a
    step that goes back after a resume, is never dropped by W&B's monotonic-step rule.

    **Beside other W&B users in the process.** The hook calls ``wandb.init(project=...,
    **init_kwargs)``, so W&B's own rule applies: while a run is active (your ``wandb.init()``,
    Lightning's ``WandbLogger``, Hugging Face's ``report_to="wandb"``) the hook joins it, and leaves it
    to its owner to finish; otherwise it creates the run, as ``wandb.run``, and a later plain
    ``wandb.init()`` (Hugging Face's ``WandbCallback`` calls one) joins the hook's run. Pass
    ``reinit="create_new"`` for a run of the hook's own that nobody else joins (W&B then leaves
    ``wandb.run`` unset).

    **One-off events are no charts**: the values of ``ONE_OFF_EVENTS`` (``train_start``,
    ``train_end``, ``hyperparams``...) go to the run's summary (``run.summary["train_end/final_loss"]``),
    not to a row. ``skip`` (default ``elapsed_s``, the logger's clock) names payload keys not logged;
    ``skip=()`` logs them.

    **Beside Hugging Face's or Lightning's W&B logger in one run** their names (``train/loss``,
    ``train_loss``) and the hook's (``train_step/loss``, ``train_step/train_loss``) never meet, and
    each keeps its x-axis. With Lightning, hand the hook the ``WandbLogger``'s run
    (``run=wandb_logger.experiment``): Lightning defines its ``trainer/global_step`` axis only for a
    run it starts.

    **Alerts**: an ``alert`` event is a row like any other (``alert/value``, ``alert/threshold``...)
    and also W&B's own alert, ``run.alert(title, text, level)``: title ``<rule> on <key>``, text the
    alert's message (and rank), level ``WARN`` or ``ERROR`` from its severity. W&B sends it to the
    Slack or email set up in the user's W&B settings; an offline run keeps it in its log, and
    ``wandb sync`` sends it.

    **The run's config** is ``train_start``'s or ``hyperparams``' ``config`` (``speedtronic train``
    emits the run's resolved config as ``hyperparams``): ``run.config.update(config)``, not a history
    column. Values go as
    Python numbers (tensors converted); NaN and infinities as floats, which W&B records as ``NaN``,
    ``Infinity`` and ``-Infinity``. The summary holds each metric's last value.

    Args:
        project: W&B project for the run this hook creates with ``wandb.init(project=...,
            **init_kwargs)`` when no run is active (see above).
        run: an existing run (from your own ``wandb.init``) to log into instead; then no
            ``project`` or ``init_kwargs``.
        finish: whether ``close()`` finishes the run; default: only a run the hook created. A run
            you pass in, or one the hook joined, stays its owner's to finish, unless ``finish=True``.
        skip: payload keys not logged (default ``elapsed_s``).
        log_checkpoints: upload each ``checkpoint`` event's file as a version of the ``model``
            artifact ``checkpoints-<run id>`` (aliases ``step_<step>`` and W&B's ``latest``; metadata
            ``step``), with the run's config as ``config.json`` beside it, on a worker thread of the
            hook's own (see ``speedtronic.integrations._uploads``): a failed upload is a hook
            failure, raised by the next ``on_event`` or ``close()``, never a stop to training.
            ``close()`` waits for the uploads before finishing the run, at most ``upload_timeout_s``.
        upload_timeout_s: how long ``close()`` waits for the checkpoint uploads (default 600 s): the
            uploads not done by then are given up and reported as a failed upload (a hook failure),
            and the run is finished all the same.
    """

    def __init__(
        self,
        project: str | None = None,
        *,
        run: _Run | None = None,
        finish: bool | None = None,
        skip: Collection[str] = SKIPPED_KEYS,
        log_checkpoints: bool = False,
        upload_timeout_s: float = UPLOAD_TIMEOUT_S,
        **init_kwargs: Any,
    ) -> None:
        if run is not None and (project is not None or init_kwargs):
            raise ValueError("WandbHook: pass either run= or project=/wandb.init arguments, not both")
        upload_timeout_s = check_timeout("WandbHook", upload_timeout_s)
        created = False
        if run is None:
            wandb = require("wandb", "wandb", needed_by="speedtronic.integrations.WandbHook")
            active = wandb.run
            run = wandb.init(project=project, **init_kwargs)  # W&B returns the active run, if any
            # A run W&B created: it is now wandb.run, or was asked for as a run of the hook's own.
            created = run is not active and (run is wandb.run or init_kwargs.get("reinit") == "create_new")
        self.run: _Run = run
        """The W&B run the events go to (public: finish it, add config, log your own values)."""
        self.joined = not created
        """Whether the run is someone else's (passed in, or active when the hook was made)."""
        self._finish = created if finish is None else finish
        self.run.define_metric(STEP)
        self._defined = {STEP}  # metrics whose x-axis is defined
        self._axis = StepAxis()
        self._skip = frozenset(skip)
        self._training = False
        self._closed = False
        self._pid = os.getpid()
        self._uploads: Uploads | None = None
        if log_checkpoints:
            self._artifact = require("wandb", "wandb", needed_by="WandbHook(log_checkpoints=True)").Artifact
            self._uploads = Uploads("WandbHook", upload_timeout_s)
        self._config: Any = None  # the run's config, uploaded beside each checkpoint
        atexit.register(self._close_at_exit)
        close_loggers_first_at_exit()  # a logger still holding events for this hook closes first

    def on_event(self, event: str, payload: Mapping[Any, Any]) -> None:
        """Log one row: ``step`` and the payload's values as ``<event>/<key>`` (tensors as numbers)."""
        if self._closed:
            raise RuntimeError(f"WandbHook.on_event({event!r}) after close(); the run is finished")
        x, config, items = tracked(self._axis, event, payload, self._skip)  # W&B keeps its own _timestamp
        if config is not None:
            self._config = to_python(config)
            self.run.config.update(self._config, allow_val_change=True)
        row = {metric_name(event, key): to_python(value) for key, value in items}
        if event == "train_start":
            self._training = True
        elif event == "train_end":  # a run that stopped (status failed/interrupted) still exits 1
            self._training = payload.get("status") in ("failed", "interrupted")
        if event in ONE_OFF_EVENTS:  # one point is no chart: the run's summary keeps the values
            if row:
                self.run.summary.update(row)
        else:
            row[STEP] = x
            for name in row.keys() - self._defined:
                self.run.define_metric(name, step_metric=STEP)
                self._defined.add(name)
            self.run.log(row)
        if event == "alert":
            self._alert(payload)
        if self._uploads is not None:
            if event == "checkpoint" and "path" in payload:
                self._uploads.submit(self._upload_checkpoint, str(payload["path"]), x, self._config)
            self._uploads.raise_failures()

    def _alert(self, payload: Mapping[Any, Any]) -> None:
        """An ``alert`` event as W&B's own alert too: ``run.alert(title, text, level)``, which W&B sends
        to the Slack or email its user set up (offline: kept in the run's log, sent by ``wandb sync``)."""
        key = payload.get("key")
        title = f"{payload.get('rule')}{f' on {key}' if key else ''}"[:63]  # W&B: under 64 characters
        rank = payload.get("rank")
        text = f"{payload.get('message') or title}{f' (rank {rank})' if rank is not None else ''}"
        self.run.alert(title=title, text=text, level=_ALERT_LEVELS.get(str(payload.get("severity")), "INFO"))

    def _upload_checkpoint(self, path: str, step: int, config: Any) -> None:
        """On the uploads' thread: one version of the run's checkpoint artifact."""
        artifact = self._artifact(f"checkpoints-{self.run.id}", type="model", metadata={"step": step})
        artifact.add_file(path)
        if config is not None:
            with artifact.new_file("config.json") as file:
                json.dump(config, file, default=str)
        self.run.log_artifact(artifact, aliases=[f"step_{step}"])

    def close(self, exit_code: int | None = None) -> None:
        """Finish the run (when the hook owns it); idempotent.

        The exit code is ``exit_code`` when given; else 1 when the hook saw ``train_start`` without a
        ``train_end`` after it (training failed or was cut short), or a ``train_end`` whose ``status``
        is ``failed`` or ``interrupted``; else W&B's own rule (0, or the
        process's exit status when this runs at interpreter exit).
        """
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._close_at_exit)
        if exit_code is None and self._training:
            exit_code = 1
        try:
            if self._uploads is not None:
                self._uploads.close()  # every checkpoint uploaded before the run is finished
        finally:
            if self._finish:
                self.run.finish(exit_code=exit_code)

    def _close_at_exit(self) -> None:
        # Registered after wandb's own teardown, so it runs before it (atexit is LIFO) and the run
        # is finished with this hook's exit code rather than whatever W&B assumes. A forked child
        # (a DataLoader worker) inherits the handler; the run is the parent's to finish.
        if os.getpid() == self._pid:
            self.close()

    def __repr__(self) -> str:
        return f"<WandbHook {'closed' if self._closed else 'open'} run={self.run!r}>"
