"""A hook failure's text holds a secret (in its message, or in its chain of causes and contexts and its
notes): no sink, console, warning or printed traceback shows it.

Each run is a child process with a text log on its stdout, a JSONL file and a hook that raises with a
``password=`` in its message; afterwards every file it wrote and all it printed (warnings and an
uncaught traceback included) are scanned. The child's source never holds the canary whole, and the
same run with ``redact=False`` shows the scan finds it when it is there.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability.conftest import child_env

CANARY = "hunter2-CANARY"
"""Looks like nothing: hidden only because it follows ``password=``."""

CHILD = """
import sys
from speedtronic.hooks.dispatch import KEPT_TAIL, REDACT_MARGIN
from speedtronic.profiling import MetricLogger

SECRET = "hunter2-" + "CANARY"   # never whole in this file
OUT, MODE, REDACT = sys.argv[1], sys.argv[2], sys.argv[3] == "redact"


def failing(event, payload):
    if MODE == "long":  # the value starts where the kept end of a long failure text begins
        tail = " " + "y" * (KEPT_TAIL + REDACT_MARGIN - len(SECRET) - 1)
        raise RuntimeError("x" * 200_000 + " password=" + SECRET + tail)
    if MODE.startswith("chain"):  # a clean message; the secret in its cause, its context, its note
        try:
            try:
                raise KeyError(f"password={{SECRET}}")
            except KeyError as cause:
                raise ValueError("api_key", SECRET) from cause
        except ValueError:
            error = RuntimeError("login refused")
            if hasattr(error, "add_note"):  # Python 3.11+
                error.add_note(f"while sending token={{SECRET}}")
            raise error
    raise RuntimeError(f"login refused: password={{SECRET}}")


logger = MetricLogger(
    json_file=OUT + "/metrics.jsonl", stream=sys.stdout, hooks=[failing], redact=REDACT,
    max_line_bytes=None, strict_hooks=MODE in ("strict", "chain-strict"),
)
logger.emit("train_step", {{"step": 1, "loss": 0.5}})
logger.close()
"""


def run_child(tmp_path: Path, mode: str, redact: str = "redact") -> tuple[str, Path]:
    """Run the child in ``mode``; everything it printed, and the folder of its files."""
    out = tmp_path / f"{mode}-{redact}"
    out.mkdir()
    script = out / "child.py"
    script.write_text(CHILD.format(), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script), str(out), mode, redact],
        capture_output=True, text=True, timeout=120, env=child_env(), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == (1 if mode.endswith("strict") else 0), result.stderr[-2000:]
    return result.stdout + result.stderr, out


def files_holding(root: Path, secret: str) -> list[str]:
    """The files under ``root`` (the child's source left out) that hold ``secret``."""
    return sorted(
        path.name
        for path in root.rglob("*")
        if path.is_file() and path.name != "child.py" and secret.encode() in path.read_bytes()
    )


class TestLongFailureText:
    def test_a_secret_at_the_kept_end_is_redacted(self, tmp_path: Path) -> None:
        """A password= whose value starts the kept end of a long failure text is still hidden, with no
        line limit, in the hook_error record, the text log and the warning."""
        printed, out = run_child(tmp_path, "long")
        assert files_holding(out, CANARY) == []
        assert CANARY not in printed
        assert "hook_error" in (out / "metrics.jsonl").read_text()
        assert "<truncated:" in (out / "metrics.jsonl").read_text()

    def test_the_scan_finds_it_without_redaction(self, tmp_path: Path) -> None:
        """redact=False: a failure naming the secret writes it, so the scan above is of the right places."""
        printed, out = run_child(tmp_path, "short", "plain")
        assert files_holding(out, CANARY) == ["metrics.jsonl"]
        assert CANARY in printed


class TestStrictHooks:
    def test_the_uncaught_hook_error_prints_no_secret(self, tmp_path: Path) -> None:
        """strict_hooks: the HookError's printed traceback (its cause's included) hides the secret and
        still says what failed, in which hook, and where."""
        printed, out = run_child(tmp_path, "strict")
        assert CANARY not in printed
        assert files_holding(out, CANARY) == []
        assert "HookError: hook 'failing' failed during 'train_step': RuntimeError: login refused" in printed
        assert "password=[REDACTED]" in printed
        assert "in failing" in printed  # the hook's own traceback, redacted

    def test_without_redaction_the_cause_is_chained(self, tmp_path: Path) -> None:
        """redact=False: the hook's exception is the HookError's cause, printed as Python prints one."""
        printed, _ = run_child(tmp_path, "strict", "plain")
        assert "The above exception was the direct cause" in printed
        assert CANARY in printed


class TestChainedFailure:
    def test_no_sink_or_print_holds_a_secret_of_the_chain(self, tmp_path: Path) -> None:
        """A hook raises a clean exception whose context, its cause and its note hold the secret:
        the hook_error record (its traceback prints the whole chain), the text log and the warning
        hide it, and still say what failed."""
        printed, out = run_child(tmp_path, "chain")
        assert files_holding(out, CANARY) == []
        assert CANARY not in printed
        records = (out / "metrics.jsonl").read_text()
        assert "RuntimeError: login refused" in records
        assert "During handling of the above exception" in records  # the chain, redacted, is there

    def test_strict_hooks_print_no_secret_of_the_chain(self, tmp_path: Path) -> None:
        """strict_hooks: the uncaught HookError's printed traceback drops the chain that held it."""
        printed, out = run_child(tmp_path, "chain-strict")
        assert CANARY not in printed
        assert files_holding(out, CANARY) == []
        assert "HookError: hook 'failing' failed during 'train_step': RuntimeError: login refused" in printed

    def test_the_scan_finds_the_chain_without_redaction(self, tmp_path: Path) -> None:
        """redact=False: the chain's secret reaches the hook_error record (the scan looks there)."""
        _, out = run_child(tmp_path, "chain", "plain")
        assert files_holding(out, CANARY) == ["metrics.jsonl"]


def test_a_plain_failure_keeps_its_cause() -> None:
    """strict_hooks with nothing to hide: the hook's exception stays the HookError's __cause__."""
    import io

    from speedtronic.errors import HookError
    from speedtronic.profiling import MetricLogger

    def bad(event: str, payload: dict[str, object]) -> None:
        raise ValueError("boom")

    logger = MetricLogger(stream=io.StringIO(), hooks=[bad], strict_hooks=True)
    with pytest.raises(HookError, match="boom") as raised:
        logger.emit("train_step", {"step": 1})
    logger.close()
    assert isinstance(raised.value.__cause__, ValueError)
