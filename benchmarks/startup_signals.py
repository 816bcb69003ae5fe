"""Ctrl-C and SIGTERM at each moment of the CLI's start: what the user sees (prints a table; asserts nothing).

    .venv/bin/python benchmarks/startup_signals.py [--rounds 5] [--step 0.01] [--until 0.4] [--baseline DIR]

For `speedtronic summarize <run>` and `speedtronic train --help`, each signal is sent at increasing
delays after the process is spawned, several rounds each, and every outcome is classified:

- line: one `speedtronic: ...` line on stderr and exit code 128 + the signal (the documented stop);
- died: ended by the signal itself with nothing on stderr (before Python ran speedtronic's code);
- done: the command had finished when the signal came (exit 0);
- traceback / crash / other: what must not happen (a `Traceback` on stderr, SIGSEGV or SIGABRT...).

With ``--baseline DIR`` (another checkout, e.g. ``git archive main | tar -x -C DIR``), every delay is
also sent to that checkout's CLI, interleaved with this one's, and both are tabled side by side.

It also measures the uncovered window directly: the time from spawn until speedtronic's handler is in
(SIGTERM's bit in `SigCgt` of /proc/<pid>/status, sampled in a busy loop; both handlers go in together).
Before that moment, SIGTERM ends the process by the signal (allowed) and SIGINT is Python's own
(a `KeyboardInterrupt` traceback: the window documented in docs/guarantees.md). Say the load average
with the figures: start-up time grows with it.
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}


def make_run(directory: Path) -> Path:
    """A small finished run for `summarize` to read."""
    from speedtronic.profiling import MetricLogger

    run = directory / "run"
    with MetricLogger(json_file=run / "metrics.jsonl", stream=io.StringIO()) as logger:
        logger.emit("train_start", {"steps": 50})
        for step in range(1, 51):
            logger.emit("train_step", {"step": step, "loss": 1.0 / step, "tokens_per_s": 1000.0})
        logger.emit("train_end", {"step": 50, "status": "completed"})
    return run


def spawn(command: list[str], root: Path = ROOT) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "speedtronic", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as from a terminal
    )


def classify(signum: int, code: int, stderr: str) -> str:
    if "Traceback" in stderr:
        return "traceback"
    lines = stderr.strip().splitlines()
    if code == 128 + signum and len(lines) == 1 and lines[0].startswith("speedtronic: "):
        return "line"
    if code == -signum and not lines:
        return "died"
    if code == 0:
        return "done"
    return "crash" if code < 0 else "other"


def outcome(command: list[str], signum: int, delay_s: float, root: Path) -> str:
    process = spawn(command, root)
    time.sleep(delay_s)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    return classify(signum, process.returncode, stderr)


def handler_in_s(command: list[str]) -> float | None:
    """Seconds from spawn until speedtronic's SIGTERM handler shows in /proc; None if never seen."""
    started = time.perf_counter()
    process = spawn(command)
    status = Path(f"/proc/{process.pid}/status")
    seen = None
    try:
        while process.poll() is None:
            try:
                text = status.read_text()
            except OSError:
                break
            caught = next((line for line in text.splitlines() if line.startswith("SigCgt:")), "SigCgt: 0")
            if int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)):
                seen = time.perf_counter() - started
                break
    finally:
        process.kill()
        process.communicate()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--step", type=float, default=0.01)
    parser.add_argument("--until", type=float, default=0.4)
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with, interleaved")
    options = parser.parse_args()
    delays = [round(n * options.step, 4) for n in range(int(options.until / options.step) + 1)]
    roots = {"this": ROOT, **({"baseline": options.baseline.resolve()} if options.baseline else {})}
    bad_kinds = {"traceback", "crash", "other"}
    with tempfile.TemporaryDirectory() as tmp:
        run = make_run(Path(tmp))
        commands = {"summarize": ["summarize", str(run)], "train --help": ["train", "--help"]}
        print(f"load average: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
        for name, command in commands.items():
            times = [t for t in (handler_in_s(command) for _ in range(options.rounds * 2)) if t is not None]
            if times:
                print(
                    f"\n{name}: speedtronic's handlers in after {statistics.median(times) * 1000:.0f} ms "
                    f"(median of {len(times)}; min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f})"
                )
            for label, signum in SIGNALS.items():
                counts = {tree: {delay: Counter[str]() for delay in delays} for tree in roots}
                for _ in range(options.rounds):  # interleaved: every delay and checkout once per round
                    for delay in delays:
                        for tree, root in roots.items():
                            counts[tree][delay][outcome(command, signum, delay, root)] += 1
                sides = "   [this | baseline]" if len(roots) > 1 else ""
                print(f"  {label}: outcomes by delay (s){sides}")
                for delay in delays:
                    seen = [", ".join(f"{k} {n}" for k, n in sorted(counts[t][delay].items())) for t in roots]
                    print(f"    {delay:5.2f}  " + " | ".join(seen))
                for tree in roots:
                    bad = [d for d in delays if bad_kinds & set(counts[tree][d])]
                    total = sum(counts[tree][d][kind] for d in delays for kind in bad_kinds)
                    window = f"{min(bad):.2f}-{max(bad):.2f} s" if bad else "none seen"
                    print(
                        f"  {label} ({tree}): a traceback or crash in {total} of "
                        f"{len(delays) * options.rounds} sends, at delays {window}"
                    )


if __name__ == "__main__":
    main()
