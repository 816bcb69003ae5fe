"""Reading runs back at scale, process to process: speedtronic's commands beside polars and DuckDB.

    python benchmarks/readback.py             # 10k, 100k and 1M records; 200 MiB hostile files; ranks
    python benchmarks/readback.py --quick     # smaller: one round, 64 MiB hostile files, fewer ranks
    python benchmarks/readback.py --ranks 10000 --rank-records 10000    # the issue's 100M records (~30 GB)
    python benchmarks/readback.py --goals     # the two read-back goals only (make bench runs this)

Every measurement is a fresh process, as a user runs a CLI: its time counts interpreter start-up and
imports, and its peak RSS is its own (``os.wait4``'s rusage of that child). Times are medians of
``--rounds`` runs; ratios are of those medians. Synthetic runs in today's record shape are written to
a temporary directory (``--dir`` to choose one with room; ``df`` is checked first) and deleted after.

1. ``speedtronic summarize FILE`` against a polars lazy query computing the same figures (recorded
   steps, last and best loss, elapsed) as a process, from 10,000 to 1,000,000 records; with its
   default workers (one per CPU) and with ``--workers 1``.
2. Peak RSS of ``summarize``, ``plot``, ``replay`` and ``read_frames`` on hostile inputs: one line of
   200 MiB between records, 200 MiB without a newline, and 1,000,000 records.
3. Runs of R ranks x N records (one file per rank): ``summarize --rank all``, ``read_frames`` of one
   event of a chosen rank and ``plot --rank`` of it, then the same for three chosen ranks, against
   DuckDB reading the same files with a glob; several sizes, so the growth of time and memory shows.
   ``summarize --rank all`` is also set against DuckDB computing its figures per rank (``GROUP BY``)
   under ``memory_limit='256MB'`` and 2 threads.

``--goals`` measures only the read-back goals, each against its yardstick in alternating rounds, and
prints them as a table with the machine, the load and the date (``--check``: exit 1 on a miss):
``summarize --rank all`` of 1,000 ranks x 10,000 records within 2x DuckDB's per-rank ``GROUP BY``
(256 MB, 2 threads) with a peak RSS of at most 300 MiB; the same for ``summarize --rank all --health``
against DuckDB's per-rank ``GROUP BY`` of the same figures with the schema typed
(``read_json(..., columns={...})``: ``DUCKDB_HEALTH``), with a Python reference beside it
(``ORJSON_REFERENCE``: orjson per line, 2 processes, printed, not a goal; another implementation,
not a floor); and ``summarize`` of
1,000,000 records of one rank within 2x the polars lazy query. ``--goals --quick --ranks 50`` is a
quicker check of the same shape (100,000 records of one rank, 50 ranks).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NOTE = (  # today's writer's note (contract 3: a whole record says "part":0,"parts":1)
    '{"v":3,"origin":"user","converted":[],"truncated":[],"non_finite":{"nan":%s,"inf":[],"neg_inf":[]},'
    '"part":0,"parts":1}'
)
STEP = (
    '{"event":"train_step","step":%d,"loss":%s,"lr":0.0003,"grad_norm":%r,"samples_per_s":%r,'
    '"tokens_per_s":%r,"step_time_s":%r,"data_wait_s":%r,"compute_s":%r,"sync_wait_s":%r,"elapsed_s":%r%s,'
    '"_speedtronic":%s,"timestamp":"%s"}\n'
)
OTHER = '{"event":"%s","step":%d%s,"elapsed_s":%r%s,"_speedtronic":%s,"timestamp":"%s"}\n'


def when(step: int) -> str:
    """The timestamp of a record at ``step``: 10 ms a step from 12:00, as its ``elapsed_s`` says."""
    seconds, hundredths = divmod(step, 100)
    minutes, seconds = divmod(seconds, 60)
    return f"2026-01-01T{12 + minutes // 60:02d}:{minutes % 60:02d}:{seconds:02d}.{hundredths:02d}0000Z"


def write_rank(path: Path, records: int, rank: int | None) -> None:
    """``records`` lines of one rank: train_start, train_steps (a NaN loss every 50,000th), a checkpoint
    every 10,000th, train_end. Written 10,000 lines at a time, so this process stays small (a child
    process starts from its parent's peak RSS as counted by ``getrusage``)."""
    ranked = "" if rank is None else f',"rank":{rank},"world_size":2'
    empty = NOTE % "[]"
    with path.open("w") as file:
        lines = [OTHER % ("train_start", 0, f',"target_step":{records}', 0.0, ranked, empty, when(0))]
        for step in range(1, records - 1):
            nan = step % 50_000 == 0
            lines.append(
                STEP
                % (
                    step,
                    "null" if nan else repr(2.0 / (1 + step * 1e-3)),
                    1.0 + step % 7 * 0.1,
                    1000.0 + step % 13,
                    64000.0 + step % 11,
                    0.01,  # the step's timing keys (issue #48): wall time = data wait + compute + sync
                    0.001 + step % 3 * 0.0005,
                    0.007,
                    0.002 - step % 3 * 0.0005,
                    step * 0.01,
                    ranked,
                    NOTE % ('["/loss"]' if nan else "[]"),
                    when(step),
                )
            )
            if step % 10_000 == 0:
                where = f',"path":"ckpt/step_{step}.pt","save_s":0.5'
                lines.append(OTHER % ("checkpoint", step, where, step * 0.01, ranked, empty, when(step)))
                file.write("".join(lines))
                lines = []
        allocated = 2**30 + (rank or 0) * 4096
        memory = f',"final_loss":1.0,"peak_allocated_bytes":{allocated},"peak_reserved_bytes":{2**31}'
        lines.append(OTHER % ("train_end", records, memory, records * 0.01, ranked, empty, when(records)))
        file.write("".join(lines))


def write_ranks(directory: Path, ranks: int, records: int) -> Path:
    directory.mkdir()
    for rank in range(ranks):
        name = "metrics.jsonl" if rank == 0 else f"metrics.rank{rank}.jsonl"
        write_rank(directory / name, records, rank)
    return directory


POLARS_SUMMARY = """
import sys
import polars as pl
frame = pl.scan_ndjson(sys.argv[1])
steps = frame.filter(pl.col("event") == "train_step")
figures = pl.concat([
    steps.select(
        pl.col("step").n_unique().alias("steps"),
        pl.col("loss").drop_nulls().last().alias("last_loss"),
        pl.col("loss").min().alias("best_loss"),
    ),
    frame.select(pl.col("elapsed_s").max().alias("elapsed")),
], how="horizontal").collect()
print(figures)
"""

DUCKDB_SUMMARY = """
import sys
import duckdb
con = duckdb.connect()
con.execute("PRAGMA disable_progress_bar")
print(con.sql(
    "select count(distinct step) filter (where event = 'train_step'),"
    " arg_max(loss, step) filter (where event = 'train_step' and loss is not null),"
    " min(loss) filter (where event = 'train_step'), max(elapsed_s)"
    f" from read_json_auto('{sys.argv[1]}')"
).fetchall())
"""

DUCKDB_PER_RANK = """
import os, sys
import duckdb
spill = os.path.join(os.path.dirname(os.path.dirname(sys.argv[1])), "duckdb.tmp")  # not the cwd's .tmp
con = duckdb.connect(config={"memory_limit": "256MB", "threads": 2, "temp_directory": spill})
con.execute("PRAGMA disable_progress_bar")
print(con.sql(
    "select \\"rank\\", count(distinct step) filter (where event = 'train_step'),"
    " arg_max(loss, step) filter (where event = 'train_step' and loss is not null),"
    " min(loss) filter (where event = 'train_step'), max(elapsed_s)"
    f" from read_json_auto('{sys.argv[1]}') group by \\"rank\\""
).fetchall()[:3])
"""
"""The issue's yardstick for ``summarize --rank all``: the figures per rank, in 256 MB and 2 threads."""

COLUMNS = {
    "event": "VARCHAR", "step": "BIGINT", "loss": "DOUBLE", "lr": "DOUBLE", "grad_norm": "DOUBLE",
    "samples_per_s": "DOUBLE", "tokens_per_s": "DOUBLE", "step_time_s": "DOUBLE", "data_wait_s": "DOUBLE",
    "compute_s": "DOUBLE", "sync_wait_s": "DOUBLE", "elapsed_s": "DOUBLE", "rank": "BIGINT",
    "save_s": "DOUBLE", "peak_allocated_bytes": "BIGINT", "peak_reserved_bytes": "BIGINT",
    "timestamp": "VARCHAR",
}  # fmt: skip
"""The record's keys that the figures read, typed as a user who knows what the writer writes would."""

DUCKDB_HEALTH = """
import os, sys
import duckdb
spill = os.path.join(os.path.dirname(os.path.dirname(sys.argv[1])), "duckdb.tmp")  # not the cwd's .tmp
con = duckdb.connect(config={"memory_limit": "256MB", "threads": 2, "temp_directory": spill})
con.execute("PRAGMA disable_progress_bar")
step = "event = 'train_step'"
print(con.sql(
    "select \\"rank\\", count(*), count(*) filter (where event = 'checkpoint'),"
    f" count(distinct step) filter (where {step}), min(step) filter (where {step}),"
    f" max(step) filter (where {step}),"
    f" arg_min(loss, step) filter (where {step} and loss is not null),"
    f" arg_max(loss, step) filter (where {step} and loss is not null), min(loss) filter (where {step}),"
    f" arg_min(step, loss) filter (where {step}), count(*) filter (where {step} and loss is null),"
    f" avg(samples_per_s), arg_max(samples_per_s, step), avg(tokens_per_s), arg_max(tokens_per_s, step),"
    " arg_max(lr, step), max(elapsed_s), min(timestamp), max(timestamp),"
    f" sum(step_time_s), sum(data_wait_s), sum(compute_s), sum(sync_wait_s),"
    " sum(save_s) filter (where event = 'checkpoint'),"
    " max(peak_allocated_bytes), max(peak_reserved_bytes)"
    f" from read_json('{sys.argv[1]}', format='newline_delimited', columns={sys.argv[2]})"
    " group by \\"rank\\""
).fetchall()[:3])
"""
"""The yardstick for ``summarize --rank all --health`` (issue #48): DuckDB's per-rank ``GROUP BY`` of
the same figures (counts, distinct steps, first/last/best loss, rates, the goodput sums, memory
peaks) with the schema typed (``read_json(..., columns={...})``), in 256 MB and 2 threads."""

ORJSON_REFERENCE = """
import glob, sys
from multiprocessing import Pool
import orjson

def figures(path):
    ranks = {}
    with open(path, "rb") as file:
        for line in file:
            record = orjson.loads(line)
            rank = record.get("rank", 0)
            row = ranks.get(rank)
            if row is None:
                row = ranks[rank] = {
                    "records": 0, "steps": set(), "loss": [None, None, None], "nan": 0, "rates": {},
                    "lr": None, "elapsed": 0.0, "times": [0, 0.0, 0.0, 0.0, 0.0], "checkpoints": 0,
                    "save": 0.0, "memory": [0, 0], "seen": 0,
                }
            row["records"] += 1
            elapsed = record.get("elapsed_s")
            if elapsed is not None and elapsed > row["elapsed"]:
                row["elapsed"] = elapsed
            event = record["event"]
            if event == "train_step":
                row["steps"].add(record["step"])
                loss = record.get("loss")
                if loss is None:
                    row["nan"] += 1
                else:
                    held = row["loss"]
                    held[0] = loss if held[0] is None else held[0]
                    held[1] = loss
                    held[2] = loss if held[2] is None or loss < held[2] else held[2]
                for key in ("samples_per_s", "tokens_per_s"):
                    rate = row["rates"].setdefault(key, [0.0, 0, 0.0])
                    rate[0] += record[key]
                    rate[1] += 1
                    rate[2] = record[key]
                row["lr"] = record.get("lr")
                row["seen"] += 1
                if row["seen"] > 5:
                    times = row["times"]
                    times[0] += 1
                    times[1] += record["sync_wait_s"]
                    times[2] += record["data_wait_s"]
                    times[3] += record["compute_s"]
                    times[4] += record["step_time_s"]
            elif event == "checkpoint":
                row["checkpoints"] += 1
                row["save"] += record.get("save_s", 0.0)
            elif event == "train_end":
                memory = row["memory"]
                memory[0] = max(memory[0], record.get("peak_allocated_bytes", 0))
                memory[1] = max(memory[1], record.get("peak_reserved_bytes", 0))
    for row in ranks.values():
        row["steps"] = len(row["steps"])
    return ranks

if __name__ == "__main__":
    with Pool(2) as pool:
        found = pool.map(figures, sorted(glob.glob(sys.argv[1])), chunksize=8)
    print(sum(len(ranks) for ranks in found))
"""
"""A Python reference for ``summarize --rank all --health`` (another implementation, not a floor: it
does not write summarize's output): orjson per line over the same files in 2
worker processes, computing about the same figures per rank (distinct steps, loss, rates, the timing
sums after the warm-up, memory), without the reader's rules (notes, damaged lines, segments, roles)."""

DUCKDB_RANK = """
import sys
import duckdb
con = duckdb.connect()
con.execute("PRAGMA disable_progress_bar")
table = con.sql(
    f"select * from read_json_auto('{sys.argv[1]}')"
    f" where event = 'train_step' and \\"rank\\" in ({sys.argv[2]})"
).arrow()
table = table.read_all() if hasattr(table, "read_all") else table  # a reader since DuckDB 1.4
print(table.num_rows)
"""

READ_FRAMES = """
import sys
from speedtronic.runs.frames import read_frames
rank = sys.argv[2] if sys.argv[2] in ("first", "all") else [int(r) for r in sys.argv[2].split(",")]
print(len(read_frames(sys.argv[1], library="polars", events=["train_step"], rank=rank)["train_step"]))
"""

REPLAY = """
import sys
from speedtronic.runs.replay import replay_run
class Nothing:
    def on_event(self, event, payload):
        pass
print(replay_run(sys.argv[1], [Nothing()]).replayed.total())
"""

PY = [sys.executable]
HERE = Path(__file__).resolve().parent


def speedtronic(*args: str) -> list[str]:
    return [*PY, "-m", "speedtronic", *args]


def script(code: str, *args: str) -> list[str]:
    return [*PY, "-c", code, *args]


def run_once(argv: list[str]) -> Figure:
    """Seconds, peak RSS (MiB) and exit code of one process (its own rusage, from ``os.wait4``)."""
    start = time.perf_counter()
    # Run from this script's folder, not the caller's: "-m" and "-c" put the working directory first on
    # sys.path, so from a checkout's root the child would import that checkout's speedtronic whatever
    # PYTHONPATH names (an A/B against another tree would measure this one twice).
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=HERE)
    _, status, usage = os.wait4(child.pid, 0)
    took = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    return took, usage.ru_maxrss / 1024, child.returncode


