"""``speedtronic train``: the main job, the reference trainer on a config (default: the embedded one)."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speedtronic.commands.cli import CommandError
from speedtronic.extras import missing

if TYPE_CHECKING:
    from speedtronic.runtime import RunInfo
    from speedtronic.training.config import ConfigError
    from speedtronic.training.trainer import FitResult

STOPPED_BY_ALERT = 3
"""The exit code of a run an alert stopped (``on_alert: stop``): checkpointed, ``train_end`` status
``stopped``."""

__all__ = [
    "STOPPED_BY_ALERT",
    "add_parser",
    "paths",
    "run",
    "summary",
    "typed",
    "with_progress",
    "with_structlog_console",
]


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train the reference model on a config (default: the embedded one)",
        description="Run the reference trainer: text log on stdout, metrics.jsonl, checkpoints and "
        "(when tensorboard is installed) TensorBoard files under the run directory.",
    )
    parser.add_argument("--config", metavar="FILE", help="YAML config, merged over the defaults")
    parser.add_argument(
        "--run-dir", metavar="DIR", help="where the run's files go (default: runs/<timestamp>)"
    )
    parser.add_argument("--steps", metavar="N", type=int, help="train up to absolute step N")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --run-dir from its latest checkpoint, with the config it recorded",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="plain text log on stdout even on a terminal"
    )
    parser.add_argument(
        "--alerts",
        metavar="RULES",
        help="a YAML file with an 'alerts:' list of rules (and on_alert): replaces the config's",
    )
    parser.set_defaults(func=run)


def with_progress(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with a progress bar on stdout and the text log moved to a file (unless it has one)."""
    logging = dict(config["logging"])
    if logging["file"] is None:
        logging["file"] = "{run_dir}/train.log"
    logging["hooks"] = [*logging["hooks"], {"type": "progress"}]
    return {**config, "logging": logging}


def with_structlog_console(config: dict[str, Any]) -> dict[str, Any]:
    """With a ``structlog`` hook, the app's structlog lines are the console's: the text log moves to
    ``{run_dir}/train.log`` (unless the config names a file), so each event is printed once."""
    logging = config["logging"]
    if logging["file"] is not None or all(spec["type"] != "structlog" for spec in logging["hooks"]):
        return config
    return {**config, "logging": {**logging, "file": "{run_dir}/train.log"}}


def _config_error() -> type[ConfigError]:
    """``ConfigError``, imported when an error is matched against it (``run`` imports the runtime
    only once its stop handling is in place, so a stop during that import is a stop like any other)."""
    from speedtronic.training.config import ConfigError

    return ConfigError


def _progress_wanted(args: argparse.Namespace) -> bool:
    from speedtronic.integrations.progress import progress_wanted

    return (
        not args.no_progress and progress_wanted(sys.stdout) and importlib.util.find_spec("tqdm") is not None
    )


def run(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {}
    if args.run_dir is not None:
        overrides["run_dir"] = args.run_dir
    train: dict[str, Any] = {}
    if args.steps is not None:
        train["steps"] = args.steps
    if args.resume:
        train["resume"] = True
    if train:
        overrides["train"] = train
    if args.alerts is not None:
        from speedtronic.commands._runs import read_alerts_file

        rules = read_alerts_file(args.alerts)
        overrides["alerts"], overrides["on_alert"] = rules.entries, rules.on_alert
    try:
        with _stops_as_exceptions() as stops:  # first: a stop while starting is a stop too
            with stops.deferred():  # a stop inside an import would leave modules half made
                from speedtronic import runtime  # (asyncio's, seen): raised once it is done

            config = runtime.load_config(args.config, overrides)
            if config["train"]["resume"] and config["run_dir"] is None:
                raise CommandError("--resume: name the run to continue with --run-dir")
            if config["train"]["resume"]:
                _refuse_a_finished_run(config, args)
            if _progress_wanted(args):
                config = runtime.load_config(with_progress(config))
            console = with_structlog_console(config)
            if console is not config:
                config = runtime.load_config(console)
            start = runtime.open_start(config)  # a run dir it can't use: refused before torch loads
            try:
                with stops.deferred():  # a signal inside torch's import leaves it half made: a crash
                    _import_torch()
            except BaseException:
                start.undo()
                raise
            trainer, info = runtime.build_runtime(start)  # owns the directory: undone if it fails
            from speedtronic.training.trainer import CheckpointWriteError

            try:
                result, info = runtime.fit_and_close(trainer, info)
            except (_Stopped, KeyboardInterrupt) as stop:
                code = stop.code if isinstance(stop, _Stopped) else 130
                raise _Stopped(code, info, trainer.step) from None
            except CheckpointWriteError as error:  # train_end says status=failed
                if info.rank.rank == 0:
                    _say_what_failed(error, info, trainer.step)
                return 1
    except _Stopped as stop:
        _say_how_to_continue(stop)
        return stop.code
    except RuntimeError as error:
        if not _in_a_job():
            raise
        # a dead or hung peer (gloo/nccl raise RuntimeError): one line; train_end says status=failed
        print(
            f"speedtronic: error: rank {os.environ.get('RANK', '?')}: {type(error).__name__}: "
            f"{_first_line(error)}",
            file=sys.stderr,
        )
        return 1
    except _config_error() as error:
        if error.source == "config":  # found once the config ran: name the layer that set the key
            error = type(error)(_source_of(error.key, args), error.key, error.problem)
        raise CommandError(str(error)) from None
    except ModuleNotFoundError as error:
        if error.name not in ("torch", "yaml"):
            raise
        package = "PyYAML" if error.name == "yaml" else None
        hint = missing(error, error.name, "torch", needed_by="speedtronic train", package=package)
        raise CommandError(str(hint)) from None
    except OSError as error:  # a file the run writes, made impossible by the user's file system
        where = error.filename if error.filename is not None else args.run_dir
        raise CommandError(f"{where}: {error.strerror or error}") from None
    if result.stopped is not None:  # on_alert: stop
        if info.rank.rank == 0:
            print(summary(result, info), file=sys.stderr)
            print(
                f"speedtronic: stopped by an alert at step {result.step}: {result.stopped}", file=sys.stderr
            )
        return STOPPED_BY_ALERT
    if info.rank.rank != 0:  # one summary per job
        return 1 if info.write_errors else 0
    if config["train"]["resume"] and result.resumed_from is None:
        print(
            f"speedtronic: warning: --resume: nothing to resume in {info.run_dir} (no readable "
            "checkpoint); trained from step 0",
            file=sys.stderr,
        )
    print(summary(result, info), file=sys.stderr)
    return 1 if info.write_errors else 0


def _import_torch() -> None:
    """The trainer and torch under it, imported whole (``ModuleNotFoundError`` naming torch when it
    is missing)."""
    import speedtronic.training.trainer  # noqa: F401  # imported for its side effect: loaded modules


def _refuse_a_finished_run(config: dict[str, Any], args: argparse.Namespace) -> None:
    """``--resume`` of a run whose newest checkpoint is at (or past) the target step would train
    nothing: a ``CommandError`` saying which ``--steps`` to pass instead."""
    from speedtronic.training.rundir import CHECKPOINTS, checkpoint_steps

    checkpoints = Path(config["run_dir"]) / CHECKPOINTS
    if not checkpoints.is_dir() or checkpoints.is_symlink():
        return
    reached = max(checkpoint_steps(checkpoints), default=0)  # any rank's: a node may hold only its own
    target = config["train"]["steps"]
    if reached < target:
        return
    if args.steps is not None:
        raise CommandError(
            f"--steps {target}: the run in {config['run_dir']} is already at step {reached}; pass "
            f"--steps N with N > {reached} to train it further"
        )
    raise CommandError(
        f"--resume: the run in {config['run_dir']} is finished (step {reached} of train.steps "
        f"{target}); pass --steps N with N > {reached} to train it further"
    )


def _say_what_failed(error: OSError, info: RunInfo, step: int) -> None:
    """A checkpoint that couldn't be written: one line naming it, why, and how to continue, then
    where the run's files are."""
    import shlex

    from speedtronic.training.trainer import latest_checkpoint

    checkpoint = latest_checkpoint(info.checkpoint_dir) if info.checkpoint_dir.is_dir() else None
    since = f"latest checkpoint: {checkpoint.name}" if checkpoint is not None else "no checkpoint"
    command = f"{typed('speedtronic')} train --run-dir {shlex.quote(str(info.run_dir))} --resume"
    print(
        f"speedtronic: error: {error}; the run stopped at step {step} ({since}); fix that, then "
        f"continue with: {command}",
        file=sys.stderr,
    )
    print(paths(info), file=sys.stderr)


def _source_of(key: str, args: argparse.Namespace) -> str:
    """Where ``key`` (``"logging.hooks[0]"``) was set: the command line, ``--config FILE``, the run's
    recorded ``config.yaml`` (``--resume``), else the embedded default config."""
    from speedtronic.training.rundir import CONFIG_NAME

    path = key.split("[", 1)[0].split(".")
    if path in (["run_dir"], ["train", "steps"]) and getattr(args, path[-1], None) is not None:
        return "command line"
    files = [(Path(args.config), False)] if args.config is not None else []
    if args.resume and args.run_dir is not None:
        files.append((Path(args.run_dir) / CONFIG_NAME, True))
    for file, own in files:
        if _sets(file, path, own=own):
            return str(file)
    return "the default config"


def _sets(file: Path, path: list[str], *, own: bool) -> bool:
    """Whether ``file`` sets the key at ``path``; ``own``: the run's own config.yaml, read as every
    file of a run is (``rundir.read_text``: never blocking on a FIFO there)."""
    import yaml

    from speedtronic.training.rundir import read_text

    try:
        text = read_text(file) if own else file.read_text(encoding="utf-8")
        values: Any = yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError):  # ValueError: not UTF-8, or not a plain file
        return False
    for part in path:
        if not isinstance(values, dict) or part not in values:
            return False
        values = values[part]
    return True


