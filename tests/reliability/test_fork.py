"""Fork: a child forked while another thread emits can log without deadlock; nothing is written twice."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.reliability.conftest import python, read_records

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="os.fork is POSIX only")

FORK_WHILE_EMITTING = """
import os, sys, threading, time
from speedtronic.profiling import MetricLogger

out = {out!r}

class Journal:
    def __init__(self):
        self.count = 0
    def on_event(self, event, payload):
        self.count += 1
        if self.count % 16 == 0:
            time.sleep(0.0002)  # hold the logger's lock for a while, often

hook = Journal()
logger = MetricLogger(file=out + "/t.log", json_file=out + "/m.jsonl", hooks=[hook])
stop = threading.Event()

def background():
    step = 0
    while not stop.is_set():
        logger.emit("train_step", {{"step": step, "who": "thread", "blob": "x" * (step % 5000)}})
        step += 1

thread = threading.Thread(target=background)
thread.start()
time.sleep(0.01)
children = []
for n in range({forks}):
    pid = os.fork()
    if pid == 0:
        __import__("signal").alarm(10)  # a deadlocked child dies (status 14) instead of hanging
        before = hook.count
        for i in range({child_events}):
            logger.emit("child_step", {{"step": i, "who": os.getpid()}})
        logger.flush()  # hooks run on the logger's thread, in the child too
        ok = hook.count - before == {child_events}
        logger.close()
        os._exit(0 if ok else 3)
    children.append(pid)
    time.sleep(0.002)
codes = [os.waitpid(pid, 0)[1] for pid in children]
stop.set()
thread.join()
logger.close()
print(json.dumps({{"codes": codes, "children": children}}))
""".replace("import os, sys", "import json, os, sys")


class TestForkWhileEmitting:
    def test_children_log_without_deadlock(self, tmp_path: Path) -> None:
        """20 forks while a thread emits: every child logs all its events, no line torn or doubled."""
        forks, child_events = 20, 50
        done = python(FORK_WHILE_EMITTING.format(out=str(tmp_path), forks=forks, child_events=child_events))
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["codes"] == [0] * forks  # 0: logged everything; SIGALRM (14) would mean a deadlock
        records = read_records(tmp_path / "m.jsonl")
        by_child = Counter(r["who"] for r in records if r["event"] == "child_step")
        assert by_child == dict.fromkeys(result["children"], child_events)
        for pid in result["children"]:
            assert [r["step"] for r in records if r["who"] == pid] == list(range(child_events))
        thread_steps = [r["step"] for r in records if r["who"] == "thread"]
        assert thread_steps == list(range(len(thread_steps)))  # none lost, none written twice
        text = (tmp_path / "t.log").read_bytes().split(b"\n")
        assert text.pop() == b""
        assert len(text) == len(records)


FORK_IN_A_HOOK = """
import json, os, sys
from speedtronic.profiling import MetricLogger

out = {out!r}
closed = []

class Forker:
    def on_event(self, event, payload):
        if event == "fork_here" and os.fork() == 0:
            os.environ["CHILD"] = "1"  # the child goes on from here: this hook returns, then emit
    def close(self):
        closed.append(os.getpid())

logger = MetricLogger(file=out + "/t.log", json_file=out + "/m.jsonl", hooks=[Forker()])
logger.emit("fork_here", {{}})
if os.environ.get("CHILD"):
    __import__("signal").alarm(10)
    logger.emit("child_step", {{"who": os.getpid()}})
    logger.close()
    os._exit(0 if logger.closed and closed == [os.getpid()] else 3)
_, status = os.wait()
logger.emit("parent_step", {{}})
logger.close()
print(json.dumps({{"child": os.waitstatus_to_exitcode(status), "closed": logger.closed}}))
"""


class TestForkInsideAHook:
    def test_the_child_of_a_hook_that_forks_logs_and_closes(self, tmp_path: Path) -> None:
        """A hook forks inside emit (a worker pool started with fork): in the child the emit ends,
        the child logs and close() closes its logger and hooks; the parent goes on as before."""
        done = python(FORK_IN_A_HOOK.format(out=str(tmp_path)))
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"child": 0, "closed": True}
        events = Counter(record["event"] for record in read_records(tmp_path / "m.jsonl"))
        assert events == {"fork_here": 1, "child_step": 1, "parent_step": 1}


STDOUT_PIPE = """
import os, sys
from speedtronic.profiling import MetricLogger

out = {out!r}

class Closer:
    def on_event(self, event, payload):
        pass
    def close(self):
        with open(out + "/closed-" + str(os.getpid()), "w"):
            pass

logger = MetricLogger(hooks=[Closer()])  # the text log on stdout, here a pipe: block-buffered
for step in range(10):
    logger.emit("parent_before", {{"step": step}})
pid = os.fork()
if pid == 0:
    logger.emit("child", {{"pid": os.getpid()}})
    sys.exit(0)  # a normal exit: flushes stdio and runs atexit in the child
os.waitpid(pid, 0)
logger.emit("parent_after", {{"child": pid}})
print("PARENT", os.getpid(), "CHILD", pid)
"""


class TestNothingWrittenTwice:
    def test_stdout_pipe_lines_appear_once(self, tmp_path: Path) -> None:
        """Text on a piped stdout, a fork, a normal exit in the child: each line appears exactly once."""
        done = python(STDOUT_PIPE.format(out=str(tmp_path)))
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        events = Counter(line.split(" | ")[2].split(" ")[0] for line in lines if " | INFO | " in line)
        assert events == {"parent_before": 10, "child": 1, "parent_after": 1}
        for step in range(10):
            assert sum(f"parent_before step={step} " in line for line in lines) == 1
        parent, child = (int(x) for x in lines[-1].split()[1::2])
        # The child's exit did not close the parent's logger (nor its hooks); the parent's did.
        assert sorted(p.name for p in tmp_path.glob("closed-*")) == [f"closed-{parent}"]
        assert child != parent


MANY_WRITERS = """
import os, random
from speedtronic.profiling import MetricLogger

out = {out!r}
pids = []
for n in range(4):
    pid = os.fork()
    if pid == 0:
        rng = random.Random(n)
        with MetricLogger(stream=open(os.devnull, "w"), json_file=out + "/m.jsonl") as logger:
            for step in range(300):
                blob = "x" * int(10 * 2000 ** rng.random())
                logger.emit("train_step", {{"writer": n, "step": step, "blob": blob}})
        os._exit(0)
    pids.append(pid)
print([os.waitpid(pid, 0)[1] for pid in pids])
"""


class TestProcessesSharingAFile:
    def test_four_processes_append_whole_lines(self, tmp_path: Path) -> None:
        """4 processes x 300 records of up to 20 KB into one file: every line whole, per-writer order."""
        done = python(MANY_WRITERS.format(out=str(tmp_path)))
        assert done.stdout.strip() == "[0, 0, 0, 0]", done.stderr
        records = read_records(tmp_path / "m.jsonl")
        assert len(records) == 1_200
        for n in range(4):
            assert [r["step"] for r in records if r["writer"] == n] == list(range(300))
