"""``speedtronic tail``: real runs followed by a real watcher process, stalled processes, a pty."""

from __future__ import annotations

import datetime as dt
import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import WEBHOOK_TOKEN, WebhookReceiver, user_package
from tests.torch_run import ROOT, train_cli

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def tail(*args: str | Path, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "speedtronic", "tail", *map(str, args)],
        **{"env": ENV, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **kwargs},
    )


def write_config(tmp_path: Path, config: dict[str, Any]) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_finished_run_json_exits_0(tmp_path: Path, config: dict[str, Any], run_dir: Path) -> None:
    """A finished run: its windows as JSON lines, then the end, exit 0."""
    assert train_cli("--config", write_config(tmp_path, config), cwd=tmp_path).returncode == 0
    watcher = tail(run_dir, "--json", "--no-state")
    out, err = watcher.communicate(timeout=120)
    assert watcher.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[-1] == {"kind": "end", "ranks": [0], "statuses": ["completed"]}
    windows = [line for line in lines if line["kind"] == "window"]
    assert windows
    assert windows[-1]["target_step"] == 20
    assert set(windows[-1]) >= {"step", "loss", "lr", "rates", "eta_s", "ranks_reporting", "alerts"}


def test_follows_a_live_run_to_its_end(tmp_path: Path, config: dict[str, Any], run_dir: Path) -> None:
    """Started before the run, the watcher follows it as written and exits 0 at its train_end."""
    run_dir.mkdir()
    watcher = tail(run_dir, "--every", "0.2")
    assert train_cli("--config", write_config(tmp_path, config), cwd=tmp_path).returncode == 0
    out, err = watcher.communicate(timeout=120)
    assert watcher.returncode == 0, err
    assert "step 20/20" in out
    assert out.splitlines()[-1] == "run ended (train_end from rank 0)"


STALLER = """
import ctypes, io, os, signal, sys, time
from speedtronic.profiling import MetricLogger
from speedtronic.stacks import register_stack_dump
run = sys.argv[1]
notes = register_stack_dump(run, 0).notes
log = MetricLogger(stream=io.StringIO(), json_file=os.path.join(run, "metrics.jsonl"))
log.emit("train_start", {"start_step": 0, "target_step": 100, **notes})
for step in range(1, 4):
    log.emit("train_step", {"step": step, "loss": 1.0})
how = sys.argv[2]
if how == "stop":
    os.kill(os.getpid(), signal.SIGSTOP)
elif how == "gil":  # a blocking C call that holds the GIL (PyDLL does not release it)
    ctypes.PyDLL(None).sleep(600)
else:
    def spin():
        while True:
            pass
    spin()
"""


@pytest.mark.parametrize("how", ["loop", "gil", "stop"])
def test_stall_alert_with_stacks(tmp_path: Path, how: str) -> None:
    """A rank that stops stepping (spinning in Python, blocked in C holding the GIL, SIGSTOPped) gets
    one stall alert naming the rank, its last step and the silence; its stacks are in the run directory
    (none for a stopped process, and the alert says why). Ctrl-C ends the watcher with 130."""
    run = tmp_path / "run"
    run.mkdir()
    script = tmp_path / "staller.py"
    script.write_text(STALLER)
    staller = subprocess.Popen([sys.executable, str(script), str(run), how], env=ENV)
    try:
        # The watcher starts once the staller has written its last step: it takes the four records at
        # one read, so the only silence it can measure is the stall after step 3 (a staller paused for
        # over a second between two of its lines on a loaded machine is no stall to alert on).
        deadline = time.monotonic() + 120
        while text_so_far(run / "metrics.jsonl").count("\n") < 4:  # train_start and steps 1-3, whole
            assert time.monotonic() < deadline, "the staller never wrote step 3"
            assert staller.poll() is None, "the staller ended"
            time.sleep(0.01)
        watcher = tail(run, "--json", "--dump-stacks", "--stall-budget", "1", "--startup-budget", "1")
        assert watcher.stdout is not None
        deadline = time.monotonic() + 120
        alert = None
        while alert is None:
            assert time.monotonic() < deadline
            line = watcher.stdout.readline()
            assert line, watcher.stderr.read() if watcher.stderr else ""
            record = json.loads(line)
            if record["kind"] == "alert":
                alert = record
        assert alert["rule"] == "stall"
        assert alert["rank"] == 0
        assert alert["step"] == 3
        assert alert["value"] > alert["threshold"] >= 1
        watcher.send_signal(signal.SIGINT)
        assert watcher.wait(timeout=60) == 130
        if how == "stop":
            assert alert["stacks"] is None
            assert "stopped" in alert["message"]
        else:
            stacks = Path(alert["stacks"])
            assert stacks.parent == run / "stacks"
            frame = "spin" if how == "loop" else "<module>"
            deadline = time.monotonic() + 60  # the dump is written a line at a time: wait for the frame
            while f" in {frame}\n" not in stacks.read_text():
                assert time.monotonic() < deadline, stacks.read_text()
                time.sleep(0.1)
    finally:
        staller.kill()
        staller.wait()


