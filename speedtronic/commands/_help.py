"""The CLI's help and error lines: argparse's help, wrapped so a short phrase in parentheses stays
whole; a parser's error, and any error's text, as one line."""

from __future__ import annotations

import argparse
import re
import textwrap
from typing import NoReturn

__all__ = ["CommandsHelp", "KeepsPhrases", "OneLineErrors", "one_line"]

_SHORT_PHRASE = re.compile(r"\([^()]{1,40}\)")
_KEPT_SPACE = "\x00"


class KeepsPhrases(argparse.HelpFormatter):
    """Wraps help text as argparse does, but never inside a short phrase in parentheses:
    ``(default: the embedded one)`` moves to the next line whole."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        def keep(match: re.Match[str]) -> str:
            phrase = match.group()
            return phrase.replace(" ", _KEPT_SPACE) if len(phrase) <= width else phrase

        text = _SHORT_PHRASE.sub(keep, " ".join(text.split()))
        return [line.replace(_KEPT_SPACE, " ") for line in textwrap.wrap(text, width, break_on_hyphens=False)]


class CommandsHelp(KeepsPhrases, argparse.RawDescriptionHelpFormatter):
    """The top-level help: its description and epilog as written, its commands' help wrapped."""


def one_line(text: str) -> str:
    """``text`` as one line: its lines, stripped, joined by ``"; "`` (an SDK's error that spans several,
    such as pydantic's ``1 validation error for Settings`` / ``mode`` / ``Input should be ...``)."""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


class OneLineErrors(argparse.ArgumentParser):
    """A parser whose mistakes (an unknown option, a bad value, a missing argument) are one line on
    stderr, exit code 2: ``speedtronic summarize: error: argument --workers: invalid int value: 'x'
    (see speedtronic summarize --help)``, instead of argparse's usage and then the error. ``--help``
    is argparse's."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")
