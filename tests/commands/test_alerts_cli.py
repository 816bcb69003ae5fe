"""Alerts in real `speedtronic train` runs, and re-derived from the finished run by replay and summarize."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from speedtronic.alerts import NonFinite
from speedtronic.runs.replay import replay_run
from tests.helpers import run_records, user_package
from tests.runs.conftest import assert_one_line_error
from tests.torch_run import ROOT, train_cli
from tests.training.test_run_dirs import write_config

LOGGER_KEYS = {"event", "elapsed_s", "memory_bytes", "timestamp", "_speedtronic"}
"""What the logger adds to every record: not part of an alert's payload."""

BUSY_RULES = [
    {"rule": "non_finite"},
    {"rule": "spike", "keys": ["loss", "grad_norm", "tokens_per_s"], "k": 0.5, "warmup": 3, "cooldown": 2},
    {"rule": "throughput_drop", "fraction": 0.99, "consecutive": 1, "warmup": 2, "cooldown": 2},
    {"rule": "threshold", "key": "loss", "below": 10},
]
"""Rules that fire often on a clean run: many alerts, with float figures, to compare."""


def cli(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "speedtronic", *map(str, args)],
        cwd=cwd,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def live_alerts(run_dir: Path) -> list[bytes]:
    """The payload of each alert record the run wrote, as JSON text in its order."""
    return [
        json.dumps({k: v for k, v in r.items() if k not in LOGGER_KEYS}).encode()
        for r in run_records(run_dir)
        if r["event"] == "alert"
    ]


