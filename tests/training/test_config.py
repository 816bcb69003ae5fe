from __future__ import annotations

import importlib.metadata
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from speedtronic.hooks import ENTRY_POINT_GROUP, hook_type
from speedtronic.runtime import (
    ConfigError,
    build_logger,
    default_config,
    hook_types,
    load_config,
)

RECORDER = "tests.training.recording:RecordingHook"


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture
def tensorboard_is_a_recorder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registered tensorboard type resolves to the tests' recording hook (no event files written)."""
    import speedtronic.integrations
    from tests.training.recording import RecordingHook

    monkeypatch.setattr(speedtronic.integrations, "TensorboardHook", RecordingHook)


def install_plugin(site: Path, monkeypatch: pytest.MonkeyPatch, **types: str) -> None:
    """An installed distribution in ``site`` registering ``types`` in the speedtronic.hooks group."""
    dist_info = site / "speedtronic_test_plugin-0.1.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: speedtronic-test-plugin\nVersion: 0.1\n"
    )
    lines = "".join(f"{name} = {target}\n" for name, target in types.items())
    (dist_info / "entry_points.txt").write_text(f"[speedtronic.hooks]\n{lines}")
    monkeypatch.syspath_prepend(str(site))


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An installed distribution registering the hook type 'recorder' in the speedtronic.hooks group."""
    install_plugin(tmp_path / "site", monkeypatch, recorder=RECORDER)
    return "recorder"


class TestDefaultConfig:
    def test_has_the_documented_sections_and_keys(self) -> None:
        """run_dir, train (with every documented key) and logging, JSONL under the run dir."""
        config = default_config()
        assert {"run_dir", "train", "logging"} <= config.keys()
        assert {
            "steps",
            "lr",
            "batch_size",
            "grad_accum",
            "precision",
            "device",
            "checkpoint_every",
            "compile",
            "seed",
            "resume",
        } <= config["train"].keys()
        assert config["logging"]["json_file"] == "{run_dir}/metrics.jsonl"

    def test_run_dir_is_claimed_fresh_and_timestamped_under_runs(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """No run_dir: null until a run claims runs/<YYYYmmdd-HHMMSS>; a taken name gets a -2 suffix."""
        from speedtronic.training.rundir import claim

        monkeypatch.chdir(tmp_path)
        assert default_config()["run_dir"] is None
        first, second = claim(None, resume=False), claim(None, resume=False)
        assert re.fullmatch(r"runs/\d{8}-\d{6}", str(first))
        assert second != first
        assert re.fullmatch(r"runs/\d{8}-\d{6}(-\d+)?", str(second))
        assert first.is_dir()
        assert second.is_dir()

    def test_tensorboard_is_attached_when_its_hook_and_package_import(
        self, tensorboard_is_a_recorder: None
    ) -> None:
        """TensorboardHook importable and tensorboard installed: the default logs to run_dir/tensorboard."""
        pytest.importorskip("tensorboard")
        assert default_config()["logging"]["hooks"] == [
            {"type": "tensorboard", "log_dir": "{run_dir}/tensorboard"}
        ]

    def test_no_tensorboard_without_the_integration(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A TensorboardHook that can't be imported means no default hook, and no error."""
        monkeypatch.setitem(sys.modules, "speedtronic.integrations", None)  # registered, not importable
        assert default_config()["logging"]["hooks"] == []

    def test_no_tensorboard_without_the_package(
        self, tensorboard_is_a_recorder: None, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """tensorboard not installed: no default hook."""
        monkeypatch.setitem(sys.modules, "tensorboard", None)
        assert default_config()["logging"]["hooks"] == []


class TestLoadConfig:
    def test_a_yaml_file_is_merged_over_the_defaults(self, tmp_path: Path) -> None:
        """Keys the file sets win; every other key keeps its default."""
        path = write(
            tmp_path / "c.yaml",
            """
            run_dir: out
            train:
              steps: 7
        """,
        )
        config = load_config(path)
        defaults = default_config()
        assert config["train"] == {**defaults["train"], "steps": 7, "schedule_steps": 7}  # its horizon
        assert config["logging"]["every_steps"] == defaults["logging"]["every_steps"]

    def test_run_dir_placeholders_are_resolved(self, tmp_path: Path, tensorboard_is_a_recorder: None) -> None:
        """{run_dir} in logging paths and in hook arguments becomes the run directory."""
        config = load_config(
            {
                "run_dir": "out/a",
                "logging": {
                    "file": "{run_dir}/log.txt",
                    "hooks": [{"type": RECORDER, "where": "{run_dir}/x"}],
                },
            }
        )
        assert config["logging"]["json_file"] == "out/a/metrics.jsonl"
        assert config["logging"]["file"] == "out/a/log.txt"
        assert config["logging"]["hooks"] == [{"type": RECORDER, "where": "out/a/x"}]

    def test_builtin_hooks_write_under_the_run_dir_by_default(self, tensorboard_is_a_recorder: None) -> None:
        """{type: tensorboard} gets log_dir run_dir/tensorboard unless it sets one."""
        config = load_config(
            {
                "run_dir": "out",
                "logging": {"hooks": [{"type": "tensorboard"}, {"type": "tensorboard", "log_dir": "tb"}]},
            }
        )
        assert config["logging"]["hooks"] == [
            {"type": "tensorboard", "log_dir": "out/tensorboard"},
            {"type": "tensorboard", "log_dir": "tb"},
        ]

    def test_lists_replace_the_default(self, tensorboard_is_a_recorder: None) -> None:
        """hooks: [] turns the default hooks off (lists are replaced, not merged)."""
        assert load_config({"logging": {"hooks": []}})["logging"]["hooks"] == []

    def test_overrides_win_over_the_file(self, tmp_path: Path) -> None:
        """The command line's values are merged last."""
        path = write(tmp_path / "c.yaml", "train:\n  steps: 7\n  lr: 0.5\n")
        config = load_config(path, {"run_dir": "elsewhere", "train": {"steps": 9}})
        assert (config["run_dir"], config["train"]["steps"], config["train"]["lr"]) == ("elsewhere", 9, 0.5)

    def test_loading_a_loaded_config_changes_nothing(self) -> None:
        """load_config(load_config(x)) == load_config(x): build_runtime can take either."""
        config = load_config({"run_dir": "out", "train": {"steps": 3}})
        assert load_config(config) == config

    def test_exponent_floats_are_numbers(self, tmp_path: Path) -> None:
        """lr: 1e-3, as ML configs write it, is the number 0.001 for every float key (PyYAML alone reads
        YAML 1.1, where it is the string '1e-3'); integers and strings stay what they were."""
        path = write(
            tmp_path / "c.yaml",
            """
            data:
              noise: 5E-1
            train:
              lr: 1e-3
              max_grad_norm: 1.0e1
              dist_timeout_s: 6e1
              outer_lr: .7e0
              outer_momentum: 9e-1
              steps: 7
              device: cpu
            """,
        )
        config = load_config(path)
        train = config["train"]
        assert (config["data"]["noise"], train["lr"], train["max_grad_norm"]) == (0.5, 0.001, 10.0)
        assert (train["dist_timeout_s"], train["outer_lr"], train["outer_momentum"]) == (60.0, 0.7, 0.9)
        assert (train["steps"], train["device"]) == (7, "cpu")
        assert all(type(train[key]) is float for key in ("lr", "max_grad_norm", "dist_timeout_s"))

    def test_an_empty_file_is_the_default(self, tmp_path: Path) -> None:
        """An empty YAML file means no changes."""
        config = load_config(write(tmp_path / "c.yaml", ""), {"run_dir": "r"})
        assert config == load_config({"run_dir": "r"})


class TestConfigErrors:
    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("train:\n  steps: ten\n", "train.steps: expected an integer >= 0, got 'ten' (str)"),
            ("train:\n  lr: -1\n", "train.lr: expected a number > 0, got -1 (int)"),
            (
                "train:\n  precision: fp16\n",
                "train.precision: expected one of 'fp32', 'bf16', got 'fp16' (str)",
            ),
            ("train:\n  resume: 1\n", "train.resume: expected true or false, got 1 (int)"),
            ("logging:\n  every_steps: 0\n", "logging.every_steps: expected an integer >= 1, got 0 (int)"),
            (
                "logging:\n  level: LOUD\n",
                "logging.level: expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL",
            ),
            ("train: [1]\n", "train: expected a mapping, got [1]"),
            ("- 1\n", "top level: expected a mapping, got [1]"),
            ("logging:\n  hooks: {type: wandb}\n", "logging.hooks: expected a list of hooks"),
            (
                "logging:\n  hooks:\n    - project: x\n",
                "logging.hooks[0].type: missing; expected a hook type",
            ),
            (
                "logging:\n  hooks:\n    - wandb\n",
                "logging.hooks[0]: expected a mapping with type, got 'wandb' (str); write {type: wandb}",
            ),
            ("train:\n  steps: 1e3\n", "train.steps: expected an integer >= 0, got 1000.0 (float)"),
        ],
    )
    def test_wrong_values_name_the_file_the_key_and_what_was_expected(
        self, tmp_path: Path, text: str, message: str
    ) -> None:
        """Each mistake is one ConfigError: '<file>: <key>: expected ..., got ...'."""
        path = write(tmp_path / "bad.yaml", text)
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        assert str(caught.value).startswith(f"{path}: {message}")

    def test_an_unknown_key_is_named_with_the_known_ones(self, tmp_path: Path) -> None:
        """A typo names the key, the known key nearest to it, and lists what the section accepts."""
        path = write(tmp_path / "bad.yaml", "train:\n  stpes: 10\n")
        with pytest.raises(
            ConfigError,
            match=r"bad.yaml: train.stpes: unknown key; did you mean 'steps'\? known keys here: batch_size, ",
        ):
            load_config(path)

    def test_an_unknown_key_like_none_has_no_guess(self, tmp_path: Path) -> None:
        """A key like no known one lists the known keys without a guess."""
        path = write(tmp_path / "bad.yaml", "logging:\n  zzzz: 1\n")
        with pytest.raises(ConfigError, match=r"logging.zzzz: unknown key; known keys here: ") as caught:
            load_config(path)
        assert "did you mean" not in str(caught.value)

    @pytest.mark.parametrize("text", [".inf", "1e300", "1e9"])
    def test_a_system_interval_past_any_run_names_its_key(self, tmp_path: Path, text: str) -> None:
        """logging.system_interval_s of inf or 1e300: the error names that key, not train."""
        path = write(tmp_path / "bad.yaml", f"logging:\n  system_interval_s: {text}\n")
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        assert str(caught.value).startswith(
            f"{path}: logging.system_interval_s: expected a number of seconds > 0 and finite or null, got "
        )

    def test_bad_yaml_names_the_line(self, tmp_path: Path) -> None:
        """A YAML syntax error names the file, the line and column, and the problem."""
        path = write(tmp_path / "bad.yaml", "train:\n  steps: 1\n  lr: [0.1\n")
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        assert re.fullmatch(
            rf"{re.escape(str(path))}: line \d+, column \d+: invalid YAML: .+", str(caught.value)
        )

    def test_a_missing_file_is_named(self, tmp_path: Path) -> None:
        """A config file that does not exist is an error naming it, not a traceback."""
        with pytest.raises(ConfigError, match=r"nope.yaml: can't read it: no such file or directory"):
            load_config(tmp_path / "nope.yaml")

    def test_a_mapping_is_named_config(self) -> None:
        """Errors in a mapping (no file) name it 'config'."""
        with pytest.raises(
            ConfigError, match=r"^config: train.steps: expected an integer >= 0, got -1 \(int\)$"
        ):
            load_config({"train": {"steps": -1}})

    def test_an_unknown_hook_type_is_named_with_the_known_ones(self, plugin: str) -> None:
        """The error names the type and lists the built-in and registered ones."""
        with pytest.raises(ConfigError) as caught:
            load_config({"logging": {"hooks": [{"type": "wandbb"}]}})
        assert str(caught.value) == (
            "config: logging.hooks[0].type: unknown hook type 'wandbb'; known types: mlflow, otel, progress, "
            "recorder, structlog, tensorboard, wandb, webhook, or 'package.module:factory'"
        )

    def test_a_factory_that_cant_be_imported_is_named(self) -> None:
        """'module:factory' is imported when the config loads; a typo is reported then."""
        with pytest.raises(
            ConfigError,
            match=r"logging.hooks\[0\].type: hook type 'tests.training.recording:Nope'"
            r" \(tests.training.recording:Nope\) can't be imported: .*Nope",
        ):
            load_config({"logging": {"hooks": [{"type": "tests.training.recording:Nope"}]}})