class _Stopped(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during a run: unwinds as a ``KeyboardInterrupt`` (``fit()`` ends with
    ``train_end`` ``status: interrupted``, the logger is closed on the way), then the command says how
    to continue and exits 130 or 143."""

    def __init__(self, code: int, info: RunInfo | None = None, step: int | None = None) -> None:
        super().__init__(code)
        self.code, self.info, self.step = code, info, step

    def __str__(self) -> str:
        return "SIGTERM" if self.code == 143 else "SIGINT"


class Terminated(_Stopped):
    """SIGTERM during a run (a scheduler's preemption; torchrun stopping a job's workers)."""


class _Stops:
    """What ``_stops_as_exceptions`` yields: ``deferred()`` holds SIGINT and SIGTERM back while a
    signal's exception would leave something half made (torch's import: a crash, not a stop)."""

    def __init__(self) -> None:
        self.deferring = False
        self.pending: _Stopped | None = None
        self.lost: BaseException | None = None
        self.unraisable_before: Any = sys.unraisablehook
        self.alarm_before: Any = signal.SIG_DFL

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Inside: a SIGINT or SIGTERM is noted, not raised; on leaving, the first one noted is raised
        (also when the block raised something else: the stop is what the user asked for)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.getsignal(signal.SIGINT)
        if previous is signal.default_int_handler:
            signal.signal(signal.SIGINT, self._note_interrupt)
        self.deferring = True
        try:
            yield
        finally:
            self.deferring = False
            if previous is signal.default_int_handler:
                signal.signal(signal.SIGINT, previous)
            if self.pending is not None:
                raise self.pending

    def _note_interrupt(self, signum: int, frame: object) -> None:
        self.pending = self.pending or _Stopped(128 + signal.SIGINT)

    def terminated(self, signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
        if self.deferring:
            self.pending = self.pending or Terminated(128 + signal.SIGTERM)
            return
        raise Terminated(128 + signal.SIGTERM)

    def unraisable(self, unraisable: Any) -> None:
        """``sys.unraisablehook`` while stops are exceptions. A stop's exception raised where Python
        ignores exceptions (the handler ran inside a weakref callback, as importlib's module-lock one,
        or a ``__del__``) would be lost: it is raised again by a ``SIGALRM`` a millisecond later, in
        the code that callback interrupted (and again, should that land in such a callback too).
        Anything else goes to the hook before."""
        stop = unraisable.exc_value
        if isinstance(stop, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
            self.lost = self.lost or stop
            signal.signal(signal.SIGALRM, self._again)
            signal.setitimer(signal.ITIMER_REAL, 0.001)
            return
        self.unraisable_before(unraisable)

    def _again(self, signum: int, frame: object) -> None:
        lost, self.lost = self.lost, None
        if lost is None:
            return
        if self.deferring:
            self.pending = self.pending or (
                lost if isinstance(lost, _Stopped) else _Stopped(128 + signal.SIGINT)
            )
            return
        raise lost


@contextlib.contextmanager
def _stops_as_exceptions() -> Iterator[_Stops]:
    """Turn SIGINT and the first SIGTERM into ``_Stopped``; the handler only raises (it takes no
    lock the interrupted frame may hold), or, inside ``deferred()``, notes the stop for later; a stop
    Python ignored (``_Stops.unraisable``) is raised again. A second SIGTERM ends the process at once."""
    stops = _Stops()
    if threading.current_thread() is not threading.main_thread():  # only the main thread may
        yield stops  # set handlers
        return
    previous = signal.getsignal(signal.SIGTERM)
    installed = previous not in (signal.SIG_IGN, None)  # an ignored SIGTERM stays ignored
    if installed:
        signal.signal(signal.SIGTERM, stops.terminated)
        if "TORCHELASTIC_RUN_ID" in os.environ:
            _die_with_parent(signal.SIGTERM)
    redelivers = hasattr(signal, "setitimer")  # POSIX: a stop Python ignored is raised again
    if redelivers:
        stops.alarm_before = signal.getsignal(signal.SIGALRM)
        sys.unraisablehook = stops.unraisable
    try:
        yield stops
    except _Stopped:
        raise
    except KeyboardInterrupt:
        raise _Stopped(128 + signal.SIGINT) from None
    finally:
        if redelivers:
            sys.unraisablehook = stops.unraisable_before
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, stops.alarm_before)
        if installed:
            signal.signal(signal.SIGTERM, previous)


def _say_how_to_continue(stop: _Stopped) -> None:
    """``speedtronic: interrupted at step N (...); continue with: speedtronic train --run-dir D --resume``."""
    from speedtronic.training.rundir import holds_run

    what = "interrupted" if stop.code == 130 else "terminated (SIGTERM)"
    info = stop.info
    if info is None:  # stopped while starting: nothing imported here, torch may not be
        print(f"speedtronic: {what} while starting; nothing was trained", file=sys.stderr)
        return
    if info.rank.rank != 0 or not holds_run(info.run_dir):
        print(f"speedtronic: {what}", file=sys.stderr)
        return
    import shlex

    from speedtronic.training.trainer import latest_checkpoint

    checkpoint = latest_checkpoint(info.checkpoint_dir) if info.checkpoint_dir.is_dir() else None
    if checkpoint is None:
        since = "no checkpoint yet: --resume starts again from step 0"
    else:
        since = f"latest checkpoint: {checkpoint.name}"
    command = f"{typed('speedtronic')} train --run-dir {shlex.quote(str(info.run_dir))} --resume"
    if info.rank.distributed:
        command += " (under torchrun, as before)"
    print(f"speedtronic: {what} at step {stop.step} ({since}); continue with: {command}", file=sys.stderr)
    print(paths(info, checkpoint), file=sys.stderr)


def _in_a_job() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or os.environ.get("WORLD_SIZE", "1") not in ("", "1")


def _die_with_parent(signum: int) -> None:
    """Have the kernel send ``signum`` to this process when its parent (torchrun's agent) dies."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signum, 0, 0, 0)
    if os.getppid() != parent:  # the agent died before the call took effect
        os.kill(os.getpid(), signum)


def _first_line(error: BaseException) -> str:
    """The first line of ``error``'s message, redacted (``redact_exception``): it goes to stderr."""
    from speedtronic.record.secrets import redact_exception

    text = redact_exception(error).message.strip()
    return text.splitlines()[0] if text else ""


def paths(info: RunInfo, checkpoint: Path | None = None) -> str:
    """Where each of the run's files is, one ``  label  path`` line each; ``checkpoint``: the latest
    (found in ``info.checkpoint_dir`` when not given)."""
    from speedtronic.training.rundir import rank_checkpoints

    files = dict(info.files)
    if checkpoint is None and "checkpoints" in files and info.checkpoint_dir.is_dir():
        found = rank_checkpoints(info.checkpoint_dir, 0)
        checkpoint = found[max(found)] if found else None
    if checkpoint is not None and "checkpoints" in files:
        files["checkpoints"] += f" (latest: {checkpoint.name})"
    return "\n".join(f"  {label:<12} {where}" for label, where in files.items())


def _next_commands(info: RunInfo, trackers: list[str]) -> list[str]:
    """The commands that show the run, each only where it will work: TensorBoard (when it logged
    there), the trackers' (``trackers``: ``wandb sync``...), summarize, and plot (with matplotlib, and
    a record it can draw; without matplotlib, what to install)."""
    import shlex

    run_dir = shlex.quote(str(info.run_dir))
    lines = []
    if "tensorboard" in info.files:
        tensorboard = typed("tensorboard")
        lines.append(f"  {'view':<12} {tensorboard} --logdir {shlex.quote(info.files['tensorboard'])}")
    lines += trackers
    if "metrics" in info.files:
        speedtronic = typed("speedtronic")
        lines.append(f"  {'summarize':<12} {speedtronic} summarize {run_dir}")
        if importlib.util.find_spec("matplotlib") is None:
            lines.append(f"  {'plot':<12} needs matplotlib: pip install 'speedtronic[plot]'")
        elif _has_plottable_records(Path(info.files["metrics"])):
            plot = shlex.quote(str(info.run_dir / "loss.png"))
            lines.append(f"  {'plot':<12} {speedtronic} plot {run_dir} -o {plot}")
    return lines


_PLOTTED = (b'"event":"train_step"', b'"event":"eval"')
"""What ``speedtronic plot`` draws by default, as a record's JSON line names its event."""


def _has_plottable_records(metrics: Path) -> bool:
    """Whether the run's JSONL holds a ``train_step`` or ``eval`` record (``plot`` exits 2 without
    one: ``logging.every_steps`` past the steps trained, no eval). Scanned as bytes, stopping at
    the first: a run's first ``train_step`` is near its file's start."""
    import mmap

    try:
        with metrics.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return any(data.find(marker) != -1 for marker in _PLOTTED)
    except (OSError, ValueError):  # gone, unreadable, or empty (mmap refuses 0 bytes)
        return False


def typed(program: str) -> str:
    """How to type ``program``, a command installed beside this Python, in the user's shell: its name
    when ``PATH`` finds that one, else its path (relative when under the working directory:
    ``.venv/bin/speedtronic`` after ``make run``, whose virtualenv nobody activated)."""
    import shlex
    import shutil

    script = Path(sys.executable).parent / program
    found = shutil.which(program)
    if not script.is_file() or (found is not None and Path(found).resolve() == script.resolve()):
        return program
    with contextlib.suppress(ValueError):
        script = script.relative_to(Path.cwd())
    return shlex.quote(str(script))


def summary(result: FitResult, info: RunInfo) -> str:
    """Steps, final and eval loss, throughput, where each file and each tracker's run is (W&B's
    offline directory or URL, MLflow's run id and tracking URI, the OTLP endpoint), then the commands
    that show the run (``tensorboard --logdir``, ``wandb sync``, ``speedtronic summarize``,
    ``speedtronic plot``), as typed here, each only where it will work."""
    from speedtronic.commands._trackers import tracker_lines
    from speedtronic.training.rundir import describe_changes

    loss = "n/a" if result.final_loss is None else f"{result.final_loss:.4f}"
    if result.eval_loss is not None:
        loss += f", eval loss {result.eval_loss:.4f}"
    lines = [
        f"speedtronic train: steps {result.start_step} -> {result.step} in {result.duration_s:.2f} s on "
        f"{info.device}, final loss {loss}, {result.samples_per_s:,.0f} samples/s, "
        f"{result.tokens_per_s:,.0f} tokens/s",
        f"  {'run dir':<12} {info.run_dir}",
    ]
    if result.resumed_from is not None:
        lines.append(f"  {'resumed':<12} from {result.resumed_from}")
    if info.config_changes:
        lines.append(
            f"  {'config':<12} revision {info.config_revision}: {describe_changes(info.config_changes)}"
        )
    if info.alerts is not None and info.alerts.counts:
        from speedtronic.runs.alert_records import RecordedAlerts

        rank = info.rank.rank
        raised = RecordedAlerts({(rank, rule): count for rule, count in info.alerts.counts.items()})
        of_rank = f" (rank {rank})" if info.rank.distributed else ""
        lines.append(f"  {'alerts':<12} {raised.text()}{of_rank}")
    lines.append(paths(info, result.checkpoint))
    where, commands = tracker_lines(info.hooks, typed)
    lines += where
    lines += _next_commands(info, commands)
    files = info.files
    if info.write_errors:
        written = [files[label] for label in ("metrics", "text log") if label in files]
        lines.append(
            f"speedtronic train: {info.write_errors:,} record(s) could not be written to "
            f"{' or '.join(written)}: the record of this run is incomplete"
        )
    return "\n".join(lines)
