"""``speedtronic tail FOLDER``: a folder of runs watched run by run (its windows, ends, stalls, saved
state), each run's ranks its own."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.commands.test_tail import tail, text_so_far, wait_for_files

# Run names as `speedtronic train` makes them; the live one sorts first, so its files are read before
# the ended one's at each pass (a watcher going by rank number alone took the later train_end for both).
LIVE, DONE = "2026-12-07T09-43-11", "2026-12-07T10-02-40"


def write(path: Path, records: list[dict[str, Any]]) -> None:
    """Append ``records`` to the JSONL file at ``path`` (made with its directory if need be)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as file:
        file.write("".join(json.dumps(record) + "\n" for record in records))


def steps(numbers: range | list[int], loss: float = 1.0, **extra: Any) -> list[dict[str, Any]]:
    return [{"event": "train_step", "step": step, "loss": loss, **extra} for step in numbers]


def start(target: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"event": "train_start", "start_step": 0, "target_step": target, **extra}]


def two_runs(runs: Path) -> None:
    """A folder of two runs: LIVE at step 2 of 10, DONE ended at step 5."""
    write(runs / LIVE / "metrics.jsonl", start(10) + steps([1, 2]))
    write(runs / DONE / "metrics.jsonl", start(5) + steps(range(1, 6)) + [{"event": "train_end", "step": 5}])


def read_until(watcher: subprocess.Popen[str], wanted: Any) -> list[str]:
    """The watcher's lines up to and with the first for which ``wanted(line)`` holds (it must not end
    before: an end of the watch is a failure)."""
    assert watcher.stdout is not None
    seen = []
    while True:
        line = watcher.stdout.readline()
        assert line, (seen, watcher.stderr.read() if watcher.stderr else "")
        seen.append(line.rstrip("\n"))
        if wanted(line.rstrip("\n")):
            return seen


class TestEnd:
    def test_a_run_that_ended_does_not_end_the_watch(self, tmp_path: Path) -> None:
        """One run ends while another trains: tail says so under the ended run's name and goes on
        (it exited: rank 0 of the two runs was one rank); the other's steps come under its name; it
        exits 0 after the other's train_end, with an end line per run."""
        runs = tmp_path / "runs"
        two_runs(runs)
        watcher = tail(runs, "--no-state", "--every", "0.2")
        try:
            shown = read_until(watcher, lambda line: line.startswith(f"{DONE}  run ended"))
            assert f"{DONE}  run ended (train_end from rank 0)" in shown
            assert f"{DONE}  step 5/5  loss 1  lr -  eta -  ranks 1/1  alerts 0" in shown
            write(runs / LIVE / "metrics.jsonl", steps([3]))
            shown = read_until(watcher, lambda line: line.startswith(f"{LIVE}  step 3/10"))
            write(runs / LIVE / "metrics.jsonl", [{"event": "train_end", "step": 3, "status": "stopped"}])
            out, err = watcher.communicate(timeout=120)
        finally:
            watcher.kill()
            watcher.wait()
        assert watcher.returncode == 0, err
        assert out.splitlines()[-1] == f"{LIVE}  run ended (train_end from rank 0): stopped on rank 0"
        assert not any(line.startswith("step ") or line.startswith("run ended") for line in out.splitlines())

    def test_json_windows_and_ends_name_their_run(self, tmp_path: Path) -> None:
        """``--json``: each window and each end object of a folder's run carries its ``run``; the ended
        run's end comes as it ends, the other's when it ends later."""
        runs = tmp_path / "runs"
        two_runs(runs)
        watcher = tail(runs, "--json", "--no-state", "--every", "0.2")
        try:
            shown = read_until(watcher, lambda line: json.loads(line)["kind"] == "end")
            done = [json.loads(line) for line in shown]
            assert done[-1] == {"kind": "end", "run": DONE, "ranks": [0], "statuses": [None]}
            windows = {window["run"]: window for window in done[:-1]}  # LIVE's too, on a slow first pass
            assert (windows[DONE]["step"], windows[DONE]["target_step"]) == (5, 5)
            assert set(windows) <= {LIVE, DONE}
            write(runs / LIVE / "metrics.jsonl", steps([3]))
            shown = read_until(watcher, lambda line: json.loads(line).get("step") == 3)
            window = json.loads(shown[-1])
            assert (window["run"], window["target_step"], window["ranks_seen"]) == (LIVE, 10, 1)
            write(runs / LIVE / "metrics.jsonl", [{"event": "train_end", "step": 3, "status": "completed"}])
            out, err = watcher.communicate(timeout=120)
        finally:
            watcher.kill()
            watcher.wait()
        assert watcher.returncode == 0, err
        assert json.loads(out.splitlines()[-1]) == {
            "kind": "end",
            "run": LIVE,
            "ranks": [0],
            "statuses": ["completed"],
        }

    def test_ranks_applies_to_each_run(self, tmp_path: Path) -> None:
        """``--ranks 1`` of a folder of two-rank runs: each run's rank 1 is followed, and each run
        ends with its own."""
        runs = tmp_path / "runs"
        for name in (LIVE, DONE):
            for rank, file in ((0, "metrics.jsonl"), (1, "metrics.rank1.jsonl")):
                meta = {"rank": rank, "world_size": 2}
                write(
                    runs / name / file,
                    start(4, **meta) + steps([4], **meta) + [{"event": "train_end", "step": 4, **meta}],
                )
        watcher = tail(runs, "--json", "--no-state", "--ranks", "1")
        out, err = watcher.communicate(timeout=120)
        assert watcher.returncode == 0, err
        ends = [json.loads(line) for line in out.splitlines() if '"end"' in line]
        assert ends == [
            {"kind": "end", "run": LIVE, "ranks": [1], "statuses": [None]},
            {"kind": "end", "run": DONE, "ranks": [1], "statuses": [None]},
        ]


class TestStall:
    def test_a_stalled_run_is_alerted_while_another_steps(self, tmp_path: Path) -> None:
        """Run STUCK's rank 0 stops at step 3 while run BUSY's rank 0 keeps stepping: STUCK gets its
        stall alert, naming the run and the rank (BUSY's steps kept rank 0 looking alive)."""
        runs = tmp_path / "runs"
        stuck, busy = runs / "stuck" / "metrics.jsonl", runs / "busy" / "metrics.jsonl"
        write(stuck, start(100) + steps([1, 2, 3]))
        write(busy, start(1000))
        watcher = tail(
            runs, "--json", "--no-state", "--every", "1000", "--stall-budget", "1", "--startup-budget", "60"
        )
        lines: queue.Queue[str] = queue.Queue()
        assert watcher.stdout is not None
        reader = threading.Thread(
            target=lambda: [lines.put(line) for line in watcher.stdout or ()], daemon=True
        )
        reader.start()
        alert = None
        try:
            deadline = time.monotonic() + 120
            step = 100
            while alert is None:
                assert time.monotonic() < deadline, "no stall alert for run stuck"
                assert watcher.poll() is None, watcher.communicate()
                step += 1
                write(busy, steps([step]))  # BUSY steps on, a step each tenth of a second
                try:
                    record = json.loads(lines.get(timeout=0.1))
                except queue.Empty:
                    continue
                if record["kind"] == "alert" and record.get("run") == "stuck":
                    alert = record
        finally:
            watcher.kill()
            watcher.wait()
        assert (alert["rule"], alert["rank"], alert["step"]) == ("stall", 0, 3)
        assert alert["message"].startswith("stuck: rank 0: no train_step for ")
        assert alert["value"] > alert["threshold"] >= 1


class TestState:
    def test_a_restarted_watcher_knows_each_run(self, tmp_path: Path) -> None:
        """A watcher restarted on a folder goes on with each run's notes: the ended run stays ended, the
        live one is waited for, and each run's window counts its own alerts."""
        rules = tmp_path / "rules.yaml"
        rules.write_text("alerts:\n  - rule: threshold\n    key: loss\n    above: 5\n")
        runs = tmp_path / "runs"
        two_runs(runs)
        write(runs / LIVE / "metrics.jsonl", steps([3], loss=9.0))  # one alert of LIVE's
        first = tail(runs, "--json", "--alerts", rules, "--every", "1000")
        wait_for_files(runs / ".speedtronic-tail" / "alerts", 1, first)
        state = runs / ".speedtronic-tail" / "positions.json"
        deadline = time.monotonic() + 60
        while '"0": [false, 3' not in text_so_far(state):  # it has saved LIVE's rank 0 at step 3
            assert time.monotonic() < deadline, text_so_far(state)
            time.sleep(0.05)
        first.terminate()
        first.communicate(timeout=60)
        saved = json.loads(state.read_text())["run"]
        assert sorted(saved["runs"]) == [LIVE, DONE]
        assert saved["runs"][DONE]["ranks"]["0"][0] is True
        write(runs / DONE / "metrics.jsonl", steps([6], loss=9.0))  # DONE's late record: its own alert
        again = tail(runs, "--json", "--alerts", rules, "--every", "1000")
        read_until(again, lambda line: json.loads(line)["kind"] == "alert")
        write(runs / LIVE / "metrics.jsonl", [*steps([4]), {"event": "train_end", "step": 4}])
        out, err = again.communicate(timeout=120)
        assert again.returncode == 0, err
        windows = {
            json.loads(line)["run"]: json.loads(line) for line in out.splitlines() if '"window"' in line
        }
        assert (windows[LIVE]["step"], windows[LIVE]["alerts"]) == (4, 1)
        ends = [json.loads(line) for line in out.splitlines() if '"end"' in line]
        assert [end["run"] for end in ends][-1] == LIVE

    def test_notes_of_a_folder_watched_as_one_run_are_left_out(self, tmp_path: Path) -> None:
        """A folder's state saved by a watcher that went by rank number alone (its notes at the top of
        the state, every run's rank 0 as one): its positions hold, its notes (rank 0 ended: one run's
        train_end taken for both) are no run's, so the watcher waits for the live run's end."""
        runs = tmp_path / "runs"
        two_runs(runs)
        first = tail(runs, "--json", "--every", "1000")
        state = runs / ".speedtronic-tail" / "positions.json"
        read_until(
            first, lambda line: json.loads(line).get("run") == DONE and json.loads(line)["kind"] == "end"
        )
        first.terminate()
        first.communicate(timeout=60)
        saved = json.loads(state.read_text())
        saved["run"] = saved["run"]["runs"][DONE]  # as the watcher before runs were told apart saved it
        state.write_text(json.dumps(saved))
        again = tail(runs, "--json", "--every", "1000")
        write(runs / LIVE / "metrics.jsonl", [*steps([3]), {"event": "train_end", "step": 3}])
        out, err = again.communicate(timeout=120)
        assert again.returncode == 0, err
        ends = [json.loads(line) for line in out.splitlines() if '"end"' in line]
        assert ends == [{"kind": "end", "run": LIVE, "ranks": [0], "statuses": [None]}]
