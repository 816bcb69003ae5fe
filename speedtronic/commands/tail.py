"""``speedtronic tail RUN``: watch a run as it is written, from another process, and deliver its
alerts (``docs/watching.md``)."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from speedtronic.checks import is_seconds
from speedtronic.commands._help import one_line
from speedtronic.commands._runs import add_alerts_argument, read_alerts_file
from speedtronic.commands.cli import CommandError
from speedtronic.events import RATE_SUFFIX
from speedtronic.record import iso_timestamp
from speedtronic.record.text import quote
from speedtronic.runs.reader import Record, RunError, as_number, begins_a_record, not_a_run, rate_keys

__all__ = ["add_parser", "run"]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_FIRST_BYTES = 4096  # enough of a first line to see whether it begins a JSON object


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tail",
        help="watch a run as it is written: live progress, alerts, stalls",
        description="Follow a run (a JSONL file, a run directory or a folder of runs) as it is written, "
        "across new ranks, restarts and log rotation: one line per window with new steps, alerts as "
        "they come, a stall alert when a rank stops stepping. Exits 0 when every rank (of every run) "
        "has ended.",
    )
    parser.add_argument("run", metavar="RUN", help="a JSONL file, a run directory or a folder of runs")
    parser.add_argument("--json", action="store_true", help="one JSON object per line (windows, alerts, end)")
    parser.add_argument(
        "--since",
        metavar="now|DURATION",
        help="show only what is written from now on ('now'), or records of the last DURATION (30s, 10m, "
        "2h); default: the whole run",
    )
    parser.add_argument("--ranks", metavar="N[,N...]", help="follow only these ranks (default: every rank)")
    parser.add_argument("--every", type=float, default=2.0, metavar="S", help="seconds per window (2)")
    parser.add_argument(
        "--poll",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="poll files instead of waiting on inotify (default: inotify on a local Linux file system)",
    )
    parser.add_argument("--interval", type=float, default=0.25, metavar="S", help="seconds between polls")
    add_alerts_argument(parser, "the same rules, checked out of process, alerts sent to --hook hooks")
    parser.add_argument(
        "--hook",
        metavar="NAME[:KEY=VALUE,...]",
        action="append",
        default=[],
        help="send alerts to a registered hook type (as replay --hook); repeat for several",
    )
    stall = parser.add_argument_group("stalls (a rank writing no train_step for longer than its budget)")
    stall.add_argument("--no-stall", action="store_true", help="raise no stall alerts")
    stall.add_argument(
        "--stall-budget", type=float, metavar="S", help="least budget between steps, seconds (60)"
    )
    stall.add_argument("--stall-factor", type=float, metavar="X", help="budget = X * p95 step interval (5)")
    stall.add_argument("--startup-budget", type=float, metavar="S", help="before the first step (900)")
    stall.add_argument("--checkpoint-budget", type=float, metavar="S", help="at a checkpoint step (600)")
    stall.add_argument("--eval-budget", type=float, metavar="S", help="at an eval step (600)")
    stall.add_argument(
        "--dump-stacks",
        action="store_true",
        help="on a stall, send the rank's process its stack signal (train_start's stack_signal) so it "
        "writes every thread's stack to stacks/ in the run directory",
    )
    parser.add_argument(
        "--no-state",
        action="store_true",
        help="keep no state in the run directory (.speedtronic-tail/): read from the start, and send "
        "alerts another watcher sent",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from speedtronic.runs.stall import StallBudgets

    since = _since(args.since)
    ranks = _ranks(args.ranks)
    for name in ("every", "interval"):
        if not is_seconds(getattr(args, name)):  # 1e300 or inf: a wait that never ends
            raise CommandError(
                f"tail: --{name}: expected a finite number of seconds > 0, got {getattr(args, name)}"
            )
    chosen = {
        name: getattr(args, option)
        for name, option in (
            ("step_min_s", "stall_budget"),
            ("step_factor", "stall_factor"),
            ("startup_s", "startup_budget"),
            ("checkpoint_s", "checkpoint_budget"),
            ("eval_s", "eval_budget"),
        )
        if getattr(args, option) is not None
    }
    try:
        budgets = StallBudgets(**chosen)
    except ValueError as error:
        raise CommandError(f"tail: {error}") from None
    alerts = read_alerts_file(args.alerts) if args.alerts is not None else None
    if not Path(args.run).exists():
        raise CommandError(f"tail: {args.run}: no such file or directory")
    if Path(args.run).is_file():
        _refuse_no_run(Path(args.run))
    hooks = _hooks(args.hook)
    watcher = _Watcher(args, since, ranks, budgets, alerts, hooks)
    return watcher.loop()


def _refuse_no_run(path: Path) -> None:
    """A ``CommandError`` for a file whose first line does not begin a JSON object (a README, a text
    log, a checkpoint), by the readers' rule (``begins_a_record``): such a file would be followed
    forever, every line skipped. An empty file, or a first line still being written, is a run to come."""
    try:
        with path.open("rb") as file:
            first = file.read(_FIRST_BYTES).split(b"\n", 1)[0]
    except OSError as error:
        raise CommandError(f"tail: {path}: {error.strerror or error}") from None
    if first.strip() and not begins_a_record(first):
        raise CommandError(f"tail: {not_a_run(path, 'line 1 is not a JSON object')}")


def _since(text: str | None) -> float | str | None:
    if text is None or text == "now":
        return text
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise CommandError(f"tail: --since {text!r}: expected 'now' or a duration such as 30s, 10m, 2h")
    return float(match[1]) * _UNITS[match[2]]


def _ranks(text: str | None) -> frozenset[int] | None:
    if text is None:
        return None
    try:
        ranks = frozenset(int(part) for part in text.split(","))
    except ValueError:
        ranks = frozenset({-1})
    if not ranks or min(ranks) < 0:
        raise CommandError(f"tail: --ranks {text!r}: expected ranks (integers >= 0), comma-separated")
    return ranks


def _hooks(texts: list[str]) -> list[Any]:
    from speedtronic.commands.replay import parse_hook
    from speedtronic.hooks import HookConfigError, hook_type
    from speedtronic.hooks.registry import hook_argument_problem
    from speedtronic.runs.replay import ReplayRefused, replay_hook

    made = []
    for text in texts:
        try:
            name, options = parse_hook(text)
            problem = hook_argument_problem(hook_type(name), options)
            if problem is not None:
                raise CommandError(f"tail: {name} hook: {problem}")
            made.append(replay_hook(name, options, append=True))
        except ValueError as error:
            raise CommandError(f"tail: {error}") from None
        except (LookupError, ModuleNotFoundError, ReplayRefused, HookConfigError) as error:
            raise CommandError(f"tail: {error}") from None
    return made


_RAISED_KEPT = 1024
"""Alerts the watcher's rules raised that a run keeps, to tell the run's own record of one of them."""


def _incident(rank: int, payload: dict[str, Any]) -> tuple[Any, ...]:
    return (rank, payload.get("rule"), payload.get("key"), payload.get("step"))


class _Run:
    """What the watcher knows of one run: a run directory (or a JSONL file) of the followed path, a
    folder of runs holding several. Its ranks go by number within it: rank 0 of two runs is two ranks."""

    __slots__ = (
        "alerts",
        "counts",
        "derive",
        "derived",
        "ended",
        "fresh_ranks",
        "last_steps",
        "name",
        "others",
        "pace",
        "pids",
        "segments",
        "shown_end",
        "stalls",
        "statuses",
        "steps",
        "target",
        "world",
    )

    def __init__(self, name: str, stalls: Any, derive: Any) -> None:
        self.name = name  # its directory below the followed folder; "." for the followed run itself
        self.stalls, self.derive = stalls, derive
        self.derived: dict[tuple[Any, ...], None] = {}  # recent alerts the watcher's rules raised
        self.steps: dict[int, dict[str, Any]] = {}  # rank -> latest train_step payload
        self.statuses: dict[int, Any] = {}  # rank -> its latest train_end's status
        self.fresh_ranks: set[int] = set()
        self.target: int | None = None
        self.pace: dict[int, tuple[float, int]] = {}  # rank -> (elapsed_s, step) at its segment's first step
        self.ended: dict[int, bool] = {}
        self.world = 0
        self.pids: dict[int, tuple[int, int, str]] = {}  # rank -> (pid, stack signal, stacks file)
        self.alerts = 0
        self.counts: dict[int, int] = {}  # rank -> alerts shown (of the total ``alerts``)
        self.last_steps: dict[int, int | None] = {}
        # rank -> the file (below the followed directory) and segment of its latest record: a stall's
        # alert id, as a rule's alert has its record's (two runs of a folder, a resumed segment: its own)
        self.segments: dict[int, tuple[str, int]] = {}
        # With --ranks, what is saved of the other ranks stays as it was for a watcher of them.
        self.others: dict[str, dict[str, Any]] = {}
        self.shown_end = False

    def restore(self, noted: dict[str, Any], ranks: frozenset[int] | None, *, counts: bool) -> None:
        """Take what a watcher before a restart saved of the run (``notes``); ``counts``: the alerts
        shown so far too (it goes on where that watcher stopped)."""
        self.world = int(noted.get("world", 0))
        self.target = noted.get("target_step")
        if ranks is not None:
            self.others = {
                part: {
                    key: value for key, value in dict(noted.get(part, {})).items() if int(key) not in ranks
                }
                for part in ("ranks", "pids")
            }
        for key, rank_notes in dict(noted.get("ranks", {})).items():
            rank, ended, last_step = int(key), bool(rank_notes[0]), rank_notes[1]
            if ranks is None or rank in ranks:
                self.ended[rank], self.last_steps[rank] = ended, last_step
                if len(rank_notes) > 3:  # noted before files and segments were: two items
                    self.segments[rank] = (str(rank_notes[3]), int(rank_notes[2]))
                if len(rank_notes) > 4 and counts:
                    self.counts[rank] = int(rank_notes[4])
                    self.alerts += self.counts[rank]
                if self.stalls is not None:
                    self.stalls.resume(rank, last_step, ended=ended)
        for key, (pid, number, stacks) in dict(noted.get("pids", {})).items():
            if ranks is None or int(key) in ranks:
                self.pids[int(key)] = (int(pid), int(number), str(stacks))

    def notes(self) -> dict[str, Any]:
        """What a restarted watcher must know of the run: its ranks (ended, last step), world, target."""
        ranks = {}
        for rank, ended in self.ended.items():
            source, segment = self.segments.get(rank, ("", 0))
            ranks[str(rank)] = [ended, self.last_steps.get(rank), segment, source, self.counts.get(rank, 0)]
        pids = {str(rank): list(found) for rank, found in self.pids.items()}
        ranks.update(self.others.get("ranks", {}))
        pids.update(self.others.get("pids", {}))
        return {"ranks": ranks, "world": self.world, "target_step": self.target, "pids": pids}

    def raise_(self, rank: int, payload: dict[str, Any]) -> None:
        """Note an alert the watcher's rules raised from ``rank``'s record (the last ``_RAISED_KEPT``)."""
        if len(self.derived) >= _RAISED_KEPT:
            del self.derived[next(iter(self.derived))]
        self.derived[_incident(rank, payload)] = None

    def raised(self, rank: int, payload: dict[str, Any]) -> bool:
        """Whether the watcher's rules raised this recorded alert (the same rule, key and step) already."""
        return _incident(rank, payload) in self.derived

    def count(self, rank: int) -> None:
        self.alerts += 1
        self.counts[rank] = self.counts.get(rank, 0) + 1

    def over(self, writers: frozenset[int] | None) -> bool:
        """Whether the run ended: every rank seen (and, with ``world_size``, that many ranks) wrote its
        ``train_end``, or every rank ``writers`` (its ``ranks.json``) names did."""
        if not self.ended or not all(self.ended.values()):
            return False
        return len(self.ended) >= self.world or (
            bool(writers) and all(self.ended.get(rank, False) for rank in writers or ())
        )

    def window(self) -> dict[str, Any] | None:
        """The window of the steps that came since the last one (``None`` when none came): the lead
        reporting rank's step, loss, rates and ETA."""
        if not self.fresh_ranks:
            return None
        lead = min(self.fresh_ranks)
        step = self.steps[lead]
        number = step.get("step")
        eta = None
        start = self.pace.get(lead)
        elapsed = as_number(step.get("elapsed_s"))
        if self.target is not None and start is not None and elapsed is not None and type(number) is int:
            done, took = number - start[1], elapsed - start[0]
            if done > 0 and took > 0:
                eta = max(0.0, (self.target - number) * took / done)
        window: dict[str, Any] = {"kind": "window", **self.label()}
        window |= {
            "step": number,
            "target_step": self.target,
            "loss": step.get("loss"),
            "lr": step.get("lr"),
            "rates": {key: step[key] for key in rate_keys(step)},
            "eta_s": None if eta is None else round(eta, 1),
            "ranks_reporting": sorted(self.fresh_ranks),
            "ranks_seen": len(self.ended),
            "alerts": self.alerts,
        }
        self.fresh_ranks = set()
        return window

    def label(self) -> dict[str, str]:
        """``{"run": name}`` for a run of a folder of runs; nothing for the followed run itself."""
        return {} if self.name == "." else {"run": self.name}


