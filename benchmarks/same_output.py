"""Do two checkouts of speedtronic write the same bytes for the same events? (timestamps aside)

    python benchmarks/same_output.py OTHER_CHECKOUT      # e.g. a `git worktree add /tmp/old <commit>`
    python benchmarks/same_output.py OTHER_CHECKOUT --fuzz 2000 [--seed 7]   # and random hostile events
    python benchmarks/same_output.py OTHER_CHECKOUT --fuzz 2000 --wide   # and records over the line cap

Runs one varied set of events (plain and hostile values, non-finite floats, reserved and non-string
keys, secrets, an oversized value, a failing hook, levels, a second rank) through ``MetricLogger``
with a fixed clock, once with this checkout and once with the other, each in its own interpreter,
then compares the text logs and JSONL files line by line. ``elapsed_s`` (a monotonic clock) and the
``traceback`` of a hook failure (source paths and line numbers) are the only things set aside.
Exits 1 when anything else differs.

``--fuzz N`` adds N events drawn from a seeded generator (the same in both interpreters): small and
wide payloads (up to 300 keys; with ``--wide`` also 1,000 and 3,000, over the line cap, which only a
checkout that writes records in parts can match; key sets repeating, keys built afresh; values of
moderate, small, subnormal or mixed sizes, some whole), hostile keys (reserved names,
``1``/``True``/``1.0``, control characters, lone surrogates, credential-looking text)
and values (non-finite and random-bit floats, huge ints, escapes, bidi controls, URLs with passwords,
``key=value`` secrets, nested and shared containers, bytes, sets, tuples, enums).

Deliberate changes are left out of the generator: a ``str`` subclass as a top-level key (written as its
string value since the str-enum redaction fix), the secrets that fix added (``PassWord``-style keys,
``api key: X`` text, ``--password X`` argument lists, an exception whose ``args`` hold a secret),
objects printed by the default ``repr`` (an address changes from run to run anyway), and floats inside
lists, tuples and dicts that the text line's float rule rounds (since the text line rounds them as it
rounds a float alone, ``[0.5, 0.6]``, not ``[0.5, 0.6000000238418579]``): a container holds only
floats its digits write whole.
"""

from __future__ import annotations

import argparse
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
import random
from enum import IntEnum


class Level(IntEnum):
    LOW = 1


def fuzzed(count, seed, wide):
    """``count`` (event, payload) pairs from a seeded generator: see this script's docstring."""
    rng = random.Random(seed)
    # no path keys ("path", "run_dir"): since 0.4 a path keeps names that look like keys (deliberate)
    words = ["loss", "lr", "step", "grad_norm", "acc", "note", "layer", "tokens_per_s", "api_key",
             "password", "db_pass", "token", "num_tokens", "timestamp", "event", "level", "_speedtronic",
             "elapsed_s", "rank", "world_size", "memory_bytes", "url", "cmd", "caf\u00e9", "a b", "x=y",
             "k\n", "\x1b[31m", "\u202e", "sk-abcdefgh1234567890", "|", ""]
    texts = ["plain", "with space", "quote\"inside", "back\\slash", "new\nline", "tab\there", "\x00nul",
             "\u2028sep", "\u202eevil", "\x1b[2J", "caf\u00e9", "\ud800lone", "password=hunter2",
             "postgres://u:pw@host/db", "Bearer abcdefgh12345678", "sk-abcdefgh1234567890xyz", "a://b:c/",
             "x" * rng.choice([0, 1, 100, 40000]), "=|= ", "1e5", "nan", "True"]
    floats = [0.0, -0.0, 0.1, 1e-7, 9999.5, 9999.4999, 10556.0, 1e20, -3.5, float("nan"), float("inf"),
              -float("inf"), 1234.5, 3e-4, 2.5e-300, 1.7976931348623157e308]
    whole = [f for f in floats if f not in (9999.5, 9999.4999, 1234.5)]

    def value(depth):
        c = rng.random()
        if c < 0.35:
            if depth > 0:  # in a container: a float its 4 significant digits write whole
                return rng.choice(whole)
            if rng.random() < 0.5:
                return rng.choice(floats)
            return rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-12, 12)
        if c < 0.45:
            return rng.choice([0, 1, -1, 2**63, 2**64, -2**63 - 1, 10**30, True, False, None, Level.LOW])
        if c < 0.7:
            return rng.choice(texts)
        if c < 0.75:
            return rng.choice([b"\x00\xff", {3, 1}, frozenset(), (1, "a"), bytearray(b"ab"), 1 + 2j])
        if depth > 2:
            return None
        if c < 0.88:
            return {key(): value(depth + 1) for _ in range(rng.randint(0, 4))}
        return [value(depth + 1) for _ in range(rng.randint(0, 4))]

    def key():
        c = rng.random()
        if c < 0.8:
            return rng.choice(words)
        if c < 0.9:
            return rng.choice([1, True, 1.0, None, 2.5, float("nan"), (1, 2), Level.LOW])
        return f"k{rng.randint(0, 9)}"

    widths = (16, 40, 120, 300) + ((1000, 3000) if wide else ())
    shapes = [[f"layer_{i}.weight_norm" for i in range(n)] for n in widths]
    names = ["train_step", "eval", "checkpoint", "custom", "shape_warning", "train_start", "hook_error"]
    shared = {"s": [1, 2]}
    for i in range(count):
        event = rng.choice(names)
        c = rng.random()
        if c < 0.4:  # a wide payload whose key set comes back; every other time its keys built afresh
            shape = rng.choice(shapes)
            names_now = shape if rng.random() < 0.5 else ["".join(list(k)) for k in shape]
            odd = rng.choice([0.0, 0.003, 0.1])  # per-layer values: often all moderate, or all small
            low, high = rng.choice([(-8, 8), (-2, 2), (-9, -4), (-320, -300)])
            payload = {"step": i, **{k: rng.choice([rng.random(), rng.choice(floats), 7, True, None])
                                     if rng.random() < odd else rng.choice([
                                         rng.random() * 10 ** rng.randint(low, high),
                                         -rng.random() * 10 ** rng.randint(low, high),
                                         float(rng.randint(0, 999))])
                                     for k in names_now}}
            if rng.random() < 0.1:
                payload[rng.choice(names_now)] = rng.choice(texts)
        else:
            payload = {key(): value(0) for _ in range(rng.randint(0, 12))}
            if rng.random() < 0.1:
                payload["shared_a"], payload["shared_b"] = shared, shared
        payload.setdefault("elapsed_s", 1.5)  # a fixed one: where a long value is cut depends on the line
        yield event, payload