def text_so_far(path: Path) -> str:
    """The file's text so far; empty while it does not exist."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def finished_run(run: Path) -> None:
    """A run whose loss crosses a threshold twice (two alerts), ended."""
    run.mkdir()
    lines = [{"event": "train_start", "start_step": 0, "target_step": 300}]
    lines += [
        {"event": "train_step", "step": s, "loss": 9.0 if s in (10, 250) else 1.0} for s in range(1, 301)
    ]
    lines.append({"event": "train_end", "step": 300})
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_alerts_sent_once_by_restarted_and_concurrent_watchers(tmp_path: Path) -> None:
    """--alerts rules run out of process; a restarted watcher, and two watchers at once, send each
    alert once (the state in the run directory)."""
    rules = tmp_path / "rules.yaml"
    rules.write_text("alerts:\n  - rule: threshold\n    key: loss\n    above: 5\n")
    run = tmp_path / "run"
    finished_run(run)
    first, second = tail(run, "--json", "--alerts", rules), tail(run, "--json", "--alerts", rules)
    outs = [first.communicate(timeout=120)[0], second.communicate(timeout=120)[0]]
    assert first.returncode == second.returncode == 0
    alerts = [json.loads(line) for out in outs for line in out.splitlines() if '"alert"' in line]
    assert sorted(alert["step"] for alert in alerts) == [10, 250]
    again = tail(run, "--json", "--alerts", rules)
    out, _ = again.communicate(timeout=120)
    assert again.returncode == 0
    assert '"alert"' not in out
    assert '"window"' not in out  # it went on where the last watcher stopped: nothing new to show
    fresh = tail(run, "--json", "--alerts", rules, "--no-state")
    out, _ = fresh.communicate(timeout=120)
    assert [json.loads(line)["step"] for line in out.splitlines() if '"alert"' in line] == [10, 250]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "yesterday"], "--since"),
        (["--ranks", "a,b"], "--ranks"),
        (["--stall-budget", "0"], "step_min_s"),
        (["--hook", "nosuchhook"], "nosuchhook"),
        (["--interval", "0"], "--interval: expected a finite number of seconds > 0, got 0.0"),
        (["--interval", "inf"], "--interval: expected a finite number of seconds > 0, got inf"),
        (["--every", "inf"], "--every: expected a finite number of seconds > 0, got inf"),
    ],
)
def test_bad_arguments_one_line_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    """A user's mistake: one line on stderr naming it, exit 2."""
    run = tmp_path / "run"
    finished_run(run)
    watcher = tail(run, *args)
    _out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 2
    assert len(err.strip().splitlines()) == 1
    assert message in err


def test_missing_run_exit_2(tmp_path: Path) -> None:
    """A run that does not exist: one line naming it, exit 2."""
    watcher = tail(tmp_path / "nope")
    _, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 2
    assert "nope" in err


