"""Watching a run's goals (issue 47), measured with real files and processes.

    python benchmarks/tail.py            # every goal, with the machine's load
    python benchmarks/tail.py --quick    # shorter runs (a smoke run)

1. Latency, ``emit`` to the watcher: a ``MetricLogger`` in a writer process emits a step every 20 ms
   carrying its wall time; a ``Follower`` here records when each arrives; p50/p95 with inotify and with
   polling (0.25 s, ``speedtronic tail``'s default). Goals: 250 ms (inotify), 1 s (polling).
2. 1,000 rank files at 10 records/s each (a writer process appending whole lines), one follower
   process reading them: its CPU (user + system seconds per wall second) and peak RSS. Goals: under
   half a core, under 100 MiB.
3. Stall lateness: a writer process logs steps then goes silent; ``speedtronic tail --stall-budget 2``
   follows it; the time from its last record to the stall alert on the watcher's stdout, less the
   budget. Goal: within the budget + 1 s.
4. Clean runs: ``speedtronic train`` runs with checkpoints and evals, each followed live by ``speedtronic
   tail`` with tight budgets (steps 2 s, checkpoint and eval 10 s): stall alerts raised. Goal: 0.
5. Rotations: a writer process emitting while its file is rotated (create and copytruncate,
   alternating) N times and the writer restarted 3 times: records the follower got against the lines
   the files hold: lost, duplicated, torn.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

from speedtronic.runs.follow import Follower, inotify_supported  # noqa: E402  (after the path)
from speedtronic.runs.reader import read_records  # noqa: E402

WRITER = """
import io, sys, time
from speedtronic.profiling import MetricLogger
log = MetricLogger(stream=io.StringIO(), json_file=sys.argv[1])
for step in range(1, int(sys.argv[2]) + 1):
    log.emit("train_step", {"step": step, "sent": time.time()})
    time.sleep(float(sys.argv[3]))
log.close()
"""

MANY = """
import os, sys, time
folder, files, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
fds = [os.open(os.path.join(folder, f"metrics.rank{r}.jsonl" if r else "metrics.jsonl"),
       os.O_WRONLY | os.O_CREAT | os.O_APPEND) for r in range(files)]
start, step = time.monotonic(), 0
while time.monotonic() - start < seconds:
    step += 1
    for rank, fd in enumerate(fds):
        os.write(fd, b'{"event":"train_step","step":%d,"rank":%d,"loss":1.0}\\n' % (step, rank))
    time.sleep(max(0.0, start + step / rate - time.monotonic()))
"""

FOLLOW = """
import os, resource, sys, time
from speedtronic.runs.follow import Follower
follower = Follower(sys.argv[1], poll=sys.argv[2] == "poll")
until = time.monotonic() + float(sys.argv[3])
count = 0
cpu0, wall0 = time.process_time(), time.monotonic()
while time.monotonic() < until:
    count += len(follower.read())
    follower.wait()
cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
print(count, cpu / wall, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f} on {os.cpu_count()} cores"


def latency(poll: bool, count: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "metrics.jsonl"
        path.touch()
        delays = []
        with Follower(folder, poll=poll) as follower:
            writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(count), "0.02"], env=ENV)
            while len(delays) < count:
                for record in follower.read():
                    delays.append(time.time() - record.payload["sent"])
                follower.wait(1.0)
            writer.wait()
    ordered = sorted(delays)
    return statistics.median(ordered), ordered[int(0.95 * len(ordered)) - 1]


def many(files: int, seconds: float, mode: str) -> tuple[int, float, float]:
    with tempfile.TemporaryDirectory() as folder:
        writer = subprocess.Popen(
            [sys.executable, "-c", MANY, folder, str(files), "10", str(seconds)], env=ENV
        )
        time.sleep(0.5)
        out = subprocess.run(
            [sys.executable, "-c", FOLLOW, folder, mode, str(seconds - 1)],
            env=ENV,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        writer.wait()
    return int(out[0]), float(out[1]), float(out[2])


def stall_lateness(budget: float = 2.0) -> float:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "metrics.jsonl"
        script = WRITER.replace("log.close()", "time.sleep(60)")
        writer = subprocess.Popen([sys.executable, "-c", script, str(path), "20", "0.01"], env=ENV)
        watcher = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "speedtronic",
                "tail",
                folder,
                "--json",
                "--no-state",
                "--stall-budget",
                str(budget),
                "--startup-budget",
                str(budget),
            ],
            env=ENV,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert watcher.stdout is not None
        try:
            for line in watcher.stdout:
                if '"alert"' in line:
                    arrived = time.time()
                    break
            last = max(r.payload["sent"] for r in read_records(path, rank="all") if r.event == "train_step")
        finally:
            watcher.kill()
            writer.kill()
            watcher.wait()
            writer.wait()
    return arrived - last - budget


