"""The default task: a small model that visibly learns a synthetic next-token rule in seconds on a CPU."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor, nn

__all__ = ["SuccessorTask", "successor_model"]

_HELD_OUT_STREAM = 1_000_002
"""The shard number whose stream is the held-out data: a job's shards are its ranks, far below it."""


# Each token has a fixed successor (a random permutation); a sequence's targets are its tokens'
# successors, `noise` of them replaced by random tokens. The loss falls from ln(vocab_size) (3.47 for
# 32 tokens) towards the noise floor (about 1.2 at noise=0.2) in a few hundred steps.
class SuccessorTask:
    """An endless iterable of ``(tokens, targets)`` batches, both ``(batch_size, seq_len)`` int64.

    ``shard`` (a rank) draws its own stream of batches of the same task: the successor rule comes from
    ``seed`` alone, and shard 0 draws exactly what a single process does. ``state_dict()`` is the
    stream's position, so a resumed run draws the batches the uninterrupted one would have.
    """

    def __init__(
        self, vocab_size: int, seq_len: int, batch_size: int, noise: float, seed: int, shard: int = 0
    ) -> None:
        self.vocab_size, self.seq_len, self.batch_size, self.noise = vocab_size, seq_len, batch_size, noise
        self._seed = seed
        self._generator = torch.Generator().manual_seed(seed)
        self.successor = torch.randperm(vocab_size, generator=self._generator)
        if shard:
            self._generator.manual_seed(seed * 1_000_003 + shard)

    def held_out(self, batches: int) -> list[tuple[Tensor, Tensor]]:
        """``batches`` batches of the same task from a stream of their own (no shard of a job draws
        it): the same list on every rank and every resume, for evaluation."""
        generator = torch.Generator().manual_seed(self._seed * 1_000_003 + _HELD_OUT_STREAM)
        return [self._draw(generator) for _ in range(batches)]

    def state_dict(self) -> dict[str, Tensor]:
        return {"generator": self._generator.get_state()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self._generator.set_state(state["generator"].cpu())

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        while True:
            yield self._draw(self._generator)

    def _draw(self, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        shape = (self.batch_size, self.seq_len)
        tokens = torch.randint(0, self.vocab_size, shape, generator=generator)
        replaced = torch.rand(shape, generator=generator) < self.noise
        random_tokens = torch.randint(0, self.vocab_size, shape, generator=generator)
        return tokens, torch.where(replaced, random_tokens, self.successor[tokens])


def successor_model(vocab_size: int, hidden: int) -> nn.Module:
    """Embedding, one hidden layer, logits over the vocabulary, per token."""
    return nn.Sequential(
        nn.Embedding(vocab_size, hidden),
        nn.Linear(hidden, hidden),
        nn.GELU(),
        nn.Linear(hidden, vocab_size),
    )
