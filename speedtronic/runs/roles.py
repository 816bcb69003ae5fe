"""Which of a run's keys is its loss, its learning rate(s), its throughput and its held-out loss
(the table is in ``docs/reading-runs.md``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from speedtronic.events import EVAL_SPLITS, LOSS_KEYS, RATE_SUFFIXES, eval_split, is_lr, is_rate

__all__ = ["EVAL_SPLITS", "LOSS_KEYS", "RATE_SUFFIXES", "Roles", "eval_split", "is_lr", "is_rate"]


@dataclass(frozen=True)
class Roles:
    """The keys each role reads: the table's (``None``), or the ones given.

    ``loss``: the loss's key; ``lr``: the learning rates' keys; ``rates``: the throughput keys. A key
    given here is read whatever the table says of it, and the table's others for that role are not.
    """

    loss: str | None = None
    lr: Sequence[str] | None = None
    rates: Sequence[str] | None = None

    def __post_init__(self) -> None:
        for name in ("lr", "rates"):
            keys = getattr(self, name)
            if isinstance(keys, str):
                object.__setattr__(self, name, (keys,))
            elif keys is not None:
                object.__setattr__(self, name, tuple(keys))
        for name, keys in (("loss", [self.loss] if self.loss is not None else []),
                           ("lr", self.lr or ()), ("rates", self.rates or ())):  # fmt: skip
            for key in keys:
                if not isinstance(key, str) or not key:
                    raise ValueError(f"Roles {name}: expected a non-empty key name, got {key!r}")

    def loss_rank(self, key: str) -> int | None:
        """How preferred ``key`` is as the loss (0 most); ``None`` when it is not one."""
        if self.loss is not None:
            return 0 if key == self.loss else None
        try:
            return LOSS_KEYS.index(key)
        except ValueError:
            return None

    def is_lr(self, key: str) -> bool:
        return key in self.lr if self.lr is not None else is_lr(key)

    def is_rate(self, key: str) -> bool:
        return key in self.rates if self.rates is not None else is_rate(key)
