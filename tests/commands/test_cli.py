"""`speedtronic --help` and each command's, as a terminal of any width shows them."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

import pytest

from speedtronic.commands.cli import COMMANDS, build_parser


def short_phrases(parser: argparse.ArgumentParser) -> list[str]:
    """Every parenthesised phrase of up to 30 characters in the help of ``parser``'s arguments."""
    texts = [action.help or "" for action in parser._actions]  # argparse's documented help strings
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            texts += [choice.help or "" for choice in action._choices_actions]
    return [phrase for text in texts for phrase in re.findall(r"\([^()]{1,28}\)", text)]


def help_text(command: tuple[str, ...], columns: int) -> str:
    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run(
        [sys.executable, "-m", "speedtronic", *command, "--help"],
        capture_output=True, text=True, timeout=60, check=True, env=env,
    ).stdout


@pytest.mark.parametrize("columns", [60, 80, 100])
@pytest.mark.parametrize("command", [(), *((name,) for name in COMMANDS)], ids=["speedtronic", *COMMANDS])
def test_help_never_breaks_a_short_phrase_in_parentheses(command: tuple[str, ...], columns: int) -> None:
    """"(default: the embedded one)" and every other short parenthesised phrase stays on one line."""
    parser = build_parser()
    if command:
        parser = parser._subparsers._group_actions[0].choices[command[0]]  # type: ignore[union-attr]
    phrases = short_phrases(parser)
    if not command:
        assert "(default: the embedded one)" in phrases
    shown = help_text(command, columns)
    for phrase in phrases:
        assert phrase in shown, (columns, phrase, shown)
