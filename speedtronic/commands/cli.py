"""The ``speedtronic`` command: one subcommand per module in ``speedtronic.commands``, each imported
only when the CLI runs it; Ctrl-C and SIGTERM end it with one line (exit 130 or 143)."""

from __future__ import annotations

import contextlib
import difflib
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

__all__ = ["COMMANDS", "Terminated", "main"]

COMMANDS: tuple[str, ...] = ("train", "summarize", "compare", "plot", "replay", "tail")
"""Module names under ``speedtronic.commands``, in the order ``--help`` lists them."""

DESCRIPTION = """\
Observability for PyTorch training. 'train' runs the reference trainer with speedtronic's logger: a
readable text log and a JSONL record of every event (loss, throughput, memory, checkpoints,
trouble), plus TensorBoard or W&B when configured. The other commands read those records back."""

EPILOG = """\
examples:
  speedtronic train --steps 200               train the reference model (runs/<timestamp>/)
  speedtronic summarize runs/a runs/b         loss, throughput and trouble, side by side
  speedtronic compare runs/a runs/b           side by side; --max-regression 5% gates CI
  speedtronic plot runs/a -o loss.png         loss and learning-rate curves to a PNG
  speedtronic replay runs/a --tensorboard tb  a finished run into TensorBoard, as if live
  speedtronic tail runs/a                     watch a run as it is written (progress, alerts, stalls)

'speedtronic COMMAND --help' lists a command's options."""


class CommandError(Exception):
    """A user-facing failure: printed as one line ``speedtronic: error: ...``, exit code ``code``: 2
    (the default) for a user's mistake, 1 for work that failed (a hook that failed mid-replay)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class Terminated(BaseException):
    """SIGTERM while a command runs: unwinds like ``KeyboardInterrupt``; ``main`` exits 143."""


def build_parser(commands: Sequence[str] = COMMANDS) -> argparse.ArgumentParser:
    """The CLI's parser, with the sub-parsers of ``commands`` (all of them for ``--help``)."""
    import argparse  # here, not above: ``main`` takes the signals before anything heavier is imported
    import importlib

    from speedtronic._version import __version__
    from speedtronic.commands._help import CommandsHelp, KeepsPhrases, OneLineErrors

    parser = OneLineErrors(
        prog="speedtronic",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=CommandsHelp,
    )
    parser.add_argument("--version", action="version", version=f"speedtronic {__version__}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, title="commands", parser_class=OneLineErrors
    )
    for name in commands:
        importlib.import_module(f"speedtronic.commands.{name}").add_parser(subparsers)
    for command in subparsers.choices.values():
        if command.formatter_class is argparse.HelpFormatter:
            command.formatter_class = KeepsPhrases
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, but an option the command doesn't know is reported by the command's
    own parser (naming the nearest option it has), not by the top-level one."""
    args, unknown = parser.parse_known_args(argv)
    if not unknown:
        return args
    # argparse lists a parser's sub-parsers and options nowhere public but in `_actions`
    command: argparse.ArgumentParser = next(
        action.choices[args.command]
        for action in parser._actions
        if isinstance(action.choices, dict) and args.command in action.choices
    )
    known = [option for action in command._actions for option in action.option_strings]
    option = next((word.split("=", 1)[0] for word in unknown if word.startswith("-")), "")
    nearest = difflib.get_close_matches(option, known, n=1) if option else []
    hint = f" (did you mean {nearest[0]}?)" if nearest else ""
    command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")


def main(argv: Sequence[str] | None = None) -> int:
    """The console entry point: runs the command in ``argv`` (default ``sys.argv[1:]``); the exit code."""
    signals = _Signals(sys.argv[1:2] if argv is None else list(argv)[:1])  # first of all
    try:
        return _run(sys.argv[1:] if argv is None else list(argv), signals.started)
    finally:
        if argv is None:  # the process ends next: a signal now ends it at once, with one line
            signals.ending()
        else:  # called in-process (a test, a script): its handlers are put back
            signals.restore()


def _run(argv: list[str], started: Callable[[], None]) -> int:
    """Parse ``argv`` and run its command; ``started()`` right before the command runs."""
    # The command named first is the only one whose module is needed; anything else (--help, --version,
    # a typo) gets every command, so the help and the "invalid choice" message list them all.
    parser = build_parser(argv[:1] if argv[:1] and argv[0] in COMMANDS else COMMANDS)
    args = _parse(parser, argv)
    from speedtronic.commands._help import one_line
    from speedtronic.commands._warnings import one_line_warnings

    try:
        started()
        with one_line_warnings():  # a warning (a hook that failed, under tail) is a line like the others
            return int(args.func(args))
    except CommandError as error:
        print(f"speedtronic: error: {one_line(str(error))}", file=sys.stderr)
        return error.code
    except BrokenPipeError:  # `speedtronic summarize ... | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print("speedtronic: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("speedtronic: terminated (SIGTERM)", file=sys.stderr)
        return 143


_STOPPED = {int(signal.SIGINT): "interrupted", int(signal.SIGTERM): "terminated (SIGTERM)"}
"""What the CLI's line says for each signal it takes."""


class _Signals:
    """SIGINT and SIGTERM for the CLI's life, taken first thing in ``main``.

    While the CLI starts, and after the command has returned: one line, then the process ends at once
    with 128 + the signal (``stop_now``). ``started()`` hands them to the command: SIGINT raises
    ``KeyboardInterrupt``, SIGTERM ``Terminated``. ``restore()`` puts back the handlers found (``main``
    called in-process). An ignored signal (``nohup``, a background job) stays ignored; off the main
    thread (where Python allows no handler) nothing changes."""

    def __init__(self, command: Sequence[str]) -> None:
        self._nothing = "nothing was trained" if list(command) == ["train"] else "nothing was done"
        self._found: dict[int, Any] = {}
        self._when = " while starting"
        if threading.current_thread() is threading.main_thread():
            for signum in _STOPPED:
                previous = signal.getsignal(signum)
                if previous not in (signal.SIG_IGN, None):
                    self._found[signum] = previous
                    signal.signal(signum, self.stop_now)

    def stop_now(self, signum: int, frame: FrameType | None) -> None:
        line = f"speedtronic: {_STOPPED[signum]}{self._when}"
        with contextlib.suppress(OSError):  # a closed stderr: the exit code still says it
            os.write(2, (f"{line}; {self._nothing}\n" if self._when else f"{line}\n").encode())
        os._exit(128 + signum)

    def started(self) -> None:
        if self._found.get(signal.SIGINT) is not None:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if self._found.get(signal.SIGTERM) is not None:
            signal.signal(signal.SIGTERM, _terminated)

    def ending(self) -> None:
        """The command has returned and the process exits next: what it printed is flushed, and a
        signal from now on ends the process at once (no ``KeyboardInterrupt`` inside exit handlers)."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed or broken stream: nothing more to save
                stream.flush()
        self._when = ""
        for signum in self._found:
            signal.signal(signum, self.stop_now)

    def restore(self) -> None:
        for signum, previous in self._found.items():
            signal.signal(signum, previous)


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated
