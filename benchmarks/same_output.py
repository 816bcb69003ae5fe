"""Do two checkouts of speedtronic write the same bytes for the same events? (timestamps aside)

    python benchmarks/same_output.py OTHER_CHECKOUT      # e.g. a `git worktree add /tmp/old <commit>`

Runs one varied set of events (plain and hostile values, non-finite floats, reserved and non-string
keys, secrets, an oversized value, a failing hook, levels, a second rank) through ``MetricLogger``
with a fixed clock, once with this checkout and once with the other, each in its own interpreter,
then compares the text logs and JSONL files line by line. ``elapsed_s`` (a monotonic clock) and the
``traceback`` of a hook failure (source paths and line numbers) are the only things set aside.
Exits 1 when anything else differs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

EMIT = r'''
import io, sys, warnings
from collections import OrderedDict
from enum import Enum
from speedtronic.distributed import RankInfo
from speedtronic.profiling import MetricLogger

class Color(Enum):
    RED = 1

def hook(event, payload):
    if event == "boom":
        raise RuntimeError("hook failed")

events = [
    ("train_start", {"config": {"lr": 3e-4, "api_key": "sk-abcdefghijklmnopqrstuvwx"}, "steps": 10}),
    ("train_step", {"step": 1, "loss": 1.2345678, "lr": 3e-4, "grad_norm": float("nan")}),
    ("train_step", {"step": 2, "loss": float("inf"), "tokens": [1, float("-inf")], 1: "int", "1": "str"}),
    ("train_step", {"step": 3, "timestamp": "t", "event": "e", "_speedtronic": {"origin": "speedtronic"}}),
    ("checkpoint", {"step": 3, "path": "/tmp/x y.pt", "bytes": b"\x00\xff", "set": {3}, "big": 2**70}),
    ("shape_warning", {"layer": "fc\n| ERROR | fake", "size": 17, "caf\u00e9": "\u2028"}),
    ("eval", {"step": 3, "loss": 0.5, "nested": {"a": [1, {"b": float("nan")}]}, Color.RED: "enum key"}),
    ("boom", {"x": "y" * 40000, "elapsed_s": 1.5}),  # its own elapsed_s: the cut depends on the line
    ("train_end", {"status": "completed", "password": "hunter2", "url": "postgres://u:pw@h/db"}),
    ("custom", OrderedDict(b=1, a=2)),
]
warnings.simplefilter("ignore")
out = sys.argv[1]
for name, options in (("one", {}), ("ranks", {"rank": RankInfo(rank=1, world_size=2), "lead_rank": None})):
    text = io.StringIO()
    logger = MetricLogger(stream=text, json_file=f"{out}/{name}.jsonl", hooks=[hook],
                          clock=lambda: 1767268800.25, **options)
    for event, payload in events:
        logger.emit(event, payload)
    logger.emit("debugged", {"x": 1}, level="debug")
    logger.emit("warned", {"x": 1}, level="warning")
    logger.close()
    with open(f"{out}/{name}.log", "w", encoding="utf-8") as log:
        log.write(text.getvalue())
'''

_ASIDE = [
    (re.compile(r'("elapsed_s":)[-0-9.e]+'), r"\1X"),
    (re.compile(r"(elapsed_s=)[-0-9.e]+"), r"\1X"),
    (re.compile(r'("traceback":)"(?:[^"\\]|\\.)*"'), r'\1"T"'),
    (re.compile(r'(traceback=)"(?:[^"\\]|\\.)*"'), r'\1"T"'),
]


def normalised(path: Path) -> list[str]:
    lines = path.read_text("utf-8", "surrogateescape").splitlines()
    for pattern, replacement in _ASIDE:
        lines = [pattern.sub(replacement, line) for line in lines]
    return lines


def run(checkout: Path, out: Path) -> None:
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    subprocess.run([sys.executable, "-c", EMIT, str(out)], cwd=checkout, env=env, check=True, timeout=300)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    ours, other = Path(__file__).resolve().parents[1], Path(sys.argv[1]).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        run(ours, Path(tmp) / "ours")
        run(other, Path(tmp) / "other")
        names = sorted(p.name for p in (Path(tmp) / "ours").iterdir())
        assert names == sorted(p.name for p in (Path(tmp) / "other").iterdir()), "different files"
        differ = 0
        for name in names:
            a, b = normalised(Path(tmp) / "ours" / name), normalised(Path(tmp) / "other" / name)
            same = a == b
            differ += not same
            print(f"{name:14s} {len(a):3d} lines  {'identical' if same else 'DIFFERENT'}")
            for i, (x, y) in enumerate(zip(a, b, strict=False)):
                if x != y:
                    print(f"  line {i + 1}:\n    ours:  {x[:400]}\n    other: {y[:400]}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