def clean_runs(count: int) -> tuple[int, int]:
    """``count`` clean runs followed live: (runs that ended with exit 0 at both ends, stall alerts)."""
    ended = alerts = 0
    for seed in range(count):
        with tempfile.TemporaryDirectory() as folder:
            run = Path(folder) / "run"
            run.mkdir()
            command = [sys.executable, "-m", "speedtronic", "tail", str(run), "--json", "--no-state"]
            command += ["--stall-budget", "2", "--checkpoint-budget", "10", "--eval-budget", "10"]
            watcher = subprocess.Popen(command, env=ENV, stdout=subprocess.PIPE, text=True)
            config = Path(folder) / "config.yaml"  # JSON is YAML
            every = {"steps": 60, "checkpoint_every": 20, "eval_every": 20, "seed": seed, "device": "cpu"}
            logging = {"every_steps": 1, "hooks": []}
            config.write_text(json.dumps({"run_dir": str(run), "train": every, "logging": logging}))
            train = [sys.executable, "-m", "speedtronic", "train", "--no-progress", "--config", str(config)]
            trained = subprocess.run(
                train, env={**ENV, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, check=False
            )
            out, _ = watcher.communicate(timeout=300)
            alerts += sum('"rule":"stall"' in line for line in out.splitlines())
            ended += trained.returncode == 0 and watcher.returncode == 0
    return ended, alerts


def rotations(count: int) -> tuple[int, int, int, int]:
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder)
        path = run / "metrics.jsonl"
        got: list[int] = []
        rotated = 0
        with Follower(run, poll=not inotify_supported(run)) as follower:
            for _restart in range(4):  # the writer started, then restarted 3 times
                writer = subprocess.Popen(
                    [sys.executable, "-c", WRITER, str(path), str(count * 40), "0.0005"], env=ENV
                )
                while writer.poll() is None:
                    got += [r.payload["step"] for r in follower.read()]
                    if path.exists() and rotated < count * (_restart + 1) // 4:
                        rotated += 1
                        target = run / f"metrics.jsonl.{rotated}"
                        if rotated % 2:
                            os.rename(path, target)
                        else:
                            shutil.copyfile(path, target)
                            os.truncate(path, 0)
                    time.sleep(0.005)
            kept = [run / f"metrics.jsonl.{n}" for n in range(1, rotated + 1)] + [path]
            written = [r.payload["step"] for file in kept for r in read_records(file, rank="all")]
            deadline = time.monotonic() + 30
            while len(got) < len(written) and time.monotonic() < deadline:
                follower.wait(0.1)
                got += [r.payload["step"] for r in follower.read()]
            torn = follower.skipped.total_lines
    lost = max(0, len(written) - len(got))
    duplicated = max(0, len(got) - len(written))
    return rotated, lost if got[: len(written)] == written[: len(got)] else -1, duplicated, torn


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(f"tail benchmarks ({load()}, Python {sys.version.split()[0]})")
    count = 50 if args.quick else 200
    modes = [("polling", True)] + ([("inotify", False)] if inotify_supported(tempfile.gettempdir()) else [])
    for name, poll in modes:
        p50, p95 = latency(poll, count)
        goal = 1.0 if poll else 0.25
        print(
            f"  emit -> watcher ({name}): p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms "
            f"(goal {goal * 1000:.0f} ms)"
        )
    seconds = 5.0 if args.quick else 15.0
    for mode in [name for name, _ in modes]:
        records, cores, rss = many(1000, seconds, "poll" if mode == "polling" else "inotify")
        print(
            f"  1,000 rank files x 10 records/s ({mode}): {records:,} records, {cores:.2f} cores, "
            f"peak RSS {rss:.0f} MiB (goals: < 0.5 cores, < 100 MiB)"
        )
    late = stall_lateness()
    print(f"  stall alert: {late:.2f} s after its 2 s budget ran out (goal: within 1 s)")
    runs = 3 if args.quick else 20
    ended, stalls = clean_runs(runs)
    print(
        f"  {runs} clean train runs followed live (tight budgets): {ended} ended, "
        f"{stalls} stall alerts (goal 0)"
    )
    rotated, lost, duplicated, torn = rotations(20 if args.quick else 100)
    print(
        f"  {rotated} rotations, 3 writer restarts: lost {lost}, duplicated {duplicated}, torn {torn} "
        "(goal 0)"
    )
    print(f"  ({load()} after the run)")


if __name__ == "__main__":
    main()
