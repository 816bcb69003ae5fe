"""``summarize_run`` folds runs of alike ``train_step`` records in bulk and every other record one by
one: both give the same summary, figure for figure, on a corpus of resumed, killed, multi-rank and
damaged runs. The reader gives every record as a ``Record``."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from speedtronic.runs import Record, read_records, summary
from speedtronic.runs.reader import RankChoice
from speedtronic.runs.summary import summarize_run
from tests.runs.conftest import same, write_run

NOTE: dict[str, Any] = {
    "v": 2, "origin": "user", "converted": [], "truncated": [],
    "non_finite": {"nan": [], "inf": [], "neg_inf": []},
}  # fmt: skip
"""Today's writer's note on a record with nothing converted, truncated or non-finite."""


def record(event: str, rank: Any = None, nan: tuple[str, ...] = (), inf: tuple[str, ...] = (),
           **payload: Any) -> bytes:  # fmt: skip
    """One line as today's writer writes it: the non-finite keys ``null`` and listed in the note."""
    fields: dict[str, Any] = {"event": event, **payload}
    if rank is not None:
        fields["rank"] = rank
    note = copy.deepcopy(NOTE)
    for kind, keys in (("nan", nan), ("inf", inf)):
        for key in keys:
            fields[key] = None
            note["non_finite"][kind].append(f"/{key}")
    fields["_speedtronic"] = note
    fields["timestamp"] = "2026-01-01T12:00:00.000000Z"
    return orjson.dumps(fields) + b"\n"


def step_line(rng: random.Random, step: int, rank: int, elapsed: float, odd: int) -> bytes:
    """A train_step of ``rank``: the writer's usual one, or (``odd`` < 21) one of the odd ones the
    plain lane must read exactly as the Record lane does."""
    payload: dict[str, Any] = {"step": step, "loss": round(2.0 / (1 + step * 0.01), 3), "lr": 3e-4,
                               "grad_norm": 1.0, "samples_per_s": 1000.0 + step % 7,
                               "elapsed_s": elapsed}  # fmt: skip
    options: dict[str, Any] = {}
    if odd == 0:
        options["nan"] = ("loss",)  # NaN through the note: the Record lane
    elif odd == 1:
        options["inf"] = ("samples_per_s",)
    elif odd == 2:
        payload["loss"] = True  # a bool is no number
    elif odd == 3:
        payload["step"] = rng.choice([float(step), True, str(step), -step, 1 << 30])
    elif odd == 4:
        del payload["step"]
    elif odd == 5:
        payload["loss"] = 1  # an int
    elif odd == 6:
        payload["val_loss"] = 0.5 - step % 5 * 0.0625  # two keys of one split, their best a tie
        payload["val/loss"] = 0.25
    elif odd == 7:
        payload["lr-SGD/pg1"] = 0.01 * (step % 5)  # a learning rate met late
    elif odd == 8:
        payload = {"loss": payload.pop("loss"), **payload}  # the same keys in another order
    elif odd == 9:
        payload["elapsed_s"] = rng.choice([int(elapsed), -1.0, None, 0.0])
    elif odd == 10:
        del payload["elapsed_s"]
    elif odd == 11:
        payload["loss"] = rng.choice([0.0, -0.0, 0.125, 0.125])  # ties and signed zeros for the best
    elif odd == 12:
        payload["train_loss"] = 9.0  # another loss key
    elif odd == 13:
        payload["samples_per_s"] = "fast"
    elif odd == 14:
        payload["samples_per_s"] = rng.choice([0, 1e308])
    elif odd == 15:  # a rank that is no int, or another rank
        return record("train_step", rng.choice([1.0, True, rank + 1]), **payload)
    elif odd == 16:  # a duplicate key: the last one counts, in either lane
        return record("train_step", rank, **payload).replace(b'"loss":', b'"loss":7.5,"loss":', 1)
    elif odd == 17:  # another writer's record: no note, strict JSON's neighbours for NaN
        return orjson.dumps({"event": "train_step", **payload, "rank": rank, "loss": "NaN"}) + b"\n"
    elif odd == 18:  # the writer before: a pointer-keyed note
        return orjson.dumps({"event": "train_step", **payload, "rank": rank, "loss": None,
                             "_speedtronic": {"non_finite": {"/loss": "NaN"}}}) + b"\n"  # fmt: skip
    elif odd == 19:  # a float past the largest: not JSON to orjson, skipped in either lane
        return record("train_step", rank, **payload).replace(b'"grad_norm":1.0', b'"grad_norm":1e400', 1)
    elif odd == 20:  # two ranks' steps in turn, the other one's later in its run
        other = step % 2
        payload["elapsed_s"] = elapsed * (1 + 9 * other)
        return record("train_step", rank + other, **payload)
    return record("train_step", rank, **options, **payload)