class TestStopOnAlert:
    def test_a_diverging_run_stops_cleanly_at_the_nan(self, tmp_path: Path) -> None:
        """lr 1e30: the loss is NaN at step 2; the run checkpoints that step, ends with status
        stopped and the alert as reason, and exits 3."""
        config = write_config(
            tmp_path / "nan.yaml",
            train={"steps": 30, "lr": 1e30, "warmup_steps": 0, "max_grad_norm": None, "checkpoint_every": 0},
        )
        config.write_text(config.read_text() + "on_alert: stop\n")
        done = train_cli("--config", config, "--run-dir", "r", cwd=tmp_path)
        assert done.returncode == 3, done.stderr
        assert (
            "speedtronic: stopped by an alert at step 2: non-finite loss (nan) in train_step at step 2"
            in (done.stderr)
        )
        run = run_records(tmp_path / "r")
        events = [(r["event"], r.get("step")) for r in run if r["event"] != "hyperparams"]
        assert events[-4:] == [("train_step", 2), ("alert", 2), ("checkpoint", 2), ("train_end", 2)]
        end = run[-1]
        assert (end["status"], end["reason"]) == ("stopped", "non-finite loss (nan) in train_step at step 2")
        assert (tmp_path / "r" / "checkpoints" / "step_00000002.pt").is_file()
        assert "| ERROR | alert rule=non_finite" in done.stdout
        assert "\n  alerts       non_finite 1 (step 2, error)\n" in done.stderr  # the closing summary's

    def test_a_run_that_trains_on_says_its_alerts_in_its_closing_summary(self, tmp_path: Path) -> None:
        """on_alert: log (the default): the NaN run reaches its target, exits 0, and the summary it ends
        with says which rule fired, how often, from which step and how bad, under the run dir."""
        config = write_config(
            tmp_path / "nan.yaml",
            train={"steps": 4, "lr": 1e30, "warmup_steps": 0, "max_grad_norm": None, "checkpoint_every": 0},
        )
        done = train_cli("--config", config, "--run-dir", "r", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        summary = done.stderr.splitlines()
        at = summary.index("  run dir      r")
        assert summary[at + 1] == "  alerts       non_finite 1 (step 2, error)"  # the onset: once

    def test_alerts_off_the_same_run_trains_on(self, tmp_path: Path) -> None:
        """alerts: [] runs no rule: no alert record, the run reaches its target."""
        config = write_config(
            tmp_path / "nan.yaml",
            train={"steps": 4, "lr": 1e30, "warmup_steps": 0, "max_grad_norm": None, "checkpoint_every": 0},
        )
        text = config.read_text() + "alerts: []\non_alert: stop\n"
        config.write_text(text)
        done = train_cli("--config", config, "--run-dir", "r", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert [r["event"] for r in run_records(tmp_path / "r") if r["event"] == "alert"] == []
        assert "  alerts " not in done.stderr


class TestConfigErrors:
    def test_an_unknown_rule_is_one_line_listing_the_rules(self, tmp_path: Path) -> None:
        """The config file, the entry, the unknown name and the rules that exist; exit 2."""
        config = write_config(tmp_path / "c.yaml")
        config.write_text(config.read_text() + "alerts:\n- rule: spiek\n")
        done = train_cli("--config", config, "--run-dir", "r", cwd=tmp_path)
        assert_one_line_error(
            done, f"{config}: alerts[0]: unknown rule 'spiek'; rules: memory, non_finite, spike, threshold"
        )

    def test_an_unknown_key_lists_the_rules_keys(self, tmp_path: Path) -> None:
        """A key the rule doesn't take: named, with the ones it takes; exit 2."""
        config = write_config(tmp_path / "c.yaml")
        config.write_text(config.read_text() + "alerts:\n- rule: spike\n  sigma: 3\n")
        done = train_cli("--config", config, "--run-dir", "r", cwd=tmp_path)
        assert_one_line_error(done, "alerts[0]: spike: unknown key 'sigma'; its keys: cooldown, events, k")

    def test_a_bad_alerts_file_for_replay(self, tmp_path: Path) -> None:
        """--alerts naming a file with an unknown rule: one line, exit 2, before anything is read."""
        (tmp_path / "rules.yaml").write_text("alerts:\n- rule: nan\n")
        (tmp_path / "m.jsonl").write_text('{"event":"train_step","step":1,"loss":1.0}\n')
        done = cli("replay", "m.jsonl", "--alerts", "rules.yaml", cwd=tmp_path)
        assert_one_line_error(done, "--alerts rules.yaml: alerts[0]: unknown rule 'nan'")

    @pytest.mark.parametrize("command", ["summarize", "replay", "tail"])
    @pytest.mark.parametrize(
        ("rules", "problem"),
        [
            (
                "- rule: spike\n  cooldown: -1\n",
                "alerts[0]: spike: cooldown must be an int >= 0 (steps), got -1",
            ),
            ("- rule: spike\n  name: 5\n", "alerts[0]: spike: name must be a non-empty str"),
            ("- rule: builtins:print\n", "alerts[0]: builtins:print: None is not a rule"),
        ],
        ids=["negative_cooldown", "int_name", "factory_of_no_rule"],
    )
    def test_a_rule_that_cant_run_is_one_line(
        self, tmp_path: Path, command: str, rules: str, problem: str
    ) -> None:
        """A rule built but unfit to run (a bad cooldown or name, a factory returning no rule): one
        line naming the file and entry, exit 2, before the run is read (it was a traceback)."""
        (tmp_path / "rules.yaml").write_text("alerts:\n" + rules)
        (tmp_path / "m.jsonl").write_text('{"event":"train_step","step":1,"loss":1.0}\n')
        done = cli(command, "m.jsonl", "--alerts", "rules.yaml", cwd=tmp_path)
        assert_one_line_error(done, f"--alerts rules.yaml: {problem}")

    @pytest.mark.parametrize(
        ("text", "problem"),
        [
            (b"alerts:\n- rule: spike\n  k: [1\n", "line 4, column 1: invalid YAML: expected ',' or ']'"),
            (
                b'{"event":"train_step","step":1}\n{"event":"train_step","step":2}\n',
                "line 2, column 1: invalid YAML: expected '<document start>', but found '{'",
            ),
            (b"\xff\xfe\x00a", "can't read it: expected UTF-8 text (invalid start byte)"),
        ],
        ids=["bad_yaml", "a_jsonl_file", "not_utf8"],
    )
    def test_a_rules_file_that_is_no_yaml_names_the_place(
        self, tmp_path: Path, text: bytes, problem: str
    ) -> None:
        """A YAML syntax error (or a run's JSONL given as the rules): the line and column and what
        YAML expected there, as a --config's error says it (it said "while parsing a flow sequence")."""
        (tmp_path / "rules.yaml").write_bytes(text)
        (tmp_path / "m.jsonl").write_text('{"event":"train_step","step":1,"loss":1.0}\n')
        done = cli("summarize", "m.jsonl", "--alerts", "rules.yaml", cwd=tmp_path)
        assert_one_line_error(done, f"--alerts rules.yaml: {problem}")

    @pytest.mark.parametrize(
        ("rule", "problem"),
        [
            (
                "broken_syntax:Rule",
                "alerts[0]: rule 'broken_syntax:Rule' can't be imported: SyntaxError: invalid syntax",
            ),
            ("failing_rule:Rule", "alerts[0]: failing_rule:Rule: RuntimeError: no GPU named in the rule"),
        ],
        ids=["module_with_a_syntax_error", "factory_that_raises"],
    )
    def test_a_user_rule_that_fails_is_one_line(self, tmp_path: Path, rule: str, problem: str) -> None:
        """A rule module of the user's that can't be imported (a SyntaxError), or a factory that fails
        its own way (a RuntimeError): one line naming the file, the entry and the error, exit 2 (both
        were tracebacks)."""
        user_package(tmp_path, "broken_syntax", "class Rule(:\n")
        user_package(tmp_path, "failing_rule", "class Rule:\n    def __init__(self):\n"
                     "        raise RuntimeError('no GPU named in the rule')\n")  # fmt: skip
        (tmp_path / "rules.yaml").write_text(f"alerts:\n- rule: {rule}\n")
        (tmp_path / "m.jsonl").write_text('{"event":"train_step","step":1,"loss":1.0}\n')
        done = cli("summarize", "m.jsonl", "--alerts", "rules.yaml", cwd=tmp_path)
        assert_one_line_error(done, f"--alerts rules.yaml: {problem}")


class TestReDerived:
    def test_replay_re_derives_the_live_alerts_byte_for_byte(self, tmp_path: Path) -> None:
        """A run with busy rules, resumed once (a new logger: new rules): replay --alerts with the same
        rules prints exactly the payloads the live loggers wrote, in order."""
        config = write_config(tmp_path / "c.yaml", train={"steps": 15, "checkpoint_every": 5})
        config.write_text(config.read_text() + yaml.safe_dump({"alerts": BUSY_RULES}))
        assert train_cli("--config", config, "--run-dir", "r", cwd=tmp_path).returncode == 0
        resumed = train_cli("--run-dir", "r", "--resume", "--steps", "30", cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr
        live = live_alerts(tmp_path / "r")
        assert len(live) > 10
        assert {json.loads(a)["rule"] for a in live} == {"spike", "throughput_drop", "threshold"}
        (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"alerts": BUSY_RULES}))
        done = cli("replay", "r", "--alerts", "rules.yaml", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        derived = [json.dumps(json.loads(line)).encode() for line in done.stdout.splitlines()]
        assert derived == live
        assert (
            f"{len(live)} alerts re-derived from r with rules.yaml (the run recorded {len(live)})"
            in done.stderr
        )

    def test_replay_into_a_hook_delivers_the_alerts_after_their_records(self, tmp_path: Path) -> None:
        """replay_run(alerts=...): each alert right after its record, the run's own ones left out."""
        (tmp_path / "m.jsonl").write_text(
            '{"event":"train_step","step":1,"loss":1.0}\n'
            '{"event":"train_step","step":2,"loss":null,"_speedtronic":{"v":2,"origin":"user","converted":[],'
            '"truncated":[],"non_finite":{"nan":["/loss"],"inf":[],"neg_inf":[]}}}\n'
            '{"event":"alert","rule":"old","severity":"warning","key":null,"step":2,"value":null,'
            '"threshold":null,"message":"recorded"}\n'
        )
        journal: list[tuple[str, Any]] = []
        result = replay_run(
            tmp_path / "m.jsonl",
            [lambda e, p: journal.append((e, p.get("rule")))],
            alerts=lambda: [NonFinite()],
        )
        assert journal == [("train_step", None), ("train_step", None), ("alert", "non_finite")]
        assert result.recorded_alerts == 1
        assert [a["step"] for a in result.alerts] == [2]

    def test_summarize_lists_the_re_derived_alerts(self, tmp_path: Path) -> None:
        """summarize --alerts: each run's alerts, one line each; --json has them per run."""
        (tmp_path / "m.jsonl").write_text(
            "".join(f'{{"event":"train_step","step":{s},"loss":{v}}}\n' for s, v in ((1, 1.0), (2, 20.0)))
        )
        (tmp_path / "rules.yaml").write_text("alerts:\n- rule: threshold\n  key: loss\n  above: 10\n")
        done = cli("summarize", "m.jsonl", "--alerts", "rules.yaml", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert (
            "alerts re-derived with rules.yaml: m.jsonl: 1\n  warning threshold: loss 20 above 10 at step 2"
            in (done.stdout)
        )
        as_json: list[dict[str, Any]] = json.loads(
            cli("summarize", "m.jsonl", "--alerts", "rules.yaml", "--json", cwd=tmp_path).stdout
        )
        assert [a["step"] for a in as_json[0]["derived_alerts"]] == [2]


class TestTrainAlertsOption:
    def test_alerts_file_replaces_the_configs_rules(self, tmp_path: Path) -> None:
        """--alerts RULES: its rules and on_alert, whatever the config says."""
        config = write_config(
            tmp_path / "c.yaml",
            train={"steps": 30, "lr": 1e30, "warmup_steps": 0, "max_grad_norm": None, "checkpoint_every": 0},
        )
        config.write_text(config.read_text() + "alerts: []\n")
        (tmp_path / "rules.yaml").write_text(
            "alerts:\n- rule: non_finite\n  keys: [grad_norm]\non_alert: stop\n"
        )
        done = train_cli("--config", config, "--run-dir", "r", "--alerts", "rules.yaml", cwd=tmp_path)
        assert done.returncode == 3, done.stderr
        assert [(r["key"], r["step"]) for r in run_records(tmp_path / "r") if r["event"] == "alert"] == [
            ("grad_norm", 2)
        ]
