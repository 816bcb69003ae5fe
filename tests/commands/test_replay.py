"""`speedtronic replay` as a user runs it: a failed replay leaves no target behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import user_package
from tests.runs.conftest import assert_one_line_error, log_run


@pytest.fixture
def run_file(tmp_path: Path) -> Path:
    path = tmp_path / "run" / "metrics.jsonl"
    log_run(path)
    return path


def replay(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "speedtronic", "replay", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=dict(os.environ),
    )


class TestAFailedReplayCreatesNoTarget:
    @pytest.mark.parametrize("first", [True, False], ids=["bad_hook_last", "bad_hook_first"])
    def test_a_bad_hook_option(self, tmp_path: Path, run_file: Path, first: bool) -> None:
        """--tensorboard tb with a --hook whose option the hook doesn't take: exit 2, one line naming
        the option and the accepted ones, and neither tb nor the hook's directory exists."""
        pytest.importorskip("tensorboard")
        good = ("--tensorboard", "tb")
        bad = ("--hook", "tensorboard:log_dir=tb2,bogus=1")
        done = replay(run_file, *(good + bad if first else bad + good), cwd=tmp_path)
        assert_one_line_error(done, "tensorboard hook", "'bogus'", "accepts", "log_dir")
        assert not (tmp_path / "tb").exists()
        assert not (tmp_path / "tb2").exists()

    def test_a_target_directory_that_was_there_stays(self, tmp_path: Path, run_file: Path) -> None:
        """An empty TensorBoard directory the user made stays, empty, when the replay fails."""
        pytest.importorskip("tensorboard")
        (tmp_path / "tb").mkdir()
        bad = "tensorboard:log_dir=tb2,bogus=1"
        done = replay(run_file, "--tensorboard", "tb", "--hook", bad, cwd=tmp_path)
        assert done.returncode == 2
        assert list((tmp_path / "tb").iterdir()) == []


USER_HOOKS = '''
class Fails:
    """A hook that fails at its second record."""

    def __init__(self):
        self.seen = 0

    def on_event(self, event, payload):
        self.seen += 1
        if self.seen == 2:
            raise RuntimeError("the tracker refused the record")


class Warns:
    """A hook that warns at its first record, as an SDK does about a value it changed."""

    def __init__(self):
        self.seen = 0

    def on_event(self, event, payload):
        import warnings

        self.seen += 1
        if self.seen == 1:
            warnings.warn("the tracker rounded a value", UserWarning, stacklevel=1)


def many_lines(**options):
    raise ValueError("1 validation error for Settings\\nmode\\n  Input should be 'online' or 'offline'")
'''


