"""`speedtronic --help` and each command's, as a terminal of any width shows them."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

import pytest

from speedtronic.commands.cli import COMMANDS, build_parser, main


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
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    ).stdout


@pytest.mark.parametrize("columns", [60, 80, 100])
@pytest.mark.parametrize("command", [(), *((name,) for name in COMMANDS)], ids=["speedtronic", *COMMANDS])
def test_help_never_breaks_a_short_phrase_in_parentheses(command: tuple[str, ...], columns: int) -> None:
    """ "(default: the embedded one)" and every other short parenthesised phrase stays on one line."""
    parser = build_parser()
    if command:
        parser = parser._subparsers._group_actions[0].choices[command[0]]  # type: ignore[union-attr]
    phrases = short_phrases(parser)
    if not command:
        assert "(default: the embedded one)" in phrases
    shown = help_text(command, columns)
    for phrase in phrases:
        assert phrase in shown, (columns, phrase, shown)


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["train", "--stesp", "5"], "unrecognized arguments: --stesp 5 (did you mean --steps?)"),
        (["train", "--steps", "5", "extra"], "unrecognized arguments: extra"),
        (["summarize", "--jsn", "runs/a"], "unrecognized arguments: --jsn (did you mean --json?)"),
        (
            ["plot", "a", "-o", "a.png", "--tittle=t"],
            "unrecognized arguments: --tittle=t (did you mean --title?)",
        ),
    ],
)
def test_an_unknown_option_gets_the_commands_usage(
    argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped option shows the command's own usage and the option it has nearest, exit code 2."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    usage, error = capsys.readouterr().err.strip().rsplit("\n", 1)
    assert usage.startswith(f"usage: speedtronic {argv[0]} [-h]")
    assert error == f"speedtronic {argv[0]}: error: {hint}"