class _Watcher:
    """The follow, check, show loop of one ``tail``."""

    def __init__(
        self,
        args: argparse.Namespace,
        since: float | str | None,
        ranks: frozenset[int] | None,
        budgets: Any,
        alerts: Any,
        hooks: list[Any],
    ) -> None:
        from speedtronic.hooks import CallbackList, DispatchHooks
        from speedtronic.runs.follow import Follower, position_holds, run_home
        from speedtronic.runs.watchstate import WatchState

        self.args, self.since, self.ranks = args, since, ranks
        self.budgets, self.rules = budgets, alerts
        self.state = None if args.no_state else WatchState(args.run)
        if self.state is not None and not os.access(self.state.home, os.W_OK):
            self._no_state("the run directory is not writable")
        positions, before = self.state.load() if self.state is not None else ({}, {})
        home = run_home(args.run)
        if positions and not any(position_holds(home, key, at) for key, at in positions.items()):
            positions, before = {}, {}  # the files it was saved for are gone: a new run in their place
            if self.state is not None:
                self.state.forget()
        restored = _restored_runs(before, positions)
        if isinstance(since, float):  # the last N minutes asked for: read them again (alerts stay sent)
            positions = {}
        # With --ranks, the positions of the files the other ranks' records are in (``foreign``) stay
        # as they were saved, for a watcher of them.
        self.kept = dict(positions)
        self.foreign: set[str] = set()
        try:
            self.follower = Follower(args.run, poll=args.poll, interval=args.interval, positions=positions)
        except (RunError, ValueError) as error:
            raise CommandError(f"tail: {error}") from None
        self.hooks = CallbackList(hooks)
        self.dispatch = DispatchHooks(self.hooks.callbacks, consume=False)
        self.view = _View.make(args)
        self.home = home
        self.runs: dict[str, _Run] = {}  # by name: "." for the followed run, a directory of a folder
        self.run_of: dict[Path, _Run] = {}  # a file's run, found once
        for name, noted in restored.items():
            self._run(name).restore(noted, ranks, counts=bool(positions))

    def _run(self, name: str) -> _Run:
        """The run called ``name``, made when first seen: its own stall watch and rule windows."""
        run = self.runs.get(name)
        if run is None:
            from speedtronic.runs.backtest import RunAlerts
            from speedtronic.runs.stall import StallWatch

            stalls = None if self.args.no_stall else StallWatch(self.budgets)
            derive = RunAlerts(self.rules.rules) if self.rules is not None else None
            run = self.runs[name] = _Run(name, stalls, derive)
        return run

    def loop(self) -> int:
        """Follow until the run ends (0); 1 when a hook failed to deliver an alert, as it was sent or
        at close (one line on stderr, as a hook's failure is no reason for a traceback)."""
        try:
            code = self._follow()
        finally:
            self.follower.close()
            try:
                self.hooks.close()
                undelivered = False
            except Exception as error:  # any hook's own failure: reported, never a traceback
                print(f"speedtronic: tail: --hook: {one_line(str(error))}", file=sys.stderr)
                undelivered = True
            for name, count in self.dispatch.errors.items():  # raised as the alert was sent: warned, counted
                print(f"speedtronic: tail: --hook: {name} failed on {count:,} alert(s)", file=sys.stderr)
                undelivered = True
            self.view.close()
        return 1 if undelivered and code == 0 else code

    def _follow(self) -> int:
        first = True
        next_window = time.monotonic() + self.args.every
        while True:
            records = self.follower.read()
            for record in records:
                self._take(record, backlog=first and self.since == "now")
            first = False
            for run in list(self.runs.values()):
                for payload in run.stalls.check() if run.stalls is not None else ():
                    self._stack_dump(payload, run)
                    self._alert(payload, run, run.segments.get(payload["rank"]))
            if records and self.state is not None:
                try:
                    self.state.save(self._positions(), self._notes())
                except OSError as error:
                    self._no_state(f"can't write {self.state.directory}: {error.strerror or error}")
            if time.monotonic() >= next_window:
                for name in sorted(self.runs):
                    self._window(self.runs[name])
                next_window = time.monotonic() + self.args.every
            # A run is seen once a rank of it started, stepped or ended; the watch ends with the last.
            seen = [self.runs[name] for name in sorted(self.runs) if self.runs[name].ended]
            for run in seen:
                if not run.over(self._writers(run)):
                    run.shown_end = False  # (again: a run resumed after it ended)
                elif not run.shown_end:
                    run.shown_end = True
                    self._window(run)
                    ranks = sorted(run.ended)
                    statuses = [run.statuses.get(rank) for rank in ranks]
                    self.view.end(run.label(), ranks, statuses, self._named())
            if seen and all(run.shown_end for run in seen):
                return 0
            self.follower.wait()

    def _named(self) -> bool:
        """Whether the lines name their run: more than one run is followed."""
        return sum(1 for run in self.runs.values() if run.ended) > 1

    def _writers(self, run: _Run) -> frozenset[int] | None:
        """The ranks the run directory's ``ranks.json`` names as writing there: on node-local disks a
        node's directory holds its own ranks' files only, and the others' never appear."""
        from speedtronic.training.launch import recorded_ranks

        directory = Path(self.args.run) if run.name == "." else self.home / run.name
        writers = recorded_ranks(directory) if directory.is_dir() else None
        return frozenset(writers) if writers else None

    def _no_state(self, why: str) -> None:
        """Go on without a state file (a read-only run directory), saying so once on stderr."""
        self.state = None
        print(
            f"speedtronic: tail: {why}; keeping no state (a restarted or second watcher may send "
            "alerts again)",
            file=sys.stderr,
        )

    def _notes(self) -> dict[str, Any]:
        """What a restarted watcher must know of each run (``_Run.notes``): the followed run's at the
        top, as before there were several, and a folder's runs by name under ``runs``."""
        notes = self.runs["."].notes() if "." in self.runs else {}
        named = {name: run.notes() for name, run in sorted(self.runs.items()) if name != "."}
        return {**notes, "runs": named} if named else notes

    def _positions(self) -> dict[str, Any]:
        """The follower's positions, but where the files of ranks not followed (``--ranks``) were."""
        positions: dict[str, Any] = self.follower.positions()
        for key in self.foreign:
            if key in self.kept:
                positions[key] = self.kept[key]
            else:
                positions.pop(key, None)
        return positions

    def _take(self, record: Record, *, backlog: bool) -> None:
        if self.ranks is not None and record.rank not in self.ranks:
            self.foreign.add(self._where(record)[0])
            return
        if record.own:
            return
        run = self.run_of.get(record.source)
        if run is None:
            run = self.run_of[record.source] = self._run(os.path.relpath(record.source.parent, self.home))
        world = record.payload.get("world_size")
        if type(world) is int and self.ranks is None:
            run.world = max(run.world, world)
        if run.stalls is not None:
            run.stalls.see(record)
        run.segments[record.rank] = self._where(record)
        event = record.event
        if event == "train_start":
            run.ended[record.rank] = False
            run.pace.pop(record.rank, None)
            target = record.payload.get("target_step")
            run.target = target if type(target) is int else run.target
            pid, number = record.payload.get("pid"), record.payload.get("stack_signal")
            if type(pid) is int and type(number) is int:
                stacks = record.source.parent / str(record.payload.get("stacks"))  # relative to the run
                run.pids[record.rank] = (pid, number, str(stacks))
        elif event == "train_end":
            run.ended[record.rank] = True
            run.statuses[record.rank] = record.payload.get("status")
        elif event == "train_step":
            run.ended.setdefault(record.rank, False)
            step = record.payload.get("step")
            run.last_steps[record.rank] = step if type(step) is int else run.last_steps.get(record.rank)
        if backlog or not self._recent(record):
            if run.derive is not None:
                run.derive.check(record)  # the rules' windows fill; their alerts were the past's
            return
        if event == "train_step":
            run.steps[record.rank] = record.payload
            run.fresh_ranks.add(record.rank)
            elapsed, step = as_number(record.payload.get("elapsed_s")), record.payload.get("step")
            if elapsed is not None and type(step) is int and record.rank not in run.pace:
                run.pace[record.rank] = (elapsed, step)
        if event == "alert" and "rule" in record.payload and "message" in record.payload:
            # The run's own alert (its logger's rules): shown and counted, unless the watcher's rules
            # (the same rule, run by --alerts) raised it already; its hooks had it already.
            if run.raised(record.rank, record.payload):
                return
            run.count(record.rank)
            payload = {**record.payload, "severity": record.payload.get("severity"), "recorded": True}
            self.view.alert(_of_run(payload, run))
        if run.derive is not None:
            for payload in run.derive.check(record):
                run.raise_(record.rank, payload)
                self._alert(payload, run, self._where(record), record.timestamp)

    def _recent(self, record: Record) -> bool:
        if not isinstance(self.since, float) or record.timestamp is None:
            return True
        try:
            when = dt.datetime.fromisoformat(record.timestamp.replace("Z", "+00:00"))
        except ValueError:
            return True
        return (dt.datetime.now(dt.timezone.utc) - when).total_seconds() <= self.since

    def _where(self, record: Record) -> tuple[str, int]:
        """The record's file below the followed directory, and its segment there: with the alert's rule,
        rank, step and key, what tells one alert from another (``alert_id``)."""
        return os.path.relpath(record.source, self.home), record.segment

    def _alert(self, payload: dict[str, Any], run: _Run, where: object, timestamp: str | None = None) -> None:
        from speedtronic.runs.watchstate import alert_id

        try:
            if self.state is not None and not self.state.claim(alert_id(payload, where)):
                return  # this watcher, before a restart, or another one sent it
        except OSError as error:
            self._no_state(
                f"can't write {self.state.directory if self.state else ''}: {error.strerror or error}"
            )
        rank = payload.get("rank", 0)
        run.count(rank if type(rank) is int else 0)
        payload = _of_run(payload, run)
        self.view.alert(payload)
        stamp = timestamp or iso_timestamp(time.time())
        self.dispatch(None, payload["severity"], {**payload, "timestamp": stamp, "event": "alert"})

    def _stack_dump(self, payload: dict[str, Any], run: _Run) -> None:
        """With ``--dump-stacks``: signal the stalled rank's process, and name in the alert where its
        stacks go (or why there are none)."""
        if not self.args.dump_stacks:
            return
        rank = payload.get("rank", 0)
        found = run.pids.get(rank)
        if found is None:
            payload["stacks"] = None
            payload["message"] += "; no stacks: the run's train_start names no pid and stack_signal"
            return
        pid, number, stacks = found
        state = _process_state(pid)
        if state is None:
            payload["stacks"] = None
            payload["message"] += f"; no stacks: process {pid} is gone"
            return
        if state == "T":
            payload["stacks"] = None
            payload["message"] += f"; no stacks: process {pid} is stopped (SIGSTOP)"
            return
        try:
            os.kill(pid, number)
        except OSError as error:
            payload["stacks"] = None
            payload["message"] += f"; no stacks: can't signal process {pid}: {error.strerror}"
            return
        payload["stacks"] = stacks
        payload["message"] += f"; stacks of process {pid}: {stacks}"

    def _window(self, run: _Run) -> None:
        window = run.window()
        if window is not None:
            self.view.window(window, self._named())


