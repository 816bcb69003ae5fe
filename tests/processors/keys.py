"""Hostile keys for the tests of what is remembered per key set."""

from __future__ import annotations


class LookalikeKey:
    """A key equal to ``"loss"`` (same hash, ``==`` true) that prints as ``text``: a cache keyed by key
    sets must never give it the plain ``"loss"`` key's judgement or text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __hash__(self) -> int:
        return hash("loss")

    def __eq__(self, other: object) -> bool:
        return other is self or other == "loss"

    def __str__(self) -> str:
        return self.text
