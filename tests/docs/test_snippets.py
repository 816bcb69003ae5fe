"""Every ```python block in README.md and docs/*.md runs, and prints what the docs say it prints.

The convention (also in README.md, "About these docs"):

- Each fenced block whose info string is ``python`` is one snippet. It runs as a script in a fresh
  interpreter (``sys.executable``), in an empty temporary directory, with the repository first on
  ``PYTHONPATH``, ``WANDB_MODE=offline`` and ``WANDB_DIR`` in that directory. It must exit with 0.
- A line ``<!-- output -->`` just before a fenced block (blank lines between are fine) marks that
  block as the exact stdout of the nearest ``python`` block above it; ``<!-- output: PATH -->`` marks
  it as the exact content of the file ``PATH`` (relative to the snippet's directory) once the snippet
  has run. Prose between the snippet and the marker ("prints", "and appends to ...") is free.
- Before comparing, both sides are normalised: local timestamps (``2026-01-01 12:00:00``), ISO 8601 /
  RFC 3339 timestamps and ``elapsed_s`` values become placeholders, trailing spaces and trailing blank
  lines are dropped. Nothing else is: other numbers must match as printed.
- Other blocks (``sh``, ``text``, ``json``, ``yaml``) without a marker are not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TIMEOUT_S = 300

_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<info>[^`]*)$")
_MARKER = re.compile(r"^\s*<!--\s*output(?::\s*(?P<path>\S+))?\s*-->\s*$")
_ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?")
_LOCAL_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
_ELAPSED = re.compile(r"""(elapsed_s["']?\s*[=:]\s*)-?\d[\d.]*(?:[eE][+-]?\d+)?""")


@dataclass
class Expected:
    """A block the docs present as a snippet's output: its stdout (``path`` None) or a file's content."""

    text: str
    line: int
    path: str | None


@dataclass
class Snippet:
    page: Path
    line: int
    code: str
    expected: list[Expected] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def parse(page: Path) -> list[Snippet]:
    """The page's python blocks, each with the output blocks marked for it."""
    lines = page.read_text("utf-8").splitlines()
    snippets: list[Snippet] = []
    marker: tuple[int, str | None] | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        found = _MARKER.match(line)
        if found:
            marker = (index + 1, found.group("path"))
            index += 1
            continue
        fence = _FENCE.match(line)
        if not fence:
            if line.strip() and marker is not None:
                raise ValueError(f"{page.name}:{marker[0]}: an output marker must be followed by a block")
            index += 1
            continue
        indent = len(fence.group("indent"))
        start = index + 1
        end = start
        while end < len(lines) and not re.match(r"^\s*```\s*$", lines[end]):
            end += 1
        if end == len(lines):
            raise ValueError(f"{page.name}:{index + 1}: unclosed code block")
        body = "\n".join(text[indent:] for text in lines[start:end]) + "\n"
        info = fence.group("info").strip()
        if marker is not None:
            if not snippets:
                raise ValueError(f"{page.name}:{marker[0]}: an output marker with no python block above it")
            snippets[-1].expected.append(Expected(body, index + 1, marker[1]))
            marker = None
        elif info == "python":
            snippets.append(Snippet(page, index + 1, body))
        index = end + 1
    if marker is not None:
        raise ValueError(f"{page.name}:{marker[0]}: an output marker at the end of the page")
    return snippets


def normalise(text: str) -> str:
    """``text`` with timestamps and ``elapsed_s`` values replaced, trailing whitespace dropped."""
    text = _ISO_TIME.sub("<iso-time>", text)
    text = _LOCAL_TIME.sub("<local-time>", text)
    text = _ELAPSED.sub(r"\1<elapsed>", text)
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())


SNIPPETS = [snippet for page in PAGES for snippet in parse(page)]


def run(snippet: Snippet, directory: Path) -> subprocess.CompletedProcess[str]:
    script = directory / "snippet.py"
    script.write_text(snippet.code, "utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(WANDB_MODE="offline", WANDB_DIR=str(directory), WANDB_SILENT="true", PYTHONUTF8="1")
    return subprocess.run(
        [sys.executable, script.name],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


class TestConvention:
    def test_the_readme_has_snippets(self) -> None:
        """The README's first-screen example is found, with its output blocks."""
        readme = [s for s in SNIPPETS if s.page.name == "README.md"]
        assert readme
        assert readme[0].expected

    def test_markers_attach_to_the_snippet_above(self, tmp_path: Path) -> None:
        """A marker names the next block as the output of the python block above it."""
        page = tmp_path / "page.md"
        page.write_text(
            "```python\nprint(1)\n```\n\nprints\n\n<!-- output -->\n```text\n1\n```\n"
            "<!-- output: out.txt -->\n\n```\nx\n```\n```sh\nls\n```\n",
            "utf-8",
        )
        (snippet,) = parse(page)
        assert snippet.code == "print(1)\n"
        assert [(e.text, e.path) for e in snippet.expected] == [("1\n", None), ("x\n", "out.txt")]

    def test_a_marker_without_a_snippet_is_refused(self, tmp_path: Path) -> None:
        """An output block with nothing to compare it with is a mistake in the page."""
        page = tmp_path / "page.md"
        page.write_text("<!-- output -->\n```text\n1\n```\n", "utf-8")
        with pytest.raises(ValueError, match="no python block"):
            parse(page)

    def test_normalise_replaces_only_times_and_elapsed(self) -> None:
        """Timestamps and elapsed_s vary from run to run; every other value is compared as printed."""
        line = (
            "2026-01-01 12:00:00 | INFO | x loss=1.2 elapsed_s=0.000105 "
            '{"elapsed_s":1e-05,"t":"2026-01-01T12:00:00.123456Z"}'
        )
        assert normalise(line) == (
            '<local-time> | INFO | x loss=1.2 elapsed_s=<elapsed> {"elapsed_s":<elapsed>,"t":"<iso-time>"}'
        )


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.name for s in SNIPPETS])
def test_snippet(snippet: Snippet, tmp_path: Path) -> None:
    """The snippet exits with 0, and prints (and writes) what its page shows."""
    result = run(snippet, tmp_path)
    assert result.returncode == 0, (
        f"{snippet.name} exited with {result.returncode}\n"
        f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )
    for expected in snippet.expected:
        if expected.path is None:
            actual, what = result.stdout, "stdout"
        else:
            actual, what = (tmp_path / expected.path).read_text("utf-8"), expected.path
        assert normalise(actual) == normalise(expected.text), (
            f"{snippet.name}: {what} differs from the block at line {expected.line}"
        )
