"""Writers SIGKILLed at random points: every complete line parses, at most the event in flight is lost."""

from __future__ import annotations

import json
import re
from pathlib import Path

from speedtronic.profiling import MetricLogger
from tests.reliability.conftest import complete_lines, python, strict_loads

REPETITIONS = 40

# A parent that imports speedtronic once, then forks writers and kills each at a random moment. After
# each emit returns, the writer reports its step on a pipe: the parent knows the last step that
# emit returned for when the kill landed.
KILLER = """
import os, random, signal, sys, time, json
from speedtronic.profiling import MetricLogger

out, reps = {out!r}, {reps}
rng = random.Random(1234)
last = []
for rep in range(reps):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        logger = MetricLogger(file=f"{{out}}/{{rep}}.log", json_file=f"{{out}}/{{rep}}.jsonl")
        sizes = random.Random(rep)
        step = 0
        while True:
            logger.emit("train_step", {{"step": step, "blob": "x" * int(10 * 2000 ** sizes.random())}})
            os.write(w, step.to_bytes(4, "little"))
            step += 1
    os.close(w)
    data = os.read(r, 4)  # the first emit has returned
    time.sleep(rng.uniform(0, 0.015))
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    end = len(data) - len(data) % 4
    last.append(int.from_bytes(data[end - 4:end], "little"))
print(json.dumps(last))
"""

TEXT_LINE = re.compile(
    rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| INFO \| train_step step=(\d+) blob=x+ elapsed_s=\S+"
)


class TestSigkill:
    def test_random_kills_leave_parsable_files(self, tmp_path: Path) -> None:
        """40 random SIGKILLs: complete lines parse, in order; every returned emit is on disk."""
        done = python(KILLER.format(out=str(tmp_path), reps=REPETITIONS), timeout=60)
        assert done.returncode == 0, done.stderr
        last_returned = json.loads(done.stdout)
        torn = 0
        for rep, last in enumerate(last_returned):
            lines, rest = complete_lines(tmp_path / f"{rep}.jsonl")
            steps = [strict_loads(line)["step"] for line in lines]
            assert steps == list(range(len(steps)))
            # emit(last) returned, so it is on disk; emit(last + 1) may have finished unreported.
            assert last + 1 <= len(steps) <= last + 2
            assert rest == b"" or len(steps) == last + 1  # a torn tail is only ever the event in flight
            torn += rest != b""
            text_lines, _text_rest = complete_lines(tmp_path / f"{rep}.log")
            text_steps = []
            for line in text_lines:
                match = TEXT_LINE.fullmatch(line)
                assert match, line[:100]
                text_steps.append(int(match[1]))
            assert text_steps == list(range(len(text_steps)))
            assert last + 1 <= len(text_steps) <= last + 2
        print(f"{torn} of {REPETITIONS} JSONL files were killed mid-write")

    def test_next_logger_starts_on_a_fresh_line_after_a_torn_tail(self, tmp_path: Path) -> None:
        """A file killed mid-write (torn tail) gets a newline first: the next record parses."""
        path = tmp_path / "m.jsonl"
        path.write_bytes(b'{"event":"a","step":0}\n{"event":"train_st')
        with MetricLogger(stream=None, file=tmp_path / "t.log", json_file=path) as logger:
            logger.emit("resumed", {"step": 1})
        lines, rest = complete_lines(path)
        assert rest == b""
        assert lines[1] == b'{"event":"train_st'
        assert strict_loads(lines[2])["event"] == "resumed"
