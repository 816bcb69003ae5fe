"""A live progress bar for a terminal: ``ProgressHook``, driven by the events a trainer already emits.

``train_start`` opens a bar from ``start_step`` to ``target_step``, each ``train_step`` moves it to
its ``step`` and shows ``loss`` and the throughput rates (numeric keys ending in ``_per_s``), and
``train_end`` (or ``close()``) closes it. Warning and error events (``shape_warning``,
``delta_upload_failed``, ...) are printed above the bar so trouble stays visible.

How ``speedtronic train`` wires it in::

    if progress_wanted(sys.stdout):       # a terminal: a bar on stdout, the text log to a file
        logger = MetricLogger(file=run_dir / "train.log", json_file=..., hooks=[ProgressHook()])
    else:                                 # CI, a pipe, a file: the plain text log, no bar
        logger = MetricLogger(json_file=...)

tqdm is imported when a ``ProgressHook`` is created; without it the error names the extra to install.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import IO, Any

from speedtronic.processors import EVENT_LEVELS
from speedtronic.processors.text import format_fields, format_key, format_value
from speedtronic.runs import rate_keys

__all__ = ["ProgressHook", "progress_wanted"]


def progress_wanted(stream: IO[str] | None = None) -> bool:
    """Whether ``stream`` (default ``sys.stdout``) is a terminal, where a live bar belongs."""
    stream = stream if stream is not None else sys.stdout
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


class ProgressHook:
    """A tqdm bar over the run's steps; a ``TrainingHook`` with ``close()``.

    Args:
        file: where the bar is drawn (default ``sys.stdout``, the stream ``progress_wanted`` checks).
        **tqdm_kwargs: passed to every ``tqdm(...)`` it opens (``mininterval=``, ``ncols=``, ...).
    """

    __slots__ = ("_bar", "_file", "_handlers", "_kwargs", "_tqdm")

    def __init__(self, file: IO[str] | None = None, **tqdm_kwargs: Any) -> None:
        try:
            from tqdm import tqdm
        except ModuleNotFoundError as error:
            raise ModuleNotFoundError(
                "speedtronic.integrations.progress.ProgressHook requires tqdm: "
                "pip install 'speedtronic[progress]'",
                name="tqdm",
            ) from error
        self._tqdm = tqdm
        self._file = file if file is not None else sys.stdout
        self._kwargs = {"unit": "step", "dynamic_ncols": True, **tqdm_kwargs}
        self._bar: Any = None
        handlers: dict[str, Callable[[str, dict[str, Any]], None]] = dict.fromkeys(
            EVENT_LEVELS, self._trouble
        )
        handlers.update(train_start=self._start, train_step=self._step, train_end=self._end)
        self._handlers = handlers

    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        handler = self._handlers.get(event)
        if handler is not None:
            handler(event, payload)

    def close(self) -> None:
        """Close the bar if one is open. Idempotent."""
        bar, self._bar = self._bar, None
        if bar is not None:
            bar.close()

    # -- events -------------------------------------------------------------------------------

    def _open(self, total: int | None, initial: int) -> Any:
        self.close()
        self._bar = self._tqdm(total=total, initial=initial, file=self._file, **self._kwargs)
        return self._bar

    def _start(self, event: str, payload: dict[str, Any]) -> None:
        start, target = payload.get("start_step"), payload.get("target_step")
        self._open(target if type(target) is int else None, start if type(start) is int else 0)

    def _step(self, event: str, payload: dict[str, Any]) -> None:
        bar = self._bar if self._bar is not None else self._open(None, 0)
        shown = {key: payload[key] for key in ("loss", *rate_keys(payload)) if key in payload}
        if shown:
            bar.set_postfix_str(
                " ".join(f"{format_key(k)}={_short(v)}" for k, v in shown.items()), refresh=False
            )
        step = payload.get("step")
        if type(step) is int:
            bar.update(step - bar.n)
        else:
            bar.refresh()

    def _end(self, event: str, payload: dict[str, Any]) -> None:
        if self._bar is not None:
            step = payload.get("step")
            if type(step) is int:
                self._bar.update(step - self._bar.n)
        self.close()

    def _trouble(self, event: str, payload: dict[str, Any]) -> None:
        fields = format_fields(payload)
        level = EVENT_LEVELS[event].upper()
        self._tqdm.write(f"{level} | {event}{fields}", file=self._file)


def _short(value: Any) -> str:
    """Four significant digits for floats in the bar; other values as in the text log."""
    return f"{value:.4g}" if type(value) is float else format_value(value)