@pytest.mark.parametrize(
    ("name", "content"),
    [("README.md", b"# my run\n\nsee metrics.jsonl\n"), ("model.pt", b"PK\x03\x04\x00\x00\x08\x00")],
    ids=["text", "binary"],
)
def test_a_file_that_is_no_run_exit_2(tmp_path: Path, name: str, content: bytes) -> None:
    """A file whose first line is not a JSON object (a README, a checkpoint): one line, as summarize
    says it, exit 2 (it was followed forever, every line skipped, nothing said)."""
    (tmp_path / name).write_bytes(content)
    watcher = tail(tmp_path / name, "--no-state")
    try:
        _, err = watcher.communicate(timeout=60)
    finally:
        if watcher.poll() is None:  # still following the file: the failure, and no process left behind
            watcher.kill()
            watcher.communicate()
    assert watcher.returncode == 2
    why = "not a speedtronic JSONL file (line 1 is not a JSON object)"
    assert err.splitlines() == [f"speedtronic: error: tail: {tmp_path / name}: {why}"]


def test_live_view_on_a_terminal(tmp_path: Path) -> None:
    """On a terminal (a pty) the live view shows the window lines and the end."""
    run = tmp_path / "run"
    finished_run(run)
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(sys.executable, [sys.executable, "-m", "speedtronic", "tail", str(run), "--no-state"], ENV)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    text = out.decode(errors="replace")
    assert "step 300/300" in text
    assert "run ended" in text


def test_hook_gets_alerts(tmp_path: Path) -> None:
    """--hook: alerts go to a registered hook type, made as replay --hook makes it (TensorBoard here)."""
    rules = tmp_path / "rules.yaml"
    rules.write_text("alerts:\n  - rule: threshold\n    key: loss\n    above: 5\n")
    run = tmp_path / "run"
    finished_run(run)
    watcher = tail(run, "--alerts", rules, "--hook", f"tensorboard:log_dir={tmp_path / 'tb'}", "--no-state")
    _, err = watcher.communicate(timeout=120)
    assert watcher.returncode == 0, err
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("alert/value")] == [(10, 9.0), (250, 9.0)]


def test_hook_that_raises_on_an_alert_exit_1(tmp_path: Path) -> None:
    """A --hook that raises as an alert is sent: the watcher goes on (the failure warned about and
    counted), then says on stderr how many alerts the hook failed on, no traceback, and exits 1, as a
    hook that fails at close does (it exited 0: alerts lost without a failing exit code)."""
    user_package(tmp_path / "lib", "failing_hooks", (
        "class Down:\n"
        "    def on_event(self, event, payload):\n"
        "        raise RuntimeError('tracker down')\n"
    ))  # fmt: skip
    rules = tmp_path / "rules.yaml"
    rules.write_text("alerts:\n  - rule: threshold\n    key: loss\n    above: 5\n")
    run = tmp_path / "run"
    finished_run(run)
    env = {**ENV, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path / 'lib'}"}
    watcher = tail(run, "--alerts", rules, "--hook", "failing_hooks:Down", "--no-state", "--json", env=env)
    out, err = watcher.communicate(timeout=120)
    assert watcher.returncode == 1, err
    assert [json.loads(line)["step"] for line in out.splitlines() if '"alert"' in line] == [10, 250]
    assert "Traceback" not in err
    assert err.splitlines()[-1] == "speedtronic: tail: --hook: Down failed on 2 alert(s)"
    # the failure's warning is speedtronic's own line, not Python's (`<frozen runpy>:88: HookFailureWarning`)
    assert err.splitlines()[0] == (
        "speedtronic: warning: hook 'Down' failed (1 so far) during 'alert': RuntimeError: tracker down"
    )
    assert all(line.startswith("speedtronic: ") for line in err.splitlines()), err


WEBHOOK = "speedtronic.integrations.webhook:WebhookHook"
"""The webhook hook type as ``package.module:factory``: its ``webhook`` entry point is in pyproject.toml,
which an environment installed before it was added does not list (``--hook webhook`` works once
reinstalled)."""