class TestHookTypes:
    def test_builtins_are_known_without_importing_them(self) -> None:
        """wandb, tensorboard and structlog are known names pointing at speedtronic.integrations."""
        assert {name: hook_types()[name] for name in ("wandb", "tensorboard", "structlog")} == {
            "wandb": "speedtronic.integrations:WandbHook",
            "tensorboard": "speedtronic.integrations:TensorboardHook",
            "structlog": "speedtronic.integrations:StructlogHook",
        }

    def test_entry_points_register_hook_types(self, plugin: str, run_dir: Path) -> None:
        """A distribution's speedtronic.hooks entry point is a type a config can name, with arguments."""
        assert hook_types()[plugin] == RECORDER
        logger = build_logger(
            {"run_dir": str(run_dir), "logging": {"hooks": [{"type": plugin, "flavour": "x"}]}}
        )
        try:
            (hook,) = logger.hooks
            assert type(hook).__name__ == "RecordingHook"
            assert hook.kwargs == {"flavour": "x"}
        finally:
            logger.close()

    def test_a_builtin_name_beats_an_entry_point(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A plugin can't take over 'wandb'."""
        dist_info = tmp_path / "sneaky-0.1.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: sneaky\nVersion: 0.1\n")
        (dist_info / "entry_points.txt").write_text(f"[speedtronic.hooks]\nwandb = {RECORDER}\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        assert hook_types()["wandb"] == "speedtronic.integrations:WandbHook"

    def test_builtins_are_speedtronics_own_entry_points(self) -> None:
        """The built-in types are registered in speedtronic's metadata, the group third parties use."""
        own = importlib.metadata.distribution("speedtronic").entry_points.select(group=ENTRY_POINT_GROUP)
        registered = {entry_point.name: entry_point.value for entry_point in own}
        builtins = {"mlflow", "otel", "progress", "structlog", "tensorboard", "wandb", "webhook"}
        assert set(registered) == builtins
        assert {name: hook_types()[name] for name in registered} == registered

    def test_config_and_the_registry_resolve_the_same_factory(self) -> None:
        """A config's type is resolved by speedtronic.hooks.hook_type, registered or not."""
        from speedtronic.integrations import StructlogHook

        assert hook_type("structlog") is StructlogHook
        assert hook_type(RECORDER).__name__ == "RecordingHook"  # a factory nobody registered

    def test_an_unknown_name_lists_the_known_ones(self, plugin: str) -> None:
        """hook_type's LookupError names the type and every registered one."""
        known = r"^unknown hook type 'nope'; known types: mlflow, otel, progress, recorder"
        with pytest.raises(LookupError, match=known):
            hook_type("nope")

    def test_a_registered_type_that_cant_be_imported_is_a_config_error(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An entry point naming a factory that isn't there is reported when the config loads."""
        install_plugin(tmp_path, monkeypatch, broken="tests.training.recording:Missing")
        with pytest.raises(
            ConfigError,
            match=r"logging.hooks\[0\].type: hook type 'broken' \(tests.training.recording:Missing\)",
        ):
            load_config({"logging": {"hooks": [{"type": "broken"}]}})


def test_config_error_keeps_its_parts() -> None:
    """ConfigError carries source, key and problem for callers that render errors themselves."""
    error = ConfigError("c.yaml", "train.steps", "expected an integer >= 0, got -1 (int)")
    parts: tuple[Any, ...] = (error.source, error.key, error.problem)
    assert parts == ("c.yaml", "train.steps", "expected an integer >= 0, got -1 (int)")
    assert isinstance(error, ValueError)
