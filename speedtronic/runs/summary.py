"""``summarize_run``: a run read in pieces, each folded (``speedtronic.runs.fold``), merged in order."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from speedtronic.runs.fold import RateStats, RunSummary, SeriesStats
from speedtronic.runs.health import RankTimes
from speedtronic.runs.reader import (
    RankChoice,
    RankFilter,
    RunClock,
    RunError,
    Skipped,
    file_records,
    file_spans,
    not_a_run,
    run_files,
)
from speedtronic.runs.roles import Roles
from speedtronic.runs.table import format_summaries

__all__ = [
    "PIECE_BYTES",
    "RateStats",
    "RunSummary",
    "SeriesStats",
    "available_workers",
    "format_summaries",
    "summarize_run",
]


PIECE_BYTES = 4 * 1024 * 1024
"""A file larger than this is summarised in pieces of about this size (the work one process does)."""


def summarize_run(
    path: str | os.PathLike[str],
    *,
    rank: RankChoice = "first",
    name: str | None = None,
    workers: int = 1,
    roles: Roles | None = None,
    stragglers: bool = False,
) -> RunSummary:
    """Summarise the run at ``path`` (a JSONL file or run directory), each of its pieces read once.

    ``workers`` > 1 summarises its pieces (each file, and parts of ``PIECE_BYTES`` of a larger one) in
    that many processes at most, each in constant memory; the summary is the same as with one.
    ``roles`` says which keys are the loss, the learning rates and the rates (default: the table of
    ``speedtronic.runs.roles``). ``stragglers`` also sums each rank's step times in the same pass
    (``RunSummary.rank_times``: ``rank_times.stragglers()`` names the ranks that hold the others back,
    as ``speedtronic.runs.health.stragglers`` does).

    Raises ``speedtronic.runs.RunError`` for a path that can't be read; bad lines are counted in
    ``RunSummary.skipped``.
    """
    files = run_files(path)
    roles = roles if roles is not None else Roles()
    merged = _Merge(RunSummary(name if name is not None else str(path), roles))
    merged.summary.files = [str(file) for file in files]
    merged.summary.rank_times = RankTimes() if stragglers else None
    pieces = _pieces(files, rank, merged.summary.skipped, roles, stragglers)
    first = list(itertools.islice(pieces, 2))
    if workers <= 1 or len(first) <= 1:
        for piece in itertools.chain(first, pieces):
            merged.add(*_summarize_piece(piece))
        return merged.finish()
    from concurrent.futures import ProcessPoolExecutor  # here: 12 ms of start-up a small run never needs
    from concurrent.futures.process import BrokenProcessPool

    pool = ProcessPoolExecutor(min(workers, _most_pieces(files)), initializer=_ignore_interrupts)
    try:
        # The pieces are found (a large file read through for its lines) while the workers read them.
        # Fewer, larger tasks for many small files; enough that the last ones keep every worker busy.
        chunk = max(1, len(files) // (workers * 64))
        for piece, part in pool.map(_summarize_piece, itertools.chain(first, pieces), chunksize=chunk):
            merged.add(piece, part)
    except BrokenProcessPool as error:
        raise RunError(f"{path}: a worker process stopped ({error}); --workers 1 reads without") from None
    finally:
        pool.shutdown(cancel_futures=True)
    return merged.finish()


def _ignore_interrupts() -> None:
    """A worker leaves Ctrl-C to the process that started it, which stops the pool (no traceback from
    each worker)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _most_pieces(files: list[Path]) -> int:
    """How many pieces ``files`` can make at most: no more workers than that are worth starting."""
    size = 0
    for file in files:
        with contextlib.suppress(OSError):  # reading it says what is wrong with it
            size += file.stat().st_size
    return len(files) + size // PIECE_BYTES