def test_webhook_gets_alerts_once_across_a_restart(tmp_path: Path) -> None:
    """--alerts with a webhook --hook: a real HTTP server gets each alert once as JSON ({text, record},
    text the Slack line), the URL taken from the environment; a restarted watcher posts none again."""
    rules = tmp_path / "rules.yaml"
    rules.write_text("alerts:\n  - rule: threshold\n    key: loss\n    above: 5\n")
    run = tmp_path / "run"
    finished_run(run)
    server = WebhookReceiver.start("ok")
    try:
        hook = f"{WEBHOOK}:url_env=ST_TEST_WEBHOOK,name=run-7,timeout_s=60,close_timeout_s=120"
        env = {**ENV, "ST_TEST_WEBHOOK": server.url}
        watcher = tail(run, "--json", "--alerts", rules, "--hook", hook, env=env)
        out, err = watcher.communicate(timeout=180)
        assert watcher.returncode == 0, err
        assert [json.loads(line)["step"] for line in out.splitlines() if '"alert"' in line] == [10, 250]
        assert [request["path"] for request in server.requests] == [f"/services/{WEBHOOK_TOKEN}"] * 2
        bodies = [request["body"] for request in server.requests]
        assert [body["text"] for body in bodies] == [
            "[run-7] WARNING threshold: loss 9 above 5 at step 10",
            "[run-7] WARNING threshold: loss 9 above 5 at step 250",
        ]
        records = [body["record"] for body in bodies]
        assert [(r["event"], r["rule"], r["severity"], r["key"], r["step"]) for r in records] == [
            ("alert", "threshold", "warning", "loss", 10),
            ("alert", "threshold", "warning", "loss", 250),
        ]
        assert WEBHOOK_TOKEN not in err
        again = tail(run, "--json", "--alerts", rules, "--hook", hook, env=env)
        _, err = again.communicate(timeout=180)
        assert again.returncode == 0, err
        assert len(server.requests) == 2  # the state file: nothing posted again
    finally:
        server.stop()


def test_webhook_that_fails_is_one_line_exit_1(tmp_path: Path) -> None:
    """A webhook answering 500 every time: tail follows the run to its end, then says on one line of
    stderr that the alert was not posted (no traceback, no token) and exits 1. One alert: with two,
    the first post's failure can surface as the second is sent (a warning line of its own, as
    test_hook_that_raises_on_an_alert_exit_1 has) or only at close, whichever the post's answer
    beats."""
    rules = tmp_path / "rules.yaml"
    rules.write_text("alerts:\n  - rule: threshold\n    key: loss\n    above: 5\n")
    run = tmp_path / "run"
    run.mkdir()
    lines = [{"event": "train_start", "start_step": 0, "target_step": 30}]
    lines += [{"event": "train_step", "step": s, "loss": 9.0 if s == 10 else 1.0} for s in range(1, 31)]
    lines.append({"event": "train_end", "step": 30})
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    server = WebhookReceiver.start("500")
    try:
        hook = f"{WEBHOOK}:url_env=ST_TEST_WEBHOOK,retries=0,timeout_s=60,close_timeout_s=120"
        watcher = tail(
            run, "--alerts", rules, "--hook", hook, "--no-state", env={**ENV, "ST_TEST_WEBHOOK": server.url}
        )
        _, err = watcher.communicate(timeout=180)
        assert watcher.returncode == 1, err
        assert len(err.strip().splitlines()) == 1, err
        assert "WebhookHook" in err
        assert "HTTP Error 500" in err
        assert "1 failed" in err
        assert WEBHOOK_TOKEN not in err
        assert len(server.requests) == 1  # tried once (retries=0)
    finally:
        server.stop()


def test_since_now_and_ranks(tmp_path: Path) -> None:
    """--since now shows nothing already written (and still ends with the run); --ranks keeps only the
    ranks named."""
    run = tmp_path / "run"
    finished_run(run)
    (run / "metrics.rank1.jsonl").write_text(
        "".join(
            json.dumps(line) + "\n"
            for line in [
                {"event": "train_start", "rank": 1, "world_size": 2},
                {"event": "train_step", "step": 7, "rank": 1, "world_size": 2, "loss": 1.0},
                {"event": "train_end", "step": 7, "rank": 1, "world_size": 2},
            ]
        )
    )
    now = tail(run, "--json", "--no-state", "--since", "now")
    out, _ = now.communicate(timeout=120)
    assert now.returncode == 0
    assert [json.loads(line)["kind"] for line in out.splitlines()] == ["end"]
    one = tail(run, "--json", "--no-state", "--ranks", "1")
    out, _ = one.communicate(timeout=120)
    assert one.returncode == 0
    windows = [json.loads(line) for line in out.splitlines() if '"window"' in line]
    assert [window["step"] for window in windows] == [7]
    assert json.loads(out.splitlines()[-1]) == {"kind": "end", "ranks": [1], "statuses": [None]}