def measure(argv: list[str], rounds: int) -> Figure:
    """Median seconds, largest peak RSS (MiB) and the exit code of ``argv`` over ``rounds`` runs."""
    runs = [run_once(argv) for _ in range(rounds)]
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs), runs[-1][2]


Figure = tuple[float, float, int]


def show(name: str, argv: list[str], rounds: int, against: Figure | None = None) -> Figure:
    """Measure ``argv`` and print its line: time, peak RSS, exit code and the ratios to ``against``."""
    figure = took, peak, code = measure(argv, rounds)
    ratio = f"  {took / against[0]:5.2f}x time, {peak / against[1]:4.2f}x memory" if against else ""
    print(f"  {name:42} {took:7.2f} s  {peak:6.0f} MiB  exit {code}{ratio}", flush=True)
    return figure


def alternating(argvs: dict[str, list[str]], rounds: int) -> dict[str, Figure]:
    """Median seconds and largest peak RSS of each command, run in turns ``rounds`` times (so a
    change of load or of the page cache falls on every command alike)."""
    runs: dict[str, list[Figure]] = {name: [] for name in argvs}
    for _ in range(rounds):
        for name, argv in argvs.items():
            runs[name].append(run_once(argv))
    figures = {}
    for name, figure in runs.items():
        figures[name] = (statistics.median(r[0] for r in figure), max(r[1] for r in figure), figure[-1][2])
        took, peak, code = figures[name]
        print(f"  {name:42} {took:7.2f} s  {peak:6.0f} MiB  exit {code}", flush=True)
    return figures


