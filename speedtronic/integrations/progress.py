"""``ProgressHook``: a live progress bar for a terminal, driven by the events a trainer already emits."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from typing import IO, Any

from speedtronic.events import EVENT_LEVELS, LOSS_KEYS, RATE_SUFFIX, eval_split, is_rate
from speedtronic.extras import require
from speedtronic.record.text import format_fields, format_key, format_value

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

    The postfix stays short so the bar keeps its width in an 80- or 100-column terminal: ``loss``
    and one throughput (``tokens_per_s``, else ``samples_per_s``, else the first ``*_per_s`` key),
    numbers to 4 significant digits, thousands and up with an SI suffix, ``_per_s`` shown as ``/s``:
    ``loss=0.4321 tokens/s=43.3k``.

    A terminal that reports a size of 0 (a pty nobody sized, as in some CI runners and containers)
    gets an 80-column bar instead of none.

    Args:
        file: where the bar is drawn (default ``sys.stdout``, the stream ``progress_wanted`` checks).
        postfix: the payload keys to show instead (those present, in this order).
        **tqdm_kwargs: passed to every ``tqdm(...)`` it opens (``mininterval=``, ``ncols=``, ...).
    """

    __slots__ = ("_bar", "_eval", "_file", "_handlers", "_kwargs", "_postfix", "_shown", "_tqdm")

    def __init__(
        self, file: IO[str] | None = None, *, postfix: Sequence[str] | None = None, **tqdm_kwargs: Any
    ) -> None:
        taken = sorted({"total", "initial"} & tqdm_kwargs.keys())
        if taken:  # tqdm would fail at train_start with "got multiple values for keyword argument"
            raise TypeError(
                f"ProgressHook: {taken[0]} is the run's (train_start's target_step and start_step); "
                "leave it out"
            )
        tqdm = require("tqdm", "progress", needed_by="speedtronic.integrations.progress.ProgressHook")
        self._tqdm = tqdm.tqdm
        self._file = file if file is not None else sys.stdout
        width: dict[str, Any] = {"dynamic_ncols": True}
        if _reports_no_size(self._file):  # a pty nobody sized: tqdm would draw nothing
            width = {"ncols": _FALLBACK_SIZE[1], "nrows": _FALLBACK_SIZE[0]}
        self._kwargs = {"unit": "step", **width, **tqdm_kwargs}
        self._postfix = None if postfix is None else tuple(postfix)
        self._bar: Any = None
        self._shown: list[str] = []
        """The latest step's postfix fields (``loss=0.4321``, ...)."""
        self._eval: list[str] = []
        """The latest ``eval``'s loss as shown (``eval=0.5012``), kept for every later step."""
        handlers: dict[str, Callable[[str, dict[str, Any]], None]] = dict.fromkeys(
            EVENT_LEVELS, self._trouble
        )
        handlers.update(
            train_start=self._start, train_step=self._step, eval=self._evaluated, train_end=self._end
        )
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
        keys = self._postfix if self._postfix is not None else _default_postfix(payload)
        self._shown = [f"{_short_key(key)}={self._short(payload[key])}" for key in keys if key in payload]
        if self._shown or self._eval:
            bar.set_postfix_str(" ".join([*self._shown, *self._eval]), refresh=False)
        step = payload.get("step")
        if type(step) is int:
            bar.update(step - bar.n)
        else:
            bar.refresh()

    def _evaluated(self, event: str, payload: dict[str, Any]) -> None:
        key = next((key for key in payload if key == "loss" or (type(key) is str and eval_split(key))), None)
        if key is not None:  # the reference trainer's loss, or a framework's val_loss / eval_loss
            self._eval = [f"eval={self._short(payload[key])}"]
            if self._bar is not None:
                self._bar.set_postfix_str(" ".join([*self._shown, *self._eval]))

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

    def _short(self, value: Any) -> str:
        """Numbers to 4 significant digits, from 1,000 up with an SI suffix (``43.3k``); others as logged."""
        if type(value) not in (int, float):
            return format_value(value)
        if math.isfinite(value) and abs(value) >= 1000:
            text: str = self._tqdm.format_sizeof(value, divisor=1000)
            return text
        return f"{value:.4g}"


_RATES = ("tokens_per_s", "samples_per_s")
_FALLBACK_SIZE = (24, 80)
"""Rows and columns for a terminal that reports 0 of either (and no ``COLUMNS``): 0 means unknown."""


def _reports_no_size(stream: IO[str]) -> bool:
    """Whether ``stream`` is a terminal that reports 0 columns or 0 rows, with no ``COLUMNS`` set."""
    import os

    if os.environ.get("COLUMNS", "0") != "0":
        return False
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, ValueError, OSError):  # no fileno, or not a terminal
        return False
    return size.columns == 0 or size.lines == 0


def _default_postfix(payload: dict[str, Any]) -> tuple[str, ...]:
    """The loss (the first of the catalog's ``LOSS_KEYS`` the payload has: a framework's ``train_loss``
    too) and one throughput: tokens, else samples, else the first rate by the catalog (``RATE_SUFFIXES``:
    ``tokens_per_second_per_gpu``, ``train/device/samples_per_sec``)."""
    loss = next((key for key in LOSS_KEYS if key in payload), "loss")
    rate = next((key for key in _RATES if key in payload), None)
    if rate is None:
        rate = next((key for key in payload if type(key) is str and is_rate(key)), None)
    return (loss,) if rate is None else (loss, rate)


def _short_key(key: str) -> str:
    """``tokens_per_s`` as ``tokens/s``; other keys as in the text log."""
    return format_key(key.removesuffix(RATE_SUFFIX) + "/s" if key.endswith(RATE_SUFFIX) else key)