def test_recorded_alerts_are_shown(tmp_path: Path) -> None:
    """The run's own alert records (its logger's rules) are shown and counted, marked recorded."""
    run = tmp_path / "run"
    finished_run(run)
    with (run / "metrics.jsonl").open("r+") as file:
        lines = file.readlines()
        alert = {"event": "alert", "rule": "spike", "severity": "warning", "key": "loss", "step": 10}
        alert |= {"value": 9.0, "threshold": 3.0, "message": "loss 9 above 3 at step 10"}
        lines.insert(11, json.dumps(alert) + "\n")
        file.seek(0)
        file.writelines(lines)
    watcher = tail(run, "--json", "--no-state", "--every", "1000")
    out, _ = watcher.communicate(timeout=120)
    assert watcher.returncode == 0
    [shown] = [json.loads(line) for line in out.splitlines() if '"alert"' in line]
    assert shown["rule"] == "spike"
    assert shown["recorded"] is True
    [window] = [json.loads(line) for line in out.splitlines() if '"window"' in line]
    assert window["alerts"] == 1


def test_an_alert_raised_by_the_run_and_the_watcher_is_shown_once(tmp_path: Path) -> None:
    """A run whose logger's rules recorded a NaN's alert, watched with the same rule (--alerts): one
    alert, counted once (was: the watcher's and the run's record of it, two lines and ``alerts 2``);
    the run's record of an alert the watcher's rules don't raise is still shown."""
    from speedtronic.alerts import NonFinite, Threshold
    from speedtronic.profiling import MetricLogger

    run = tmp_path / "run"
    with MetricLogger(
        json_file=run / "metrics.jsonl", alerts=[NonFinite(), Threshold("lr", above=1.0)]
    ) as log:
        log.emit("train_start", {"target_step": 3})
        for step, loss, lr in ((1, 1.0, 0.1), (2, float("nan"), 0.1), (3, 1.0, 2.0)):
            log.emit("train_step", {"step": step, "loss": loss, "lr": lr})
        log.emit("train_end", {"step": 3, "status": "completed"})
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"alerts": [{"rule": "non_finite"}]}))
    watcher = tail(run, "--json", "--no-state", "--every", "1000", "--alerts", rules)
    out, err = watcher.communicate(timeout=120)
    assert watcher.returncode == 0, err
    shown = [json.loads(line) for line in out.splitlines() if '"kind":"alert"' in line]
    assert [(alert["rule"], alert["step"], "recorded" in alert) for alert in shown] == [
        ("non_finite", 2, False),
        ("threshold", 3, True),
    ]
    [window] = [json.loads(line) for line in out.splitlines() if '"window"' in line]
    assert window["alerts"] == 2


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only directories")
def test_read_only_run_keeps_no_state(tmp_path: Path) -> None:
    """A run directory the watcher can't write: it follows the run anyway, saying once that it keeps
    no state."""
    run = tmp_path / "run"
    finished_run(run)
    run.chmod(0o555)
    try:
        watcher = tail(run, "--json")
        out, err = watcher.communicate(timeout=120)
    finally:
        run.chmod(0o755)
    assert watcher.returncode == 0
    assert json.loads(out.splitlines()[-1])["kind"] == "end"
    assert err.count("keeping no state") == 1


def next_alert(watcher: subprocess.Popen[str]) -> dict[str, Any]:
    """The watcher's next ``alert`` line (``--json``), read past its windows."""
    assert watcher.stdout is not None
    while True:
        line = watcher.stdout.readline()
        assert line, watcher.stderr.read() if watcher.stderr else ""
        record = json.loads(line)
        if record["kind"] == "alert":
            return dict(record)


