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


def parser_mistake(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What ``speedtronic ARGV`` prints on stderr when its parser refuses it, having exited with 2."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err


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
def test_an_unknown_option_is_one_line_naming_the_nearest(
    argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped option is one line naming the command and the option it has nearest, exit code 2."""
    assert parser_mistake(argv, capsys) == (
        f"speedtronic {argv[0]}: error: {hint} (see speedtronic {argv[0]} --help)\n"
    )


BAD_OPTIONS = {
    "train": (["--steps", "x"], "argument --steps: invalid int value: 'x'"),
    "summarize": (["--workers", "x", "r"], "argument --workers: invalid int value: 'x'"),
    "compare": (["a", "b", "--warmup", "1.5"], "argument --warmup: invalid int value: '1.5'"),
    "plot": (["a", "--smooth", "x", "-o", "a.png"], "argument --smooth: invalid float value: 'x'"),
    "replay": (["a", "--wandb-mode", "x"], "argument --wandb-mode: invalid choice: 'x'"),
    "tail": (["a", "--every"], "argument --every: expected one argument"),
}
"""A parser-level mistake for every command: a value of the wrong type, a bad choice, no value."""


@pytest.mark.parametrize("command", COMMANDS)
def test_every_commands_parser_mistake_is_one_line(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A bad option value, for every command, is one line naming the command, the argument and what was
    expected, pointing at --help; exit code 2."""
    argv, problem = BAD_OPTIONS[command]
    err = parser_mistake([command, *argv], capsys)
    assert err.count("\n") == 1, err
    assert err.startswith(f"speedtronic {command}: error: {problem}"), err
    assert err.endswith(f" (see speedtronic {command} --help)\n"), err


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        ([], "speedtronic: error: the following arguments are required: COMMAND (see speedtronic --help)"),
        (
            ["sumarize"],
            "speedtronic: error: argument COMMAND: invalid choice: 'sumarize' (choose from "
            + ", ".join(map(repr, COMMANDS))
            + ") (see speedtronic --help)",
        ),
        (
            ["plot", "runs/a"],
            "speedtronic plot: error: the following arguments are required: -o/--output "
            "(see speedtronic plot --help)",
        ),
        (
            ["summarize"],
            "speedtronic summarize: error: the following arguments are required: RUN "
            "(see speedtronic summarize --help)",
        ),
    ],
)
def test_a_missing_argument_or_command_is_one_line(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No command, an unknown command, a missing required argument: one line, exit code 2."""
    assert parser_mistake(argv, capsys) == line + "\n"


def test_a_parser_mistake_is_one_line_from_the_console() -> None:
    """The real command: one line on stderr, nothing on stdout, exit code 2."""
    done = subprocess.run(
        [sys.executable, "-m", "speedtronic", "summarize", "--workers", "x", "runs/a"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "speedtronic summarize: error: argument --workers: invalid int value: 'x' "
        "(see speedtronic summarize --help)\n"
    )


def test_help_is_argparses_usage_and_options() -> None:
    """--help is unchanged: argparse's usage line, then the options, exit code 0."""
    shown = help_text(("summarize",), 100)
    assert shown.startswith("usage: speedtronic summarize [-h]")
    assert "--workers N" in shown