class TestAHookThatFails:
    def test_mid_replay_is_one_line_exit_1(self, tmp_path: Path, run_file: Path) -> None:
        """A hook that raises while records are delivered: one line saying the replay is incomplete,
        with the hook's error; exit 1 (the work failed; it was a traceback)."""
        user_package(tmp_path, "myhooks", USER_HOOKS)
        done = replay(run_file, "--hook", "myhooks:Fails", cwd=tmp_path)
        assert done.returncode == 1, done.stderr
        assert done.stderr.splitlines() == [
            f"speedtronic: error: replay: a hook failed; {run_file} was not replayed in full: "
            "RuntimeError: the tracker refused the record"
        ]

    def test_a_hook_warning_is_one_line(self, tmp_path: Path, run_file: Path) -> None:
        """A hook's warning during a replay is speedtronic's own one line saying whose it is, not
        Python's two (file:line: UserWarning, then the source line); the replay goes on, exit 0."""
        user_package(tmp_path, "myhooks", USER_HOOKS)
        done = replay(run_file, "--hook", "myhooks:Warns", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        lines = done.stderr.splitlines()
        assert lines[0] == "speedtronic: warning: from myhooks: the tracker rounded a value"
        assert lines[-1].startswith("replayed "), lines
        assert not any("UserWarning" in line for line in lines), lines

    def test_a_hook_module_with_a_syntax_error_is_one_line(self, tmp_path: Path, run_file: Path) -> None:
        """--hook package:factory whose module can't even be compiled: one line naming the type and the
        SyntaxError, exit 2 (it was a traceback)."""
        user_package(tmp_path, "broken_hooks", "def make(:\n")
        done = replay(run_file, "--hook", "broken_hooks:make", cwd=tmp_path)
        assert_one_line_error(
            done,
            "hook type 'broken_hooks:make' (broken_hooks:make) can't be imported: SyntaxError: invalid "
            "syntax",
        )

    def test_an_error_of_several_lines_is_one_line(self, tmp_path: Path, run_file: Path) -> None:
        """A factory whose error spans lines (pydantic's, from wandb's Settings): one line, exit 2."""
        user_package(tmp_path, "myhooks", USER_HOOKS)
        done = replay(run_file, "--hook", "myhooks:many_lines", cwd=tmp_path)
        assert_one_line_error(
            done,
            "replay: myhooks:many_lines hook can't be created: ValueError: 1 validation error for "
            "Settings; mode; Input should be 'online' or 'offline'",
        )

    @pytest.mark.parametrize(
        ("hook", "problem"),
        [
            ("otel:endpoint=collector", "OtelHook: endpoint must be an http:// or https:// URL with a host"),
            ("progress:total=x", "ProgressHook: total is the run's"),
            ("progress:initial=3", "ProgressHook: initial is the run's"),
        ],
    )
    def test_an_option_found_wrong_only_later_is_refused_up_front(
        self, tmp_path: Path, run_file: Path, hook: str, problem: str
    ) -> None:
        """An OTel endpoint that is no URL, a progress bar's total: refused when the hook is made (they
        failed at the first export or the first record, a traceback)."""
        pytest.importorskip("opentelemetry.sdk" if hook.startswith("otel") else "tqdm")
        done = replay(run_file, "--hook", hook, cwd=tmp_path)
        assert_one_line_error(done, problem)


HOOK_TYPE_MISTAKES = [
    ("tensorboard:log_dir=[1,2]", "tensorboard hook: log_dir: expected text or a path, got a list"),
    ("tensorboard:flush_secs=true", "tensorboard hook: flush_secs: expected a number, got True"),
    (
        'tensorboard:events={"train_step":5}',
        "tensorboard hook: events['train_step']: expected a list of text, got 5",
    ),
    ("tensorboard:skip=loss", "tensorboard hook: skip: expected a list of text, got text"),
    ("mlflow:tracking_uri=5", "mlflow hook: tracking_uri: expected text, got 5"),
    ("mlflow:tags=[1]", "mlflow hook: tags: expected a mapping, got a list"),
    ("wandb:project=5", 'wandb hook: project: expected text, got 5; quote it to give it as text ("5")'),
    ("wandb:log_checkpoints=1", "wandb hook: log_checkpoints: expected true or false, got 1"),
    ("otel:endpoint=5", "otel hook: endpoint: expected text, got 5"),
    ("otel:timeout_s=[1]", "otel hook: timeout_s: expected a number, got a list"),
    ("progress:postfix=loss", "progress hook: postfix: expected a list of text, got text"),
    ("structlog:strict_json=0", "structlog hook: strict_json: expected true or false, got 0"),
    ("webhook:url=http://h,retries=2.5",
     "webhook hook: retries: expected an integer, got 2.5"),
    ('webhook:url=http://h,events=["alert",5]',
     "webhook hook: events[1]: expected text, got 5"),
]  # fmt: skip
"""A value of the wrong type for an option of each built-in hook: (--hook, what the line says)."""


class TestHookOptionTypes:
    @pytest.mark.parametrize(("hook", "problem"), HOOK_TYPE_MISTAKES)
    def test_a_value_of_the_wrong_type_names_the_option(
        self, tmp_path: Path, run_file: Path, hook: str, problem: str
    ) -> None:
        """An option given a value of the wrong type: one line naming the hook, the option and what it
        expected, exit 2, nothing created (a TypeError or AttributeError that named no option)."""
        done = replay(run_file, "--hook", hook, cwd=tmp_path)
        assert_one_line_error(done, f"replay: {problem}")
        assert sorted(path.name for path in tmp_path.iterdir()) == ["run"]


class TestTargets:
    @pytest.mark.parametrize(
        "how", [("--wandb-dir", "taken"), ("--hook", "wandb:project=p,mode=offline,dir=taken")]
    )
    def test_a_wandb_dir_that_is_a_file_is_refused(
        self, tmp_path: Path, run_file: Path, how: tuple[str, str]
    ) -> None:
        """--wandb-dir naming a file: one line, exit 2, no W&B run (W&B fell back to /tmp with warnings
        and the replay went there)."""
        pytest.importorskip("wandb")
        (tmp_path / "taken").write_text("a file\n")
        wandb = ("--wandb", "p", "--wandb-mode", "offline") if how[0] == "--wandb-dir" else ()
        done = replay(run_file, *wandb, *how, cwd=tmp_path)
        assert_one_line_error(done, "replay: wandb hook: dir taken: expected a directory, found a file")