def test_restarted_watcher_dumps_stacks(tmp_path: Path) -> None:
    """A watcher restarted after the run's train_start (its state in the run directory) still knows
    the rank's process: a stall it sees gets the process's stacks, not "names no pid"."""
    run = tmp_path / "run"
    run.mkdir()
    script = tmp_path / "staller.py"
    script.write_text(STALLER)
    staller = subprocess.Popen([sys.executable, str(script), str(run), "loop"], env=ENV)
    try:
        first = tail(run, "--json", "--every", "1000")  # the default budgets: no stall while it runs
        state = run / ".speedtronic-tail" / "positions.json"
        deadline = time.monotonic() + 120
        while '"0": [false, 3' not in text_so_far(state):  # it has taken train_start and step 3
            assert time.monotonic() < deadline, text_so_far(state)
            assert first.poll() is None, first.communicate()
            time.sleep(0.05)
        first.terminate()
        first.communicate(timeout=60)
        second = tail(run, "--json", "--dump-stacks", "--stall-budget", "1")
        alert = next_alert(second)
        second.send_signal(signal.SIGINT)
        assert second.wait(timeout=60) == 130
        assert alert["rule"] == "stall"
        assert alert["step"] == 3
        assert "names no pid" not in alert["message"]
        assert alert["stacks"] is not None
        assert Path(alert["stacks"]).parent == run / "stacks"
        assert f"stacks of process {staller.pid}" in alert["message"]
    finally:
        staller.kill()
        staller.wait()


def test_stall_at_the_same_step_after_a_resume_is_alerted_again(tmp_path: Path) -> None:
    """A run that hangs at step 3, is resumed from an earlier checkpoint and hangs at step 3 again:
    the resumed segment's stall is an alert of its own (the first one's state file does not swallow
    it)."""
    run = tmp_path / "run"
    run.mkdir()
    segment = [{"event": "train_start", "start_step": 0, "target_step": 100}]
    segment += [{"event": "train_step", "step": step, "loss": 1.0} for step in (1, 2, 3)]
    jsonl = run / "metrics.jsonl"
    jsonl.write_text("".join(json.dumps(line) + "\n" for line in segment))
    watcher = tail(run, "--json", "--every", "1000", "--stall-budget", "1", "--startup-budget", "1")
    sent = run / ".speedtronic-tail" / "alerts"
    try:
        wait_for_files(sent, 1, watcher)
        with jsonl.open("a") as file:  # the resumed process: from step 0 again, up to the same hang
            file.write("".join(json.dumps(line) + "\n" for line in segment))
        wait_for_files(sent, 2, watcher)
        with jsonl.open("a") as file:
            file.write(json.dumps({"event": "train_end", "step": 100}) + "\n")
        out, err = watcher.communicate(timeout=120)
    finally:
        watcher.kill()
        watcher.wait()
    assert watcher.returncode == 0, err
    alerts = [json.loads(line) for line in out.splitlines() if '"alert"' in line]
    assert [(alert["rule"], alert["step"]) for alert in alerts] == [("stall", 3), ("stall", 3)]


def wait_for_files(folder: Path, count: int, watcher: subprocess.Popen[str]) -> None:
    """Wait (at most a minute: a stall of 1 s is alerted well before) until ``folder`` holds ``count``
    files: the watcher's alerts sent."""
    deadline = time.monotonic() + 60
    while len(list(folder.iterdir()) if folder.is_dir() else []) < count:
        assert time.monotonic() < deadline, f"{count} alert(s) expected, {folder} holds fewer"
        assert watcher.poll() is None, watcher.communicate()
        time.sleep(0.05)


