"""``speedtronic --version`` and ``--help``, run as a user runs them."""

from __future__ import annotations

import subprocess
import sys

import speedtronic
from speedtronic.commands.cli import COMMANDS


def speedtronic_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "speedtronic", *args], capture_output=True, text=True, timeout=60, check=False
    )


class TestTopLevelOptions:
    def test_version_prints_the_package_version(self) -> None:
        """--version: one line, 'speedtronic <version>', exit 0."""
        done = speedtronic_command("--version")
        assert (done.returncode, done.stdout) == (0, f"speedtronic {speedtronic.__version__}\n")

    def test_help_describes_the_tool_and_every_command(self) -> None:
        """--help says what the tool does, names each command with what it does, and shows examples."""
        done = speedtronic_command("--help")
        assert done.returncode == 0, done.stderr
        assert "Observability for PyTorch training" in done.stdout
        for name in COMMANDS:
            assert f"  speedtronic {name} " in done.stdout  # an example of each
        assert "module" not in done.stdout

    def test_the_plot_example_says_what_plot_draws(self) -> None:
        """The plot example names the curves a plot draws by default (loss and lr), not throughput."""
        from speedtronic.runs.plot import DEFAULT_KEYS

        done = speedtronic_command("--help")
        (line,) = [line for line in done.stdout.splitlines() if line.startswith("  speedtronic plot ")]
        assert DEFAULT_KEYS == ("loss", "lr")
        assert "loss and learning-rate curves" in line
        assert "throughput" not in line
