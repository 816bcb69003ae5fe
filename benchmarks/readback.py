"""Reading runs back at scale: speedtronic's readers beside polars and DuckDB doing the same work.

    python benchmarks/readback.py            # 1M records; 10 ranks x 100,000 and 10,000 ranks x 100
    python benchmarks/readback.py --quick    # 100,000 records; 10 x 10,000 and 1,000 x 100

Synthetic runs in today's record shape are written to a temporary directory (a template per line, not
a MetricLogger: seconds, not minutes). Every measurement runs in a fresh interpreter, so its peak RSS
(``VmHWM``) is its own; times are medians of ``--rounds`` runs, and the ratios are of
those medians. Measured against:

- ``polars.read_ndjson(path, infer_schema_length=None)`` and DuckDB's ``read_json_auto`` with
  ``sample_size=-1``, for ``read_frames``;
- the same two computing ``summarize``'s figures (events, steps, first/last/best loss, non-finite
  losses, rate means and last values, elapsed, checkpoints), for ``summarize_run``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

NOTE = (
    '{"v":2,"origin":"user","converted":[],"truncated":[],'
    '"non_finite":{"nan":%s,"inf":[],"neg_inf":[]}}'
)
STEP = (
    '{"event":"train_step","step":%d,"loss":%s,"lr":0.0003,"grad_norm":%r,"samples_per_s":%r,'
    '"tokens_per_s":%r,"elapsed_s":%r%s,"_speedtronic":%s,"timestamp":"2026-01-01T12:00:00.%06dZ"}\n'
)
OTHER = (
    '{"event":"%s","step":%d%s,"elapsed_s":%r%s,"_speedtronic":%s,'
    '"timestamp":"2026-01-01T12:00:00.000000Z"}\n'
)


def write_rank(path: Path, records: int, rank: int | None) -> None:
    """``records`` lines of one rank: train_start, train_steps (a NaN loss every 50,000th), a checkpoint
    every 10,000th, train_end. Written 10,000 lines at a time, so this process stays small (a child
    process starts from its parent's peak RSS as counted by ``getrusage``)."""
    ranked = "" if rank is None else f',"rank":{rank},"world_size":2'
    empty = NOTE % "[]"
    with path.open("w") as file:
        lines = [OTHER % ("train_start", 0, f',"target_step":{records}', 0.0, ranked, empty)]
        for step in range(1, records - 1):
            nan = step % 50_000 == 0
            lines.append(
                STEP % (
                    step, "null" if nan else repr(2.0 / (1 + step * 1e-3)), 1.0 + step % 7 * 0.1,
                    1000.0 + step % 13, 64000.0 + step % 11, step * 0.01, ranked,
                    NOTE % ('["/loss"]' if nan else "[]"), step % 1_000_000,
                )
            )
            if step % 10_000 == 0:
                where = f',"path":"ckpt/step_{step}.pt"'
                lines.append(OTHER % ("checkpoint", step, where, step * 0.01, ranked, empty))
                file.write("".join(lines))
                lines = []
        lines.append(OTHER % ("train_end", records, ',"final_loss":1.0', records * 0.01, ranked, empty))
        file.write("".join(lines))


def write_ranks(directory: Path, ranks: int, records: int) -> Path:
    directory.mkdir()
    for rank in range(ranks):
        name = "metrics.jsonl" if rank == 0 else f"metrics.rank{rank}.jsonl"
        write_rank(directory / name, records, rank)
    return directory


POLARS_SUMMARY = """
import polars as pl
frame = pl.read_ndjson(PATH, infer_schema_length=None)
steps = frame.filter(pl.col("event") == "train_step")
figures = (
    frame.group_by("event").len(),
    steps.select(
        pl.col("step").min(), pl.col("step").max().alias("last"), pl.col("step").n_unique().alias("n"),
        pl.col("loss").drop_nulls().first().alias("first"), pl.col("loss").drop_nulls().last().alias("lastl"),
        pl.col("loss").min().alias("best"), pl.col("step").get(pl.col("loss").arg_min()).alias("best_step"),
        pl.col("_speedtronic").struct.field("non_finite").struct.field("nan").list.len().sum().alias("nf"),
        pl.col("samples_per_s").mean(), pl.col("samples_per_s").last().alias("sl"),
        pl.col("tokens_per_s").mean().alias("tm"), pl.col("tokens_per_s").last().alias("tl"),
    ),
    frame.select(pl.col("elapsed_s").max()),
    frame.filter(pl.col("event") == "checkpoint").height,
)
"""

DUCKDB_SUMMARY = """
import duckdb
con = duckdb.connect()
con.execute("PRAGMA disable_progress_bar")
con.execute(f"create view r as select * from read_json_auto('{PATH}', sample_size=-1)")
figures = (
    con.sql("select event, count(*) from r group by event").fetchall(),
    con.sql(
        "select min(step), max(step), count(distinct step),"
        " first(loss order by step) filter (loss is not null),"
        " last(loss order by step) filter (loss is not null), min(loss), arg_min(step, loss),"
        " sum(len(_speedtronic.non_finite.nan)), avg(samples_per_s), last(samples_per_s order by step),"
        " avg(tokens_per_s), last(tokens_per_s order by step) from r where event = 'train_step'"
    ).fetchall(),
    con.sql("select max(elapsed_s), count(*) filter (event = 'checkpoint') from r").fetchall(),
)
"""

CASES: dict[str, tuple[str, str]] = {
    # name: (setup, not timed: imports; timed work)
    "read_frames": (
        "from speedtronic.runs.frames import read_frames\nimport polars",
        "read_frames(PATH, library='polars')",
    ),
    "polars.read_ndjson": ("import polars as pl", "pl.read_ndjson(PATH, infer_schema_length=None)"),
    "duckdb.read_json_auto": (
        "import duckdb\ncon = duckdb.connect()\ncon.execute('PRAGMA disable_progress_bar')",
        "con.sql(f\"select * from read_json_auto('{PATH}', sample_size=-1)\").arrow()",
    ),
    "summarize": ("from speedtronic.runs.summary import summarize_run", "summarize_run(PATH, rank=RANK)"),
    "polars aggregate": ("import polars as pl", POLARS_SUMMARY),
    "duckdb aggregate": ("import duckdb", DUCKDB_SUMMARY),
}

PROBE = """
import sys, time
PATH, RANK = sys.argv[1], sys.argv[2]
RANK = int(RANK) if RANK.isdigit() else RANK
{setup}
start = time.perf_counter()
{code}
took = time.perf_counter() - start
# VmHWM: this process's own peak RSS (getrusage's ru_maxrss starts from the parent's at fork)
peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:")).split()[1]
print(took, int(peak) / 1024)
"""


def measure(case: str, path: Path, rounds: int, rank: str = "first") -> tuple[float, float]:
    """Median seconds and largest peak RSS (MB) of ``case`` on ``path``, each round a fresh interpreter."""
    times, peaks = [], []
    for _ in range(rounds):
        done = subprocess.run(
            [sys.executable, "-c", PROBE.format(setup=CASES[case][0], code=CASES[case][1]), str(path), rank],
            capture_output=True, text=True, check=True,
        )
        took, peak = map(float, done.stdout.splitlines()[-1].split())
        times.append(took)
        peaks.append(peak)
    return statistics.median(times), max(peaks)


def baseline_rss() -> float:
    """Peak RSS (MB) of an interpreter that only imported speedtronic's reader: what every probe starts at."""
    probe = PROBE.format(setup="import speedtronic.runs.summary", code="")
    command = [sys.executable, "-c", probe, "-", "first"]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(done.stdout.split()[1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller runs, one round")
    parser.add_argument("--rounds", type=int, default=3, help="runs per measurement (default 3)")
    args = parser.parse_args()
    records = 100_000 if args.quick else 1_000_000
    rounds = 1 if args.quick else args.rounds
    results: dict[str, object] = {"records": records, "rounds": rounds}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        one = root / "metrics.jsonl"
        write_rank(one, records, None)
        size_mb = one.stat().st_size / 2**20
        baseline = baseline_rss()
        print(f"one file: {records:,} records, {size_mb:.0f} MB; interpreter baseline {baseline:.0f} MB")
        figures = {case: measure(case, one, rounds) for case in CASES}
        for case, (took, peak) in figures.items():
            print(f"  {case:24} {took:7.2f} s  peak RSS {peak:6.0f} MB")
        frames, ndjson = figures["read_frames"], figures["polars.read_ndjson"]
        summary, aggregate = figures["summarize"], figures["polars aggregate"]
        ratios = {
            "read_frames / polars.read_ndjson time": frames[0] / ndjson[0],
            "read_frames / polars.read_ndjson memory": frames[1] / ndjson[1],
            "read_frames / duckdb time": frames[0] / figures["duckdb.read_json_auto"][0],
            "read_frames / duckdb memory": frames[1] / figures["duckdb.read_json_auto"][1],
            "summarize / polars aggregate time": summary[0] / aggregate[0],
            "summarize / duckdb aggregate time": summary[0] / figures["duckdb aggregate"][0],
            "summarize / polars aggregate memory": summary[1] / aggregate[1],
        }
        for name, ratio in ratios.items():
            print(f"  {name:42} {ratio:5.2f}x")
        results["one_file"] = {"mb": size_mb, "figures": figures, "ratios": ratios}

        wide_ranks, deep_ranks = (1_000, 10) if args.quick else (10_000, 10)
        deep = write_ranks(root / "deep", deep_ranks, records // deep_ranks)
        wide = write_ranks(root / "wide", wide_ranks, records // wide_ranks)
        deep_t, _ = measure("summarize", deep, rounds, "all")
        wide_t, _ = measure("summarize", wide, rounds, "all")
        one_rank_t, _ = measure("summarize", wide, rounds, "0")
        print(f"summarize --rank all: {deep_ranks} ranks x {records // deep_ranks:,}: {deep_t:.2f} s; "
              f"{wide_ranks:,} ranks x {records // wide_ranks:,}: {wide_t:.2f} s ({wide_t / deep_t:.2f}x)")
        print(f"summarize --rank 0 of {wide_ranks:,} ranks: {one_rank_t:.2f} s")
        results["ranks"] = {
            "deep_s": deep_t, "wide_s": wide_t, "ratio": wide_t / deep_t, "one_rank_s": one_rank_t
        }

        long_line = root / "long.jsonl"
        with long_line.open("wb") as file:
            file.write(b'{"event":"train_step","step":1,"loss":0.5}\n')
            for _ in range(400):
                file.write(b"x" * 2**20)
        long_t, long_peak = measure("summarize", long_line, 1)
        print(f"summarize of one 400 MB line: {long_t:.2f} s, peak RSS {long_peak:.0f} MB")
        results["long_line"] = {"s": long_t, "peak_mb": long_peak}
    print(json.dumps(results, default=str))


if __name__ == "__main__":
    main()
