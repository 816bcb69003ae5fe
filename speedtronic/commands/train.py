"""``speedtronic train``: the main job, the reference trainer on a config (default: the embedded one).

Text log lines go to stdout (or ``logging.file``); the closing summary goes to stderr, so stdout stays
pure log lines. When stdout is a terminal (and tqdm is installed), a live progress bar takes stdout
instead and the text log goes to ``{run_dir}/train.log`` unless the config names a file; piped or
in CI, the plain text log stays on stdout. ``--no-progress`` keeps the plain log on a terminal too.
Under ``torchrun`` the log, the bar and the summary come from rank 0 only.

A run directory is one run: ``--resume`` continues the run recorded there (its own ``config.yaml``,
with only what this command line passes applied on top); without it, a directory that holds a run is
refused. Mistakes a user can make (a bad config, a path that can't be used) are one line
``speedtronic: error: ...`` and exit code 2; warnings are one line ``speedtronic: warning: ...``.
Records the logger could not write are counted in the closing summary, and the exit code is then 1.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TextIO

from speedtronic.commands.cli import CommandError

if TYPE_CHECKING:
    from speedtronic.runtime import RunInfo
    from speedtronic.training.trainer import FitResult

__all__ = ["add_parser", "run", "summary", "with_progress"]


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
    parser.set_defaults(func=run)


def with_progress(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with a progress bar on stdout and the text log moved to a file (unless it has one)."""
    logging = dict(config["logging"])
    if logging["file"] is None:
        logging["file"] = "{run_dir}/train.log"
    logging["hooks"] = [*logging["hooks"], {"type": "progress"}]
    return {**config, "logging": logging}


def _progress_wanted(args: argparse.Namespace) -> bool:
    from speedtronic.integrations.progress import progress_wanted

    return (
        not args.no_progress
        and progress_wanted(sys.stdout)
        and importlib.util.find_spec("tqdm") is not None
    )


def run(args: argparse.Namespace) -> int:
    from speedtronic import runtime

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
    with _one_line_warnings():
        try:
            config = runtime.load_config(args.config, overrides)
            if config["train"]["resume"] and config["run_dir"] is None:
                raise CommandError("--resume: name the run to continue with --run-dir")
            if _progress_wanted(args):
                config = runtime.load_config(with_progress(config))
            with _job_signals():
                result, info = runtime.train_from_config(config)
        except Terminated:
            print("speedtronic: error: terminated (SIGTERM); train_end records status=interrupted",
                  file=sys.stderr)
            return 128 + signal.SIGTERM
        except RuntimeError as error:
            if not _in_a_job():
                raise
            # a dead or hung peer (gloo/nccl raise RuntimeError): one line; train_end says status=failed
            print(f"speedtronic: error: rank {os.environ.get('RANK', '?')}: {type(error).__name__}: "
                  f"{_first_line(error)}", file=sys.stderr)
            return 1
        except runtime.ConfigError as error:
            raise CommandError(str(error)) from None
        except ModuleNotFoundError as error:
            if error.name not in ("torch", "yaml"):
                raise
            raise CommandError(
                f"speedtronic train requires {error.name}: pip install 'speedtronic[torch]'"
            ) from None
        except OSError as error:  # a file the run writes, made impossible by the user's file system
            where = error.filename if error.filename is not None else args.run_dir
            raise CommandError(f"{where}: {error.strerror or error}") from None
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


class Terminated(KeyboardInterrupt):
    """SIGTERM reached ``speedtronic train`` (torchrun stops a job's workers so): ``fit()`` ends with
    ``train_end`` ``status: interrupted``, the loggers close, and the command exits 143."""


def _in_a_job() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or os.environ.get("WORLD_SIZE", "1") not in ("", "1")


@contextlib.contextmanager
def _job_signals() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` while training (main thread only); under torchrun, this worker
    also gets SIGTERM when its agent dies (Linux ``PR_SET_PDEATHSIG``). Without that a killed agent
    leaves its worker running on its own (torchrun starts workers in a session of their own), and
    the other nodes' agents wait for it in torch's exit barrier (300 s) once their workers end."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated("SIGTERM")

    previous = signal.signal(signal.SIGTERM, terminate)
    if "TORCHELASTIC_RUN_ID" in os.environ:
        _die_with_parent(signal.SIGTERM)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


@contextlib.contextmanager
def _one_line_warnings() -> Iterator[None]:
    """Show warnings as ``speedtronic: warning: ...``: a user's run has no source line to point at."""

    def show(
        message: Warning | str, category: type[Warning], filename: str, lineno: int,
        file: TextIO | None = None, line: str | None = None,
    ) -> None:
        text = str(message).removeprefix("speedtronic: ").removeprefix("speedtronic ")
        print(f"speedtronic: warning: {text}", file=file or sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def summary(result: FitResult, info: RunInfo) -> str:
    """Steps, final loss, throughput, then where each file is."""
    loss = "n/a" if result.final_loss is None else f"{result.final_loss:.4f}"
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
            f"  {'config':<12} revision {info.config_revision}: {'; '.join(info.config_changes)}"
        )
    files = dict(info.files)
    if result.checkpoint is not None and "checkpoints" in files:
        files["checkpoints"] += f" (latest: {result.checkpoint.name})"
    lines += [f"  {label:<12} {where}" for label, where in files.items()]
    if info.write_errors:
        written = [files[label] for label in ("metrics", "text log") if label in files]
        lines.append(
            f"speedtronic train: {info.write_errors:,} record(s) could not be written to "
            f"{' or '.join(written)}: the record of this run is incomplete"
        )
    return "\n".join(lines)
