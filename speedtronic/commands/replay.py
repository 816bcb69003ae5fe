"""``speedtronic replay RUN --hook NAME[:KEY=VALUE,...]``: a recorded run, as if logged live."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import orjson

from speedtronic.commands._runs import (
    AlertsFile,
    add_alerts_argument,
    add_rank_argument,
    rank_choice,
    read_alerts_file,
    report_skipped,
    runs_in,
)
from speedtronic.commands.cli import CommandError
from speedtronic.hooks import HookConfigError, close_hook, hook_type
from speedtronic.hooks.registry import hook_argument_problem, hook_types
from speedtronic.runs.reader import RunError, read_records
from speedtronic.runs.replay import ReplayRefused, replay_hook, replay_run

__all__ = ["add_parser", "parse_hook", "run"]

_OPTION = re.compile(r",(?=[A-Za-z_]\w*=)")  # a comma that starts the next KEY=VALUE


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="push a recorded run into TensorBoard, W&B or any registered hook, as the live hooks would",
        description="Replay a recorded run (a JSONL file or run directory) through hooks: any registered "
        "hook type (--hook), or speedtronic's TensorBoard and W&B hooks (--tensorboard, --wandb). Same "
        "tags, steps and values as a live run. A folder of runs (runs/, holding run directories) replays "
        "each run into its own targets: DIR/<run> for a log_dir, a W&B run named after it.",
    )
    parser.add_argument("run", metavar="RUN", help="a JSONL file, a run directory or a folder of runs")
    parser.add_argument(
        "--hook",
        metavar="NAME[:KEY=VALUE,...]",
        action="append",
        default=[],
        help="a registered hook type and its keyword arguments (a VALUE that parses as JSON is read as "
        "JSON, else as text), e.g. tensorboard:log_dir=tb; repeat for several",
    )
    parser.add_argument(
        "--tensorboard",
        metavar="DIR",
        help="write a TensorBoard event file in DIR (as --hook tensorboard:log_dir=DIR)",
    )
    parser.add_argument(
        "--append", action="store_true", help="write into a TensorBoard DIR that already holds events"
    )
    parser.add_argument(
        "--wandb", metavar="PROJECT", help="log a new W&B run in PROJECT (as --hook wandb:project=PROJECT)"
    )
    parser.add_argument(
        "--wandb-mode",
        choices=("online", "offline"),
        help="W&B mode (default: W&B's own, e.g. WANDB_MODE); offline writes a run to sync later",
    )
    parser.add_argument("--wandb-dir", metavar="DIR", help="where W&B keeps its files (wandb.init dir=)")
    parser.add_argument("--name", help="the W&B run's name (default: W&B's)")
    add_alerts_argument(
        parser, "re-derive the alerts the run would have raised, one JSON line each on stdout"
    )
    add_rank_argument(parser)
    parser.set_defaults(func=run)


def parse_hook(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME[:KEY=VALUE,...]`` as ``(name, options)``; ``ValueError`` for another shape.

    NAME is a registered hook type or, as in a config, ``package.module:factory`` (after a name that
    is not a registered type, a second part with no ``=`` belongs to the name). A VALUE is read as
    JSON when it parses as JSON (``5``, ``true``, ``null``, ``"5"``, ``[1,2]``), else kept as text
    (``tb/run``); a comma followed by ``KEY=`` starts the next option.
    """
    name, _, rest = text.partition(":")
    factory, _, after = rest.partition(":")
    if factory.strip() and "=" not in factory and name.strip() not in hook_types():
        # package.module:factory[:KEY=VALUE,...]
        name, rest = f"{name}:{factory.strip()}", after
    options: dict[str, Any] = {}
    for item in _OPTION.split(rest) if rest else ():
        key, equals, value = item.partition("=")
        if not equals or not key.isidentifier():
            raise ValueError(f"--hook {text!r}: expected NAME[:KEY=VALUE,...], got {item!r}")
        options[key] = _value(value)
    if not name.strip():
        raise ValueError(f"--hook {text!r}: expected NAME[:KEY=VALUE,...], got no NAME")
    return name.strip(), options


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def run(args: argparse.Namespace) -> int:
    alerts = read_alerts_file(args.alerts) if args.alerts is not None else None
    runs = runs_in([args.run])
    folder = runs != [args.run]  # a folder of runs: each run gets targets of its own
    plan = [(one, _targets(args, Path(one).name if folder else None, alerts)) for one in runs]
    only_alerts = alerts is not None and not any(targets for _, targets in plan)
    rank = (
        "all" if only_alerts and args.rank == "first" else rank_choice(args.rank, runs)
    )  # every rank's alerts
    charted = any(name in _ONE_SERIES for _, targets in plan for _, name, _ in targets)
    if rank == "all" and charted:  # each rank's step 10 on one chart: TensorBoard drops them as out of order
        raise CommandError(
            "--rank all: a TensorBoard or W&B target keeps one series per key, by step, so "
            "several ranks' records would overwrite each other there; replay one rank at a time "
            "(--rank N), each into its own target"
        )
    for one, targets in plan:  # every run readable, every target valid, before any is created
        try:
            next(read_records(one, rank="all"), None)  # a file that is no run is refused up front
            for _, name, options in targets:
                _check(name, options)
        except (RunError, LookupError, ModuleNotFoundError) as error:
            raise CommandError(str(error)) from None
    for one, targets in plan:
        _replay(one, targets, rank, append=args.append, alerts=alerts)
    return 0