def test_two_runs_files_in_one_directory_have_their_own_state(tmp_path: Path) -> None:
    """Two runs' JSONL files side by side (``MetricLogger(json_file=...)`` of two scripts), each
    followed by its own ``tail FILE --alerts``: each watcher shows its run's alerts (the same rule at the
    same steps is two runs' alerts, not one sent twice) and a restarted one goes on where it stopped."""
    rules = tmp_path / "rules.yaml"
    rules.write_text("alerts:\n  - rule: threshold\n    key: loss\n    above: 5\n")
    finished_run(tmp_path / "run")
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_bytes((tmp_path / "run" / "metrics.jsonl").read_bytes())
    for name in ("a.jsonl", "b.jsonl"):
        watcher = tail(tmp_path / name, "--json", "--alerts", rules)
        out, err = watcher.communicate(timeout=120)
        assert watcher.returncode == 0, err
        assert [json.loads(line)["step"] for line in out.splitlines() if '"alert"' in line] == [10, 250]
    again = tail(tmp_path / "a.jsonl", "--json", "--alerts", rules)
    out, _ = again.communicate(timeout=120)
    assert again.returncode == 0
    assert '"alert"' not in out
    assert '"window"' not in out


def test_since_a_duration_shows_that_time_again_after_a_watcher(tmp_path: Path) -> None:
    """``tail --since 1h`` after an earlier watcher of the run shows the last hour's records (not only
    what came after that watcher), and sends no alert that watcher sent."""
    rules = tmp_path / "rules.yaml"
    rules.write_text("alerts:\n  - rule: threshold\n    key: loss\n    above: 5\n")
    run = tmp_path / "run"
    run.mkdir()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lines = [{"event": "train_start", "start_step": 0, "target_step": 3}]
    lines += [{"event": "train_step", "step": s, "loss": 9.0 if s == 2 else 1.0} for s in (1, 2, 3)]
    lines.append({"event": "train_end", "step": 3})
    text = "".join(json.dumps({**line, "timestamp": stamp}) + "\n" for line in lines)
    (run / "metrics.jsonl").write_text(text)
    first = tail(run, "--json", "--alerts", rules)
    out, _ = first.communicate(timeout=120)
    assert first.returncode == 0
    assert [json.loads(line)["step"] for line in out.splitlines() if '"alert"' in line] == [2]
    again = tail(run, "--json", "--alerts", rules, "--since", "1h")
    out, _ = again.communicate(timeout=120)
    assert again.returncode == 0
    assert [json.loads(line)["step"] for line in out.splitlines() if '"window"' in line] == [3]
    assert '"alert"' not in out


def test_folder_of_runs_sends_each_runs_alerts(tmp_path: Path) -> None:
    """A folder of two runs whose rule alerts at the same rank and steps: each run's alerts are shown
    and sent (two runs' alerts, not one alert sent twice)."""
    rules = tmp_path / "rules.yaml"
    rules.write_text("alerts:\n  - rule: threshold\n    key: loss\n    above: 5\n")
    runs = tmp_path / "runs"
    runs.mkdir()
    finished_run(runs / "a")
    finished_run(runs / "b")
    watcher = tail(runs, "--json", "--alerts", rules)
    out, err = watcher.communicate(timeout=120)
    assert watcher.returncode == 0, err
    assert sorted(json.loads(line)["step"] for line in out.splitlines() if '"alert"' in line) == [
        10,
        10,
        250,
        250,
    ]


def test_a_watcher_of_some_ranks_leaves_the_others_to_the_next(tmp_path: Path) -> None:
    """``tail --ranks 0`` reads past rank 1's records without taking them; a watcher of every rank
    after it still gets rank 1's records and alerts (the first did not save rank 1's file as read)."""
    rules = tmp_path / "rules.yaml"
    rules.write_text("alerts:\n  - rule: threshold\n    key: loss\n    above: 5\n")
    run = tmp_path / "run"
    run.mkdir()
    for rank, name in ((0, "metrics.jsonl"), (1, "metrics.rank1.jsonl")):
        lines = [{"event": "train_start", "start_step": 0, "target_step": 3}]
        lines += [
            {"event": "train_step", "step": s, "loss": 9.0 if rank == s == 1 else 1.0} for s in (1, 2, 3)
        ]
        lines.append({"event": "train_end", "step": 3})
        text = "".join(json.dumps({**line, "rank": rank, "world_size": 2}) + "\n" for line in lines)
        (run / name).write_text(text)
    some = tail(run, "--json", "--alerts", rules, "--ranks", "0")
    out, err = some.communicate(timeout=120)
    assert some.returncode == 0, err
    assert '"alert"' not in out
    every = tail(run, "--json", "--alerts", rules)
    out, err = every.communicate(timeout=120)
    assert every.returncode == 0, err
    [alert] = [json.loads(line) for line in out.splitlines() if '"alert"' in line]
    assert (alert["rank"], alert["step"]) == (1, 1)
    assert json.loads(out.splitlines()[-1]) == {"kind": "end", "ranks": [0, 1], "statuses": [None, None]}