def write_rank(path: Path, rng: random.Random, rank: int, *, killed: bool) -> None:
    """Rank ``rank``'s records: three segments (each resumed a little before where the last one
    stopped, elapsed_s from 0 again), steps mostly in order and now and then shuffled or skipped,
    other events between them, damaged lines; the last segment killed (a torn last line) or ended."""
    lines: list[bytes] = [b"\n"]
    step = 0
    for segment in range(3):
        lines.append(record("train_start", rank, target_step=900, elapsed_s=0.0))
        step = max(0, step - rng.randrange(40))
        elapsed = 0.0
        block: list[int] = []
        for _ in range(rng.randrange(250, 400)):
            step += 1 if rng.random() < 0.97 else rng.randrange(2, 9)
            block.append(step)
            if len(block) == 30:
                if rng.random() < 0.2:
                    rng.shuffle(block)
                # A block of usual steps, or of one odd kind, or of odd ones here and there.
                kind = rng.choice([None, None, rng.randrange(21), -1])
                for number in block:
                    elapsed += rng.choice([0.5, 0.25])
                    odd = rng.randrange(63) if kind == -1 else 99 if kind is None else kind
                    lines.append(step_line(rng, number, rank, elapsed, odd))
                    if rng.random() < 0.01:
                        lines.append(rng.choice([b'{"event": "train_st\n', b"[1, 2]\n", b"\n", b"no\n"]))
                block = []
                other = rng.randrange(6)
                if other == 0:
                    lines.append(record("checkpoint", rank, step=step, path="ckpt/a.pt", elapsed_s=elapsed))
                elif other == 1:
                    lines.append(record("system", rank, rss_bytes=step, cpu_percent=50.0, elapsed_s=elapsed))
                elif other == 2:
                    lines.append(record("eval", rank, step=step, loss=1.0 / step, split="val"))
                elif other == 3:
                    lines.append(record("shape_warning", rank, step=step))
        lines.append(orjson.dumps({"event": "hook_error", "hook": "H", "failures": segment + 1, "rank": rank,
                                   "_speedtronic": {"origin": "speedtronic"}}) + b"\n")  # fmt: skip
        if segment < 2 or not killed:
            lines.append(record("train_end", rank, status="completed", final_loss=0.5, elapsed_s=elapsed))
    if killed:
        lines[-1] = lines[-1][: len(lines[-1]) // 2]  # a train_step torn by the kill
    with path.open("ab") as file:
        file.write(b"".join(lines))


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A run of three ranks: ranks 0 and 1 in their files (rank 1 killed), a few of rank 1's records
    in rank 0's file, and rank 2 written by a real MetricLogger (NaN and infinity in its notes)."""
    run = tmp_path / "fast" / "run"
    run.mkdir(parents=True)
    rng = random.Random(40)
    write_rank(run / "metrics.jsonl", rng, 0, killed=False)
    write_rank(run / "metrics.rank1.jsonl", rng, 1, killed=True)
    with (run / "metrics.jsonl").open("ab") as file:
        file.write(record("train_step", 1, step=5, loss=0.01, elapsed_s=1.0))
    steps = [("train_step", {"step": step, "loss": [float("nan"), 1.0 / step][step % 9 > 0],
                             "samples_per_s": [float("inf"), 10.0][step % 11 > 0], "rank": 2})
             for step in range(1, 300)]  # fmt: skip
    write_run(run / "metrics.rank2.jsonl", [("train_start", {"target_step": 300, "rank": 2}), *steps])
    return run


def one_by_one(run: Path, into: Path) -> Path:
    """A copy of ``run`` meaning the same to the summary whose ``train_step`` records are never alike:
    each gets a key of its own (``pad<line>``, a key no figure reads), so no two have the same keys
    and each is folded one by one. Lines that are not JSON objects stay as they are, byte for byte."""
    into.mkdir(parents=True)
    for source in run.iterdir():
        lines = source.read_bytes().split(b"\n")
        for index, raw in enumerate(lines):
            try:
                fields = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if type(fields) is dict and fields.get("event") == "train_step":
                lines[index] = raw.replace(
                    b'"event":"train_step",', b'"event":"train_step","pad%d":0,' % index, 1
                )
        (into / source.name).write_bytes(b"\n".join(lines))
    return into


def path_with(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(lines))
    return path


def everything(run: Path, rank: RankChoice, workers: int = 1) -> dict[str, Any]:
    """The summary as ``--json`` has it, and what was skipped, with the run's own path taken out."""
    result = summarize_run(run, rank=rank, workers=workers)
    text = orjson.dumps({**result.as_dict(), "described": result.skipped.describe("run")}).decode()
    return dict(orjson.loads(text.replace(str(run), "RUN")))


class TestLanes:
    @pytest.mark.parametrize("rank", ["first", "all", 0, 1, [0, 2]])
    @pytest.mark.parametrize("workers", [1, 2])
    def test_plain_steps_read_as_records_do(
        self, corpus: Path, tmp_path: Path, rank: RankChoice, workers: int, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Plain steps folded in bulk give the summary the same records folded one by one give."""
        slow = one_by_one(corpus, tmp_path / "slow" / "run")
        monkeypatch.setattr(summary, "PIECE_BYTES", 64 * 1024)  # several pieces a file
        fast, records = everything(corpus, rank, workers), everything(slow, rank, workers)
        assert same(fast, records)
        assert repr(fast) == repr(records)  # key order and the sign of a zero too

    def test_the_corpus_is_read_as_records(self, corpus: Path, tmp_path: Path) -> None:
        """Every record comes as a Record, the padded copy's steps with their own key, the rest alike."""
        slow = one_by_one(corpus, tmp_path / "slow" / "run")
        records, padded = list(read_records(corpus, rank="all")), list(read_records(slow, rank="all"))
        assert {type(record) for record in records} == {type(record) for record in padded} == {Record}
        assert len(records) == len(padded) > 2_000
        for record, copy_ in zip(records, padded, strict=True):
            pads = [key for key in copy_.payload if key.startswith("pad")]
            assert len(pads) == (record.event == "train_step")
            assert {key: value for key, value in copy_.payload.items() if key not in pads} == record.payload

    @pytest.mark.parametrize("piece_bytes", [1, 3000, 1 << 20])
    def test_where_pieces_cut_the_steps_changes_nothing(
        self, corpus: Path, piece_bytes: int, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """However pieces cut the runs of alike steps, the summary is the same."""
        whole = everything(corpus, "all")
        monkeypatch.setattr(summary, "PIECE_BYTES", piece_bytes)
        assert same(everything(corpus, "all"), whole)


class TestPlainSteps:
    def test_what_the_bulk_reads(self, tmp_path: Path) -> None:
        """Plain steps resumed back over earlier steps, one NaN loss and one torn line: the figures."""
        path = tmp_path / "m.jsonl"
        lines = [record("train_start", elapsed_s=0.0)]
        lines += [record("train_step", step=s, loss=10.0 - s * 0.01, samples_per_s=2.0 * s, elapsed_s=s * 0.5)
                  for s in range(1, 201)]  # fmt: skip
        lines.append(record("train_start", elapsed_s=0.0))
        lines += [record("train_step", step=s, loss=5.0, samples_per_s=1.0, elapsed_s=(s - 149) * 0.5,
                         nan=("loss",) if s == 170 else ()) for s in range(150, 251)]  # fmt: skip
        lines.append(record("train_step", step=251, loss=0.1)[:40])  # killed while writing
        path.write_bytes(b"".join(lines))
        got = summarize_run(path)
        assert (got.step_min, got.step_max, got.steps_recorded, got.segments) == (1, 250, 250, 2)
        assert (got.loss_first, got.loss_last, got.non_finite_losses) == (9.99, 5.0, 1)
        assert (got.loss_best, got.loss_best_step) == (5.0, 150)  # the earliest of the equal ones
        assert (got.rates["samples_per_s"].count, got.rates["samples_per_s"].mean) == (301, 40301 / 301)
        assert got.elapsed_s == 100.0 + 50.5
        assert got.skipped.by_reason() == {"torn last line": 1}

    def test_a_record_of_another_rank_in_a_file_is_left_out(self, tmp_path: Path) -> None:
        """A plain step of rank 1 among rank 0's is left out of rank 0's summary, and counted."""
        path = tmp_path / "m.jsonl"
        lines = [record("train_step", 0, step=s, loss=1.0, elapsed_s=float(s)) for s in range(1, 100)]
        lines.insert(50, record("train_step", 1, step=500, loss=0.0, elapsed_s=1000.0))
        path.write_bytes(b"".join(lines))
        got = summarize_run(path, rank=0)
        assert (got.step_max, got.loss_best, got.elapsed_s) == (99, 1.0, 99.0)
        assert got.skipped.other_ranks == {1: 1}
        assert summarize_run(path, rank="all").step_max == 500

    def test_every_step_of_a_rank_left_out_is_counted(self, tmp_path: Path) -> None:
        """Long runs of another rank's steps in a file: each one is counted as left out, once."""
        path = tmp_path / "m.jsonl"
        lines = [record("train_step", 0, step=s, loss=1.0, elapsed_s=float(s)) for s in range(1, 11)]
        lines += [record("train_step", 1, step=s, loss=0.5, elapsed_s=float(s)) for s in range(1, 601)]
        lines += [record("train_step", 0, step=s, loss=0.25, elapsed_s=float(s)) for s in range(11, 21)]
        got = summarize_run(path_with(path, lines), rank=0)
        assert (got.records, got.steps_recorded, got.loss_last, got.skipped.other_ranks) == (
            20,
            20,
            0.25,
            {1: 600},
        )
        other = summarize_run(path, rank=1)
        assert (other.records, other.loss_best, other.skipped.other_ranks) == (600, 0.5, {0: 20})

    def test_a_key_only_some_steps_have_is_read(self, tmp_path: Path) -> None:
        """A learning rate some steps of a list have and others lack is read where it is."""
        path = tmp_path / "m.jsonl"
        group, other = "lr-SGD/pg1", "lr-SGD/pg2"

        def step(s: int, key: str | None) -> bytes:
            return record("train_step", step=s, loss=1.0, elapsed_s=1.0, **({key: s / 100} if key else {}))

        lines = [step(s, group if 50 < s <= 60 else None) for s in range(1, 71)]
        assert summarize_run(path_with(path, lines)).lrs == {group: 0.6}  # the first step lacks it
        lines.append(record("checkpoint", step=70))  # a new list, whose first step has it
        lines += [step(s, group if s <= 80 else None) for s in range(71, 91)]
        assert summarize_run(path_with(path, lines)).lrs == {group: 0.8}
        lines.append(record("checkpoint", step=90))  # as many keys, one of them another
        lines += [step(s, group if s == 91 else other) for s in range(91, 101)]
        assert summarize_run(path_with(path, lines)).lrs == {group: 0.91, other: 1.0}

    def test_two_keys_of_one_split_are_read_in_record_order(self, tmp_path: Path) -> None:
        """val_loss and val/loss in each step: the best is the first met in record order."""
        path = tmp_path / "m.jsonl"
        lines = [record("train_step", step=s, loss=1.0, elapsed_s=1.0, val_loss=0.25 if s == 2 else 0.5,
                        **{"val/loss": 0.25}) for s in range(1, 11)]  # fmt: skip
        got = summarize_run(path_with(path, lines))
        assert (got.eval_loss_best, got.eval_loss_best_step, got.eval_loss_last) == (0.25, 1, 0.25)

    def test_the_loss_is_the_key_met_first_across_lanes(self, tmp_path: Path) -> None:
        """A loss key in a plain step is met before one in the record right after it."""
        path = tmp_path / "m.jsonl"
        plain = [record("train_step", step=1, train_loss=3.0, elapsed_s=1.0)]
        other = orjson.dumps({"event": "train_step", "step": 3, "loss": 2.0}) + b"\n"  # no note
        path.write_bytes(b"".join([*plain, other]))
        assert (summarize_run(path).loss_key, summarize_run(path).loss_last) == ("train_loss", 3.0)

    def test_a_step_with_nothing_to_undo_is_a_whole_record(self, tmp_path: Path) -> None:
        """A train_step of today's writer with nothing non-finite: a Record like any other, its note kept."""
        path = path_with(tmp_path / "m.jsonl", [record("train_step", 3, step=1, loss=1.0)])
        (got,) = read_records(path)
        assert got == Record("train_step", {"step": 1, "loss": 1.0, "rank": 3}, "2026-01-01T12:00:00.000000Z",
                             3, path, 1, NOTE, 0, False)  # fmt: skip
        assert (got.event, got.rank, got.own, got.notes) == ("train_step", 3, False, NOTE)
        assert got.hook_payload == {"step": 1, "loss": 1.0, "rank": 3, "timestamp": got.timestamp}