_ONE_SERIES = frozenset({"tensorboard", "wandb"})
"""Targets that keep one series per key, indexed by step: they can't hold several ranks' records."""


def _targets(
    args: argparse.Namespace, run_name: str | None, alerts: AlertsFile | None = None
) -> list[tuple[str, str, dict[str, Any]]]:
    """``(description, type, options)`` of each target the options name; for ``run_name`` (a run of a
    folder), a ``log_dir`` is ``<log_dir>/<run_name>`` and a W&B run is named ``run_name`` unless
    ``--name`` says otherwise."""
    targets: list[tuple[str, str, dict[str, Any]]] = []
    if args.tensorboard is not None:
        targets.append((f"TensorBoard {args.tensorboard}", "tensorboard", {"log_dir": args.tensorboard}))
    if args.wandb is not None:
        name = args.name if args.name is not None or run_name is None else run_name
        init = {"mode": args.wandb_mode, "dir": args.wandb_dir, "name": name}
        options = {"project": args.wandb, **{k: v for k, v in init.items() if v is not None}}
        targets.append((f"W&B project {args.wandb}", "wandb", options))
    try:
        for text in args.hook:
            name, options = parse_hook(text)
            targets.append((f"hook {name}", name, options))
    except ValueError as error:
        raise CommandError(f"replay: {error}") from None
    if not targets and alerts is None:
        raise CommandError(
            "replay: name a target, --hook NAME[:KEY=VALUE,...], --tensorboard DIR and/or --wandb PROJECT"
            " (or --alerts RULES)"
        )
    if run_name is not None:
        for at, (description, name, options) in enumerate(targets):
            if "log_dir" in options:
                options["log_dir"] = str(Path(str(options["log_dir"])) / run_name)
                targets[at] = (f"{description}/{run_name}", name, options)
    return targets


def _replay(
    path: str,
    targets: list[tuple[str, str, dict[str, Any]]],
    rank: Any,
    *,
    append: bool,
    alerts: AlertsFile | None = None,
) -> None:
    """Create ``targets``, replay the run at ``path`` into them and close them; say what was done."""
    hooks: list[Any] = []
    new_dirs = [one for one in _target_dirs(targets) if not one.exists()]
    try:
        for _, name, options in targets:
            hooks.append(_create(name, options, append=append))
    except (ReplayRefused, LookupError, ModuleNotFoundError, CommandError) as error:
        for hook in hooks:  # a target created before the failure is closed, not left half-open
            with contextlib.suppress(Exception):  # the failure above is the one to report
                close_hook(hook)
        for one in new_dirs:  # and a directory it made is gone again
            shutil.rmtree(one, ignore_errors=True)
        raise CommandError(str(error)) from None
    try:
        result = replay_run(path, hooks, rank=rank, alerts=alerts.rules if alerts else None)  # closes them
    except RunError as error:
        raise CommandError(str(error)) from None
    except Exception as error:  # a hook's own failure, delivering or closing: one line, no traceback
        from speedtronic.record.secrets import redact_exception  # a hook's error may quote a secret

        raise CommandError(
            f"replay: a hook failed; {path} was not replayed in full: {redact_exception(error).line}", code=1
        ) from None
    for payload in result.alerts:
        sys.stdout.write(orjson.dumps(payload).decode() + "\n")
    sys.stdout.flush()
    report_skipped(path, result.skipped)
    if result.not_replayed:
        counts = ", ".join(f"{event} {n:,}" for event, n in result.not_replayed.items())
        print(
            f"speedtronic: not replayed (the logger's own records, never sent to hooks): {counts}",
            file=sys.stderr,
        )
    if alerts is not None:
        print(
            f"{len(result.alerts):,} alert{'' if len(result.alerts) == 1 else 's'} re-derived from {path} "
            f"with {alerts.path} (the run recorded "
            f"{result.recorded_alerts:,})",
            file=sys.stderr,
        )
    if targets:
        described = " and ".join(description for description, _, _ in targets)
        print(f"replayed {result.replayed.total():,} records of {path} to {described}", file=sys.stderr)


def _check(name: str, options: dict[str, Any]) -> None:
    """A ``CommandError`` for an option the hook type does not take, before any target is created."""
    problem = hook_argument_problem(hook_type(name), options)
    if problem is not None:
        raise CommandError(f"replay: {name} hook: {problem}")
    where = Path(str(options.get("dir", "")))
    if "dir" in options and where.exists() and not where.is_dir():  # W&B would fall back to /tmp
        raise CommandError(f"replay: {name} hook: dir {where}: expected a directory, found a file")


def _target_dirs(targets: list[tuple[str, str, dict[str, Any]]]) -> list[Path]:
    """The directories the targets write to (``log_dir``, ``dir``), as far as their options say."""
    keys = ("log_dir", "dir")
    return [Path(str(options[key])) for _, _, options in targets for key in keys if key in options]


def _create(name: str, options: dict[str, Any], *, append: bool) -> Any:
    """The hook, checked as ``MetricLogger.hooks`` checks one; a ``CommandError`` naming the type when
    its constructor fails (wrong options) or it can't be called as ``(event, payload)``."""
    try:
        return replay_hook(name, options, append=append)
    except HookConfigError as error:
        raise CommandError(f"replay: {error}") from None
