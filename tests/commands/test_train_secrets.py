"""`speedtronic train`'s start-up errors name the mistake without printing the secret that came with it."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import pytest

from speedtronic.commands.cli import main
from speedtronic.training.config import ConfigError
from speedtronic.training.from_config import build_logger, load_config

KEY = "sk-proj-Ab3dEf6hIj9kLmNoPq"
PLAIN = "hunter2-CANARY"


def rejecting_factory(api_key: str = "", **kwargs: Any) -> Any:
    """A hook factory whose SDK echoes the key it refuses, as some do."""
    raise ValueError(f"invalid API key {api_key!r}")


def chaining_factory(api_key: str = "", **kwargs: Any) -> Any:
    """A hook factory whose own error is clean, raised from the SDK's error that holds the key."""
    try:
        raise PermissionError(f"refused key {api_key}")
    except PermissionError as sdk_error:
        raise RuntimeError("tracker login failed") from sdk_error


def failing_factory(**kwargs: Any) -> Any:
    """A hook factory failing with nothing secret in its message."""
    raise OSError("tracker server unreachable")


REJECTING = f"{__name__}:rejecting_factory"


class TestCommandLine:
    def test_a_hook_factory_error_hides_the_key(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The factory's error is one line naming the entry and the error, its key redacted."""
        path = tmp_path / "c.yaml"
        path.write_text(
            f"train:\n  steps: 2\n  device: cpu\nlogging:\n  hooks:\n    - type: {REJECTING}\n"
            f"      api_key: {KEY}\n"
        )
        assert main(["train", "--config", str(path), "--run-dir", str(tmp_path / "run")]) == 2
        assert capsys.readouterr().err == (
            f"speedtronic: error: {path}: logging.hooks[0]: {REJECTING} hook can't be created: "
            "ValueError: invalid API key '[REDACTED]'\n"
        )

    def test_hooks_written_as_a_mapping_hide_the_key(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``logging.hooks`` as one mapping, not a list: the error shows the mapping without its key."""
        path = tmp_path / "c.yaml"
        path.write_text(f"logging:\n  hooks: {{type: wandb, api_key: {PLAIN}}}\n")
        assert main(["train", "--config", str(path), "--run-dir", str(tmp_path / "run")]) == 2
        err = capsys.readouterr().err
        assert PLAIN not in err
        assert err.endswith("got {'type': 'wandb', 'api_key': '[REDACTED]'}\n")


class TestPythonApi:
    def test_the_traceback_holds_no_key(self, config: dict[str, Any]) -> None:
        """``build_logger``'s ConfigError, printed as a traceback, shows no key: the factory's own
        error, which holds it, is not chained."""
        hooks = [{"type": REJECTING, "api_key": KEY}]
        with pytest.raises(ConfigError) as caught:
            build_logger({**config, "logging": {**config["logging"], "hooks": hooks}})
        printed = "".join(traceback.format_exception(caught.value))
        assert KEY not in printed
        assert "invalid API key '[REDACTED]'" in printed

    def test_a_key_in_the_factory_errors_cause_is_not_chained(self, config: dict[str, Any]) -> None:
        """A clean factory error whose cause holds the key: the ConfigError names it, and is not
        chained to it (its traceback would print the cause)."""
        hooks = [{"type": f"{__name__}:chaining_factory", "api_key": KEY}]
        with pytest.raises(ConfigError, match="RuntimeError: tracker login failed") as caught:
            build_logger({**config, "logging": {**config["logging"], "hooks": hooks}})
        assert KEY not in "".join(traceback.format_exception(caught.value))
        assert caught.value.__cause__ is None

    def test_an_error_without_secrets_keeps_its_cause(self, config: dict[str, Any]) -> None:
        """A factory error with nothing to hide is chained, so its traceback helps debugging."""
        hooks = [{"type": f"{__name__}:failing_factory"}]
        with pytest.raises(ConfigError, match="OSError: tracker server unreachable") as caught:
            build_logger({**config, "logging": {**config["logging"], "hooks": hooks}})
        assert isinstance(caught.value.__cause__, OSError)

    def test_a_wrong_value_hides_the_key(self, tmp_path: Path) -> None:
        """Any wrong config value is shown with its secrets redacted."""
        path = tmp_path / "c.yaml"
        path.write_text(f"logging:\n  hooks: {{type: wandb, api_key: {PLAIN}, password: {PLAIN}}}\n")
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        assert PLAIN not in str(caught.value)