def goals(
    root: Path, rounds: int, ranks: int = 1_000, one_rank: int = 1_000_000
) -> list[tuple[str, str, str, bool]]:
    """The read-back goals, measured: rows of (goal, measured, target, met). ``ranks`` and
    ``one_rank`` (records) smaller than the goals' 1,000 and 1,000,000 make a quicker check."""
    rows = []
    path = root / "one_rank.jsonl"
    write_rank(path, one_rank, None)
    print(f" 1 rank x {one_rank:,} records, {path.stat().st_size / 2**20:.0f} MiB (median of {rounds})")
    one = alternating(
        {
            "polars lazy query": script(POLARS_SUMMARY, str(path)),
            "speedtronic summarize": speedtronic("summarize", str(path)),
        },
        rounds,
    )
    ratio = one["speedtronic summarize"][0] / one["polars lazy query"][0]
    rows.append(
        (f"summarize, {one_rank:,} records of one rank / polars lazy", f"{ratio:.2f}x", "<= 2x", ratio <= 2)
    )
    path.unlink()
    records = 10_000
    room(root, ranks * records * 400)
    run = write_ranks(root / f"r{ranks}x{records}", ranks, records)
    size = sum(f.stat().st_size for f in run.iterdir()) / 2**30
    print(f" {ranks:,} ranks x {records:,} records, {size:.1f} GiB (median of {rounds})")
    files = str(run / "*.jsonl")
    many = alternating(
        {
            "duckdb per rank, 256MB, 2 threads": script(DUCKDB_PER_RANK, files),
            "speedtronic summarize --rank all": speedtronic("summarize", str(run), "--rank", "all"),
            "duckdb typed per rank + health sums": script(DUCKDB_HEALTH, files, repr(COLUMNS)),
            "summarize --rank all --health": speedtronic("summarize", str(run), "--rank", "all", "--health"),
            "orjson per line, 2 processes (a reference)": script(ORJSON_REFERENCE, files),
        },
        rounds,
    )
    shutil.rmtree(run)
    shape = f"{ranks:,} x 10k"
    took, peak, code = many["speedtronic summarize --rank all"]
    ratio = took / many["duckdb per rank, 256MB, 2 threads"][0]
    rows.append(
        (
            f"summarize --rank all, {shape} / DuckDB per rank",
            f"{ratio:.2f}x",
            "<= 2x",
            ratio <= 2 and code == 0,
        )
    )
    rows.append((f"summarize --rank all, {shape}, peak RSS", f"{peak:.0f} MiB", "<= 300 MiB", peak <= 300))
    took, peak, code = many["summarize --rank all --health"]
    ratio = took / many["duckdb typed per rank + health sums"][0]
    name = f"summarize --rank all --health, {shape} / DuckDB typed per rank"
    rows.append((name, f"{ratio:.2f}x", "<= 2x", ratio <= 2 and code == 0))
    rows.append(
        (f"summarize --rank all --health, {shape}, peak RSS", f"{peak:.0f} MiB", "<= 300 MiB", peak <= 300)
    )
    reference = many["orjson per line, 2 processes (a reference)"][0]
    print(
        f"  --health / the orjson reference: {took / reference:.2f}x; the reference / DuckDB typed: "
        f"{reference / many['duckdb typed per rank + health sums'][0]:.2f}x",
        flush=True,
    )
    return rows