def available_workers() -> int:
    """The CPUs this process may run on: how many workers are worth starting."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on this platform (macOS, Windows)
        return os.cpu_count() or 1


class _Piece(NamedTuple):
    """The lines of ``source`` from byte ``start`` (line ``first_line``) to ``stop`` (``None``: the end),
    the ranks read there (``None``: every rank), which keys play which role, and whether each rank's
    step times are summed (``RunSummary.rank_times``)."""

    source: Path
    start: int
    stop: int | None
    first_line: int
    rank: frozenset[int] | None
    roles: Roles
    times: bool


def _pieces(
    files: list[Path], rank: RankChoice, skipped: Skipped, roles: Roles, times: bool
) -> Iterator[_Piece]:
    """The pieces of the files ``read_records`` would open, in order. Under ``rank="first"`` the first
    record read chooses the rank, so a file is looked into up to its first record until one is found."""
    ranks = RankFilter(files, rank, skipped)
    for source in files:
        if not ranks.opens(source):
            continue
        if ranks.chosen is None and not ranks.every:
            for record in file_records(source, Skipped()):
                ranks.choose(record.rank)
                break
        for start, stop, first_line in file_spans(source, PIECE_BYTES):
            yield _Piece(source, start, stop, first_line, ranks.chosen, roles, times)


def _summarize_piece(piece: _Piece) -> tuple[_Piece, RunSummary]:
    """The summary of one piece's records of its rank, with what ``_Merge`` needs to put it after the
    pieces before it (its records of any rank, its segments' times; ``_starts`` counts the
    ``train_start`` records of every rank, as the reader numbers segments)."""
    part = RunSummary(str(piece.source), piece.roles)
    part.rank_times = RankTimes() if piece.times else None
    ranks = RankFilter([], "all" if piece.rank is None else sorted(piece.rank), part.skipped)
    span = (piece.start, piece.stop, piece.first_line)
    part.add_records(
        file_records(piece.source, part.skipped, span=span), None if ranks.every else ranks.keeps
    )
    part._close()
    part._folds, part._plans = {}, {}
    return piece, part


class _Merge:
    """The pieces' summaries put together in file order, into ``summary``."""

    __slots__ = (
        "_clock", "_failures", "_file", "_lines", "_rank_starts", "_read", "_seen", "_starts", "summary",
    )  # fmt: skip

    def __init__(self, summary: RunSummary) -> None:
        self.summary = summary
        self._clock = RunClock()
        self._rank_starts: Counter[int] = Counter()
        """``train_start`` records of each rank in the pieces merged so far."""
        self._failures: dict[tuple[int, str], list[int]] = {}
        """Per (rank, hook): [failures in the segments done, the rank's segment now, its largest count]."""
        self._seen = bytearray()
        self._file: Path | None = None
        self._lines = self._read = self._starts = 0
        """Of the file being merged: its lines that were not blank, records and train_starts so far."""

    def add(self, piece: _Piece, part: RunSummary) -> None:
        if piece.source != self._file:
            self._check()
            self._file, self._lines, self._read, self._starts = piece.source, 0, 0, 0
        self._lines += part._read + part.skipped.total_lines
        self._read += part._read
        for rank, times in part._times.items():
            for segment, elapsed in times:
                # The reader numbers a file's segments from its first train_start on: the records
                # before it are in segment 0 too.
                where = (piece.source, max(0, self._starts + segment - 1))
                self._clock.add_time(rank, where, elapsed)
        if part.rank_times is not None and self.summary.rank_times is not None:
            # As the times above: the piece's segments counted from its train_starts.
            before = self._starts
            self.summary.rank_times.merge(
                part.rank_times, lambda segment: (piece.source, max(0, before + segment - 1))
            )
        self._starts += part._starts
        for (rank, hook), counts in part._failures.items():
            done = self._failures.setdefault((rank, hook), [0, -1, 0])
            for segment, count in counts:
                segment += self._rank_starts[rank]
                if segment != done[1]:
                    done[0], done[1], done[2] = done[0] + done[2], segment, 0
                done[2] = max(done[2], count)
        self._rank_starts.update(part._rank_starts)
        if part._seen:
            start, end = part._seen_at, part._seen_at + len(part._seen)
            if end > len(self._seen):
                self._seen.extend(bytes(end - len(self._seen)))
            bits = int.from_bytes(self._seen[start:end], "little") | int.from_bytes(part._seen, "little")
            self._seen[start:end] = bits.to_bytes(end - start, "little")
        self.summary.update(part)

    def _check(self) -> None:
        if self._file is not None and self._lines and not self._read:
            raise not_a_run(self._file)

    def finish(self) -> RunSummary:
        """The run's summary, once every piece is in (``RunError`` for a file that held no record)."""
        self._check()
        self.summary.elapsed_s = self._clock.total
        self.summary.steps_recorded += int.from_bytes(self._seen, "little").bit_count()
        self.summary.segments = max(self._rank_starts.values(), default=0)
        self.summary._settle()
        failures = self.summary.hook_failures
        for (_, hook), (done, _, now) in self._failures.items():
            failures[hook] = failures.get(hook, 0) + done + now
        return self.summary