warnings.simplefilter("ignore")
out = sys.argv[1]
events += list(fuzzed(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == 'wide'))
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
    # the record contract 3 (records written in parts): the note's "v" and its "part"/"parts"
    (re.compile(r'("_speedtronic":\{"v":)3(,.*),"part":0,"parts":1\}(,"timestamp":)'), r"\g<1>2\2}\3"),
    # ... whose 19 more bytes leave a value cut to fill the line 19 characters fewer
    (re.compile(r'"<truncated: ([^;"]*); first [0-9,]+ chars: (?:[^"\\]|\\.)*>"'), r'"<cut: \1>"'),
]


def normalised(path: Path) -> list[str]:
    lines = path.read_text("utf-8", "surrogateescape").splitlines()
    for pattern, replacement in _ASIDE:
        lines = [pattern.sub(replacement, line) for line in lines]
    return lines


def run(checkout: Path, out: Path, fuzz: int, seed: int, wide: bool) -> None:
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    subprocess.run(
        [sys.executable, "-c", EMIT, str(out), str(fuzz), str(seed), "wide" if wide else ""],
        cwd=checkout, env=env, check=True, timeout=900,
    )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the other checkout")
    parser.add_argument("--fuzz", type=int, default=0, help="random hostile events added (default 0)")
    parser.add_argument("--seed", type=int, default=1, help="the generator's seed (default 1)")
    parser.add_argument("--wide", action="store_true", help="fuzzed records of 1,000 and 3,000 keys too")
    args = parser.parse_args()
    ours, other = Path(__file__).resolve().parents[1], args.other.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        run(ours, Path(tmp) / "ours", args.fuzz, args.seed, args.wide)
        run(other, Path(tmp) / "other", args.fuzz, args.seed, args.wide)
        names = sorted(p.name for p in (Path(tmp) / "ours").iterdir())
        assert names == sorted(p.name for p in (Path(tmp) / "other").iterdir()), "different files"
        differ = 0
        for name in names:
            a, b = normalised(Path(tmp) / "ours" / name), normalised(Path(tmp) / "other" / name)
            same = a == b
            differ += not same
            print(f"{name:14s} {len(a):5d} lines  {'identical' if same else 'DIFFERENT'}")
            shown = 0
            for i, (x, y) in enumerate(zip(a, b, strict=False)):
                if x != y and shown < 5:
                    shown += 1
                    print(f"  line {i + 1}:\n    ours:  {x[:400]}\n    other: {y[:400]}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