def hostile(path: Path, mib: int, *, newline: bool) -> Path:
    """A record, then ``mib`` MiB in one line (closed by a newline and followed by a record when
    ``newline``; else the file ends without one)."""
    with path.open("wb") as file:
        file.write(b'{"event":"train_step","step":1,"loss":0.5,"elapsed_s":0.1}\n')
        file.write(b'{"event":"blob","v":"' if newline else b"")
        for _ in range(mib):
            file.write(b"x" * (1 << 20))
        if newline:
            file.write(b'"}\n{"event":"train_step","step":2,"loss":0.4,"elapsed_s":0.2}\n')
    return path


def room(directory: Path, needed: int) -> None:
    free = shutil.disk_usage(directory).free
    if needed > free * 0.8:
        sys.exit(f"{directory}: {needed / 2**30:.1f} GiB needed, {free / 2**30:.1f} GiB free; choose --dir")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller runs, one round")
    parser.add_argument("--rounds", type=int, default=3, help="runs per measurement (default 3)")
    parser.add_argument("--dir", default=None, help="where to write the runs (default: a temporary one)")
    parser.add_argument(
        "--ranks",
        type=int,
        default=0,
        help="measure only R ranks x --rank-records (with --goals: R x 10,000)",
    )
    parser.add_argument("--rank-records", type=int, default=10_000, help="records per rank for --ranks")
    parser.add_argument("--goals", action="store_true", help="only the read-back goals, as a table")
    parser.add_argument("--check", action="store_true", help="with --goals: exit 1 when a goal is missed")
    args = parser.parse_args()
    args.dir = os.path.abspath(args.dir) if args.dir else None  # the readers run in another folder
    rounds = 1 if args.quick else args.rounds
    sizes = (10_000, 100_000) if args.quick else (10_000, 100_000, 1_000_000)
    mib = 64 if args.quick else 200
    grid = (
        [(args.ranks, args.rank_records)]
        if args.ranks
        else (
            [(10, 1_000), (100, 1_000), (1_000, 100)]
            if args.quick
            else [(10, 10_000), (100, 10_000), (1_000, 1_000)]
        )
    )
    print(
        f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    if args.goals:
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            rows = goals(Path(tmp), args.rounds, args.ranks or 1_000, 100_000 if args.quick else 1_000_000)
        print("\n| read-back goal | measured | target | |\n|---|---|---|---|")
        for name, measured, target, met in rows:
            print(f"| {name} | {measured} | {target} | {'pass' if met else 'MISS'} |")
        missed = [row[0] for row in rows if not row[3]]
        print(f"\nmissed: {'; '.join(missed)}" if missed else "\nevery read-back goal met")
        sys.exit(1 if missed and args.check else 0)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        if not args.ranks:
            print(f"1. summarize a file, as processes (median of {rounds})")
            for records in sizes:
                path = root / f"run{records}.jsonl"
                write_rank(path, records, None)
                print(f" {records:>9,} records, {path.stat().st_size / 2**20:.0f} MiB")
                polars = show("polars lazy query", script(POLARS_SUMMARY, str(path)), rounds)
                show("speedtronic summarize", speedtronic("summarize", str(path)), rounds, polars)
                alone = speedtronic("summarize", "--workers", "1", str(path))
                show("speedtronic summarize --workers 1", alone, rounds, polars)
            print(f"2. peak RSS on hostile inputs (the line limit is 16 MiB; {mib} MiB inputs)")
            inputs = {
                f"one {mib} MiB line": hostile(root / "line.jsonl", mib, newline=True),
                f"{mib} MiB without a newline": hostile(root / "nonl.jsonl", mib, newline=False),
                f"{sizes[-1]:,} records": root / f"run{sizes[-1]}.jsonl",
            }
            for name, path in inputs.items():
                print(f" {name}")
                show("summarize", speedtronic("summarize", str(path)), 1)
                show("plot", speedtronic("plot", str(path), "-o", str(root / "p.png")), 1)
                show("replay", script(REPLAY, str(path)), 1)
                show("read_frames", script(READ_FRAMES, str(path), "first"), 1)
                path.unlink()
        print("3. R ranks x N records, one file per rank (DuckDB reads the same files with a glob)")
        for ranks, records in grid:
            room(root, ranks * records * 330)
            run = write_ranks(root / f"r{ranks}x{records}", ranks, records)
            files = str(run / "*.jsonl")
            chosen = str(ranks // 2)
            size = sum(f.stat().st_size for f in run.iterdir()) / 2**20
            print(f" {ranks:,} ranks x {records:,} records = {ranks * records:,}, {size:,.0f} MiB")
            duck = show("duckdb aggregate, glob", script(DUCKDB_SUMMARY, files), rounds)
            per_rank = show("duckdb per rank, 256MB, 2 threads", script(DUCKDB_PER_RANK, files), rounds)
            summarize = speedtronic("summarize", str(run), "--rank", "all")
            took, peak, _ = show("speedtronic summarize --rank all", summarize, rounds, duck)
            against = f"{took / per_rank[0]:5.2f}x time, {peak / per_rank[1]:4.2f}x memory"
            print(f"  {'  the same against duckdb per rank':42} {against}", flush=True)
            duck = show("duckdb train_step of rank R, glob", script(DUCKDB_RANK, files, chosen), rounds)
            frames = script(READ_FRAMES, str(run), chosen)
            show("read_frames(events=[train_step], rank=R)", frames, rounds, duck)
            plot = speedtronic("plot", str(run), "--rank", chosen, "-o", str(root / "p.png"))
            show("speedtronic plot --rank R", plot, rounds, duck)
            three = ",".join(str(ranks // 2 + at) for at in range(3)) if ranks >= 3 else chosen
            duck = show("duckdb train_step of 3 ranks, glob", script(DUCKDB_RANK, files, three), rounds)
            frames = script(READ_FRAMES, str(run), three)
            show("read_frames(train_step, rank=[R,R+1,R+2])", frames, rounds, duck)
            plot = speedtronic("plot", str(run), "--rank", three, "-o", str(root / "p.png"))
            show("speedtronic plot --rank R,R+1,R+2", plot, rounds, duck)
            shutil.rmtree(run)


if __name__ == "__main__":
    main()