def _restored_runs(before: dict[str, Any], positions: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each run's notes from a saved state: the followed run's at the top, a folder's runs under
    ``runs``. Notes at the top beside positions of files in subdirectories are a folder's saved before
    its runs were told apart (its ranks mixing the runs): left out, as no run's."""
    restored = {str(name): dict(noted) for name, noted in dict(before.get("runs", {})).items()}
    in_folders = any(os.path.dirname(key) for key in positions)
    if "ranks" in before and not in_folders:
        restored["."] = before
    return restored


def _of_run(payload: dict[str, Any], run: _Run) -> dict[str, Any]:
    """An alert of a folder's run, named: its ``run``, and its message beginning with the run's name
    (what a hook shows); the followed run's own alerts as they are."""
    if run.name == ".":
        return payload
    return {**payload, "run": run.name, "message": f"{run.name}: {payload.get('message')}"}


def _process_state(pid: int) -> str | None:
    """The process's state letter (``/proc/<pid>/stat``: ``R``, ``S``, ``T`` stopped...), ``None`` if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return text.rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except OSError:
            return None
        return "?"


def _number(value: Any, spec: str) -> str:
    number = as_number(value)
    return "-" if number is None else format(number, spec)


def window_line(window: dict[str, Any]) -> str:
    """A window as one plain line."""
    step = f"{window['step']}" + (f"/{window['target_step']}" if window["target_step"] is not None else "")
    rates = "  ".join(
        f"{key.removesuffix(RATE_SUFFIX)}/s {_number(v, ',.0f')}" for key, v in window["rates"].items()
    )
    eta = "-" if window["eta_s"] is None else str(dt.timedelta(seconds=round(window["eta_s"])))
    reporting = len(window["ranks_reporting"])
    return (
        f"step {step}  loss {_number(window['loss'], '.4g')}  lr {_number(window['lr'], '.3g')}  {rates}  "
        f"eta {eta}  ranks {reporting}/{window['ranks_seen']}  alerts {window['alerts']}"
    ).replace("    ", "  ")


def _named(of: dict[str, Any], line: str, named: bool) -> str:
    """``line`` beginning with its run's name (``of["run"]``) where lines name their run."""
    return f"{of['run']}  {line}" if named and "run" in of else line


def alert_line(payload: dict[str, Any]) -> str:
    """An alert as one plain line."""
    return f"ALERT {payload['severity']} {payload['rule']}: {payload['message']}"


def end_line(ranks: list[int], statuses: list[Any]) -> str:
    """The run's end as one plain line: the ranks that ended, and how those that did not complete
    ended (their ``train_end``'s ``status``: failed, interrupted, stopped), ranks in spans (``0-999``)."""
    from speedtronic.runs.table import ranks_text  # the summary table's: loaded only at a run's end

    line = f"run ended (train_end from {ranks_text(ranks)})"
    how: dict[str, list[int]] = {}
    for rank, status in zip(ranks, statuses, strict=True):
        if status is not None and status != "completed":
            text = str(status)
            how.setdefault(text if text.isprintable() else quote(text), []).append(rank)
    if not how:
        return line
    return f"{line}: {'; '.join(f'{status} on {ranks_text(which)}' for status, which in how.items())}"


class _View:
    """Where windows and alerts are shown: JSON lines, plain lines, or a Rich live view."""

    @staticmethod
    def make(args: argparse.Namespace) -> _View:
        if args.json:
            return _JsonView()
        if sys.stdout.isatty():
            return _RichView(args.run)
        return _View()

    def _print(self, line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def window(self, window: dict[str, Any], named: bool) -> None:
        """``named``: more than one run followed, the line begins with the window's ``run``."""
        self._print(_named(window, window_line(window), named))

    def alert(self, payload: dict[str, Any]) -> None:
        self._print(alert_line(payload))

    def end(self, run: dict[str, str], ranks: list[int], statuses: list[Any], named: bool) -> None:
        """``run``: ``{"run": name}`` for a run of a folder of runs, else empty."""
        self._print(_named(run, end_line(ranks, statuses), named))

    def close(self) -> None:
        pass


class _JsonView(_View):
    def window(self, window: dict[str, Any], named: bool) -> None:
        self._print(orjson.dumps(window).decode())

    def alert(self, payload: dict[str, Any]) -> None:
        self._print(orjson.dumps({"kind": "alert", **payload}).decode())

    def end(self, run: dict[str, str], ranks: list[int], statuses: list[Any], named: bool) -> None:
        self._print(orjson.dumps({"kind": "end", **run, "ranks": ranks, "statuses": statuses}).decode())


class _RichView(_View):
    """Lines printed above a one-line live footer saying what is followed."""

    def __init__(self, run: str) -> None:
        try:
            from rich.console import Console
            from rich.live import Live
            from rich.text import Text
        except ModuleNotFoundError as error:
            raise ModuleNotFoundError(
                "speedtronic tail's live view requires Rich: pip install 'speedtronic[watch]'", name="rich"
            ) from error
        self._text = Text
        self._console = Console()
        self._run = run
        self._live = Live(Text(f"following {run}"), console=self._console, auto_refresh=False, transient=True)
        self._live.start()

    def window(self, window: dict[str, Any], named: bool) -> None:
        line = _named(window, window_line(window), named)
        self._console.print(self._text(line, style="bold" if window["alerts"] else ""))
        now = time.strftime("%H:%M:%S")
        self._live.update(self._text(f"following {self._run} · last window {now}", style="dim"), refresh=True)

    def alert(self, payload: dict[str, Any]) -> None:
        style = "bold red" if payload["severity"] == "error" else "yellow"
        self._console.print(self._text(alert_line(payload), style=style))

    def end(self, run: dict[str, str], ranks: list[int], statuses: list[Any], named: bool) -> None:
        completed = all(status in (None, "completed") for status in statuses)
        line = _named(run, end_line(ranks, statuses), named)
        self._console.print(self._text(line, style="green" if completed else "bold red"))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._live.stop()
