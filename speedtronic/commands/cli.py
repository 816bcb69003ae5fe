"""The ``speedtronic`` command: one subcommand per module in ``speedtronic.commands``.

Each command module defines ``add_parser(subparsers)``, which registers its sub-parser and sets
``func`` (``argparse.Namespace -> int``, the exit code) as a default. Modules are imported only when
the CLI runs, so ``import speedtronic`` stays light, and ``speedtronic summarize ...`` imports only
its own command's module: start-up is part of what a user waits for.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys
import textwrap
from collections.abc import Sequence

__all__ = ["COMMANDS", "main"]

COMMANDS: tuple[str, ...] = ("train", "summarize", "plot", "replay")
"""Module names under ``speedtronic.commands``, in the order ``--help`` lists them."""

DESCRIPTION = """\
Observability for PyTorch training. 'train' runs the reference trainer with speedtronic's logger: a
readable text log and a JSONL record of every event (loss, throughput, memory, checkpoints,
trouble), plus TensorBoard or W&B when configured. The other commands read those records back."""

EPILOG = """\
examples:
  speedtronic train --steps 200               train the reference model (runs/<timestamp>/)
  speedtronic summarize runs/a runs/b         loss, throughput and trouble, side by side
  speedtronic plot runs/a -o loss.png         loss and throughput curves to a PNG
  speedtronic replay runs/a --tensorboard tb  a finished run into TensorBoard, as if live

'speedtronic COMMAND --help' lists a command's options."""


_SHORT_PHRASE = re.compile(r"\([^()]{1,40}\)")
_KEPT_SPACE = "\x00"


class _KeepsPhrases(argparse.HelpFormatter):
    """Wraps help text as argparse does, but never inside a short phrase in parentheses:
    ``(default: the embedded one)`` moves to the next line whole."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        def keep(match: re.Match[str]) -> str:
            phrase = match.group()
            return phrase.replace(" ", _KEPT_SPACE) if len(phrase) <= width else phrase

        text = _SHORT_PHRASE.sub(keep, " ".join(text.split()))
        return [line.replace(_KEPT_SPACE, " ") for line in textwrap.wrap(text, width, break_on_hyphens=False)]


class _Formatter(_KeepsPhrases, argparse.RawDescriptionHelpFormatter):
    """The top-level help: its description and epilog as written, its commands' help wrapped."""


class CommandError(Exception):
    """A user-facing failure: printed as one line ``speedtronic: error: ...``, exit code 2."""


def build_parser(commands: Sequence[str] = COMMANDS) -> argparse.ArgumentParser:
    """The CLI's parser, with the sub-parsers of ``commands`` (all of them for ``--help``)."""
    from speedtronic._version import __version__

    parser = argparse.ArgumentParser(
        prog="speedtronic",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"speedtronic {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, title="commands")
    for name in commands:
        importlib.import_module(f"speedtronic.commands.{name}").add_parser(subparsers)
    for command in subparsers.choices.values():
        if command.formatter_class is argparse.HelpFormatter:
            command.formatter_class = _KeepsPhrases
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, but an option the command doesn't know is reported by the command's
    own parser (its usage, and the nearest option it has), not by the top-level one."""
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
    argv = sys.argv[1:] if argv is None else list(argv)
    # The command named first is the only one whose module is needed; anything else (--help, --version,
    # a typo) gets every command, so the help and the "invalid choice" message list them all.
    parser = build_parser(argv[:1] if argv[:1] and argv[0] in COMMANDS else COMMANDS)
    args = _parse(parser, argv)
    try:
        return int(args.func(args))
    except CommandError as error:
        print(f"speedtronic: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `speedtronic summarize ... | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print("speedtronic: interrupted", file=sys.stderr)
        return 130