def test_a_new_run_in_place_of_a_watched_one_is_followed(tmp_path: Path) -> None:
    """The run's files deleted (the state left behind: ``rm RUN/*`` spares ``.speedtronic-tail``) and a
    new run started in the directory: a watcher follows the new run to its end, rather than ending at
    once on the old run's notes, and sends its alerts (not taken for the old run's, sent before)."""
    rules = tmp_path / "rules.yaml"
    rules.write_text("alerts:\n  - rule: threshold\n    key: loss\n    above: 5\n")
    run = tmp_path / "run"
    finished_run(run)
    first = tail(run, "--json", "--alerts", rules)
    out = first.communicate(timeout=120)[0]
    assert [json.loads(line)["step"] for line in out.splitlines() if '"alert"' in line] == [10, 250]
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").write_text("")  # the new run's logger has opened its file
    watcher = tail(run, "--json", "--alerts", rules)
    lines = [{"event": "train_start", "start_step": 0, "target_step": 12, "seed": 1}]
    lines += [{"event": "train_step", "step": s, "loss": 9.0 if s == 10 else 1.0} for s in range(1, 13)]
    lines.append({"event": "train_end", "step": 12})
    with (run / "metrics.jsonl").open("a") as file:
        file.write("".join(json.dumps(line) + "\n" for line in lines))
    out, err = watcher.communicate(timeout=120)
    assert watcher.returncode == 0, err
    assert [json.loads(line)["step"] for line in out.splitlines() if '"alert"' in line] == [10]
    windows = [json.loads(line) for line in out.splitlines() if '"window"' in line]
    assert [window["step"] for window in windows] == [12]


def test_a_restarted_watcher_counts_the_alerts_so_far(tmp_path: Path) -> None:
    """The windows' ``alerts`` (the alerts so far) of a watcher restarted on a run count the alerts the
    last watcher showed too, not only those since the restart."""
    rules = tmp_path / "rules.yaml"
    rules.write_text("alerts:\n  - rule: threshold\n    key: loss\n    above: 5\n")
    run = tmp_path / "run"
    run.mkdir()
    jsonl = run / "metrics.jsonl"
    lines = [{"event": "train_start", "start_step": 0, "target_step": 4}]
    lines += [{"event": "train_step", "step": s, "loss": 9.0 if s == 1 else 1.0} for s in (1, 2)]
    jsonl.write_text("".join(json.dumps(line) + "\n" for line in lines))
    first = tail(run, "--json", "--alerts", rules, "--every", "1000")
    sent = run / ".speedtronic-tail" / "alerts"
    wait_for_files(sent, 1, first)
    state = run / ".speedtronic-tail" / "positions.json"
    deadline = time.monotonic() + 60
    while '"0": [false, 2' not in text_so_far(state):  # it has saved where it got to
        assert time.monotonic() < deadline, text_so_far(state)
        time.sleep(0.05)
    first.terminate()
    first.communicate(timeout=60)
    with jsonl.open("a") as file:
        file.write(json.dumps({"event": "train_step", "step": 3, "loss": 1.0}) + "\n")
        file.write(json.dumps({"event": "train_end", "step": 3}) + "\n")
    again = tail(run, "--json", "--alerts", rules)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    [window] = [json.loads(line) for line in out.splitlines() if '"window"' in line]
    assert (window["step"], window["alerts"]) == (3, 1)
