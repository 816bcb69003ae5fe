"""``WandbHook``: every delivered event becomes one row of a W&B run, plotted against ``step``."""

from __future__ import annotations

import atexit
import os
from collections.abc import Mapping
from typing import Any, Protocol

from speedtronic.lifecycle import close_loggers_first_at_exit
from speedtronic.processors.convert import to_python, unique_key

__all__ = ["WandbHook"]

# W&B fills these itself; a payload key with one of these names would be overwritten or would move
# the row, so it is logged as ``payload_step`` etc. instead (like the core's ``payload_event``).
_RESERVED = frozenset({"_step", "_runtime", "_timestamp", "_wandb"})


class _Run(Protocol):
    """The part of ``wandb.Run`` the hook uses."""

    def log(self, data: dict[str, Any]) -> None: ...
    def define_metric(self, name: str, step_metric: str | None = None) -> Any: ...
    def finish(self, exit_code: int | None = None) -> None: ...


class WandbHook:
    """Logs each event to a W&B run as ``{**payload, "event": event}``; ``close()`` finishes the run.

    Keys are the payload's own, flat, as the original design logged them. The hook never passes
    ``step=`` to ``run.log``: W&B's own ``_step`` counts rows, so an ``outer_step`` logged between
    train steps (or a step that goes back after a resume) is never dropped by W&B's monotonic-step
    rule. Instead the payload's ``step`` is the charts' x-axis (``define_metric("*",
    step_metric="step")``); a row without ``step`` is plotted at the last step seen.

    Nothing is lost to W&B's key rules: non-string keys become strings (as in the JSONL record), and
    the keys W&B fills itself (``_step``, ``_runtime``, ``_timestamp``, ``_wandb``) are logged as
    ``payload_step`` etc.

    Args:
        project: W&B project for the run this hook creates with ``wandb.init(project=...,
            **init_kwargs)``. Each hook creates its own run (``reinit="create_new"`` unless given), so
            a second hook in one process never merges into the first one's run.
        run: an existing run (from your own ``wandb.init``) to log into instead; then no
            ``project`` or ``init_kwargs``.
        finish: whether ``close()`` finishes the run; default: only a run the hook created. A run
            you pass in stays yours to finish, unless ``finish=True``.
    """

    def __init__(
        self,
        project: str | None = None,
        *,
        run: _Run | None = None,
        finish: bool | None = None,
        **init_kwargs: Any,
    ) -> None:
        if run is not None and (project is not None or init_kwargs):
            raise ValueError("WandbHook: pass either run= or project=/wandb.init arguments, not both")
        created = run is None
        if run is None:
            try:
                import wandb
            except ModuleNotFoundError as error:
                if error.name != "wandb":  # a broken or shadowed install: its own error says more
                    raise
                raise ModuleNotFoundError(
                    "speedtronic.integrations.WandbHook requires wandb: pip install 'speedtronic[wandb]'",
                    name="wandb",
                ) from error
            init_kwargs.setdefault("reinit", "create_new")
            run = wandb.init(project=project, **init_kwargs)
        self.run: _Run = run
        """The W&B run the events go to (public: finish it, add config, log your own values)."""
        self._finish = created if finish is None else finish
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")
        self._training = False
        self._closed = False
        self._pid = os.getpid()
        atexit.register(self._close_at_exit)
        close_loggers_first_at_exit()  # a logger still holding events for this hook closes first

    def on_event(self, event: str, payload: Mapping[Any, Any]) -> None:
        """Log one row: the payload's values (tensors as numbers), plus ``"event"``."""
        if self._closed:
            raise RuntimeError(f"WandbHook.on_event({event!r}) after close(); the run is finished")
        row: dict[str, Any] = {}
        for key, value in payload.items():
            name = unique_key(row, key)
            row[unique_key(row, "payload" + name) if name in _RESERVED else name] = to_python(value)
        row["event"] = event
        if event == "train_start":
            self._training = True
        elif event == "train_end":  # a run that stopped (status failed/interrupted) still exits 1
            self._training = payload.get("status") in ("failed", "interrupted")
        self.run.log(row)

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
