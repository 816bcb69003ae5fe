"""``speedtronic replay``: a recorded run pushed through the live hooks looks like the live run.

The TensorBoard and W&B tests compare a replay against the real ``TensorboardHook`` / ``WandbHook``
fed live with the same events; they need ``speedtronic.integrations`` and skip without it.
"""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from speedtronic.commands.replay import parse_hook
from speedtronic.runs.replay import replay_hook, replay_run
from tests.helpers import read_jsonl, tensorboard_scalars
from tests.runs.conftest import (
    CLI,
    EVENTS,
    FailsOnCheckpoint,
    Recorder,
    assert_one_line_error,
    log_run,
    same,
)

ONE_OFF_EVENTS = {"train_start", "train_end", "hyperparams", "compile", "shape_profile", "ooo_backprop"}
"""The events a run has once: the trackers keep them as the run's summary, never as a chart
(docs/integrations.md)."""


def integrations() -> Any:
    return pytest.importorskip("speedtronic.integrations", reason="needs the integrations branch")


# -- reading the targets back --------------------------------------------------------------------


def wandb_records(wandb_dir: Path) -> list[Any]:
    """The records of the one offline run under ``wandb_dir``, parsed from its ``.wandb`` file.

    The file is W&B's transaction log: a 7-byte ``:W&B`` header, then LevelDB log records (32 KiB
    blocks; each chunk a 7-byte header: CRC32C, length, type FULL/FIRST/MIDDLE/LAST) holding
    ``wandb_internal_pb2.Record`` protobufs.
    """
    from wandb.proto import wandb_internal_pb2

    (path,) = wandb_dir.glob("wandb/offline-run-*/run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, header = 32768, 7
    records, chunks, at = [], [], header
    while at + header <= len(data):
        if block - at % block < header:  # a block's tail too short for a header is padding
            at += block - at % block
            continue
        _, length, kind = struct.unpack("<IHB", data[at : at + header])
        if kind == 0:
            break
        chunks.append(data[at + header : at + header + length])
        at += header + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(chunks))
            records.append(record)
            chunks = []
    return records


def wandb_rows(wandb_dir: Path) -> list[dict[str, Any]]:
    """The run's history rows, without the wall-clock keys W&B adds (``_timestamp``, ``_runtime``)."""
    rows = []
    for record in wandb_records(wandb_dir):
        if record.WhichOneof("record_type") == "history":
            row = {
                item.key or "/".join(item.nested_key): json.loads(item.value_json)
                for item in record.history.item
            }
            rows.append({k: v for k, v in sorted(row.items()) if k not in ("_timestamp", "_runtime")})
    return rows


# -- replay_run ------------------------------------------------------------------------------------


class TestReplayRun:
    def test_hooks_get_exactly_what_live_hooks_got(self, tmp_path: Path) -> None:
        """Replayed (event, payload) pairs equal the live hook's, in order; hooks are closed after."""
        path = tmp_path / "metrics.jsonl"
        live = log_run(path, hooks=[FailsOnCheckpoint()])

        class Closing(Recorder):
            closed = 0

            def close(self) -> None:
                self.closed += 1

        replayed = Closing()
        result = replay_run(path, [replayed])
        assert same(replayed.calls, live)
        assert replayed.closed == 1
        assert result.replayed.total() == len(EVENTS)
        assert result.not_replayed == {"hook_error": 3}  # the logger's own records: never hooks'

    def test_a_failing_hook_stops_the_replay_and_every_hook_is_closed(self, run_file: Path) -> None:
        """A hook's exception propagates (no silently lost points), after closing every hook."""
        closed: list[str] = []

        class Closes:
            def __init__(self, name: str) -> None:
                self.name = name

            def on_event(self, event: str, payload: dict[str, Any]) -> None: ...

            def close(self) -> None:
                closed.append(self.name)

        with pytest.raises(RuntimeError, match="disk full"):
            replay_run(run_file, [Closes("a"), FailsOnCheckpoint(), Closes("b")])
        assert closed == ["a", "b"]

    def test_bad_hook_is_refused_before_reading(self, run_file: Path) -> None:
        """A hook that can't be called as (event, payload) is a TypeError naming it."""

        def takes_nothing() -> None: ...

        with pytest.raises(TypeError, match="takes_nothing"):
            replay_run(run_file, [Recorder(), takes_nothing])


# -- hook types from the speedtronic.hooks entry-point group --------------------------------------------

JOURNAL_MODULE = """\
import json


class JournalHook:
    \"\"\"A third-party hook: appends [tag, event, payload] per event, then [tag, "closed"], to path.\"\"\"

    def __init__(self, path, tag="live"):
        self.file = open(path, "a", encoding="utf-8")
        self.tag = tag

    def on_event(self, event, payload):
        self.file.write(json.dumps([self.tag, event, payload]) + "\\n")

    def close(self):
        self.file.write(json.dumps([self.tag, "closed", None]) + "\\n")
        self.file.close()
"""


@pytest.fixture
def plugin_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory holding an installed third-party distribution that registers the hook type
    'journal' through a real speedtronic.hooks entry point; on sys.path here, PYTHONPATH for the CLI."""
    site = tmp_path / "site"
    dist_info = site / "journal_plugin-1.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: journal-plugin\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text("[speedtronic.hooks]\njournal = journal_plugin:JournalHook\n")
    (site / "journal_plugin.py").write_text(JOURNAL_MODULE)
    monkeypatch.syspath_prepend(str(site))
    return site


def journal(path: Path) -> list[Any]:
    return read_jsonl(path, strict=False)


class TestRegisteredHookTypes:
    def test_the_cli_replays_into_any_registered_type(
        self, cli: CLI, plugin_site: Path, tmp_path: Path
    ) -> None:
        """--hook NAME:KEY=VALUE,... builds a third party's registered hook; it gets what live hooks got."""
        path = tmp_path / "run" / "metrics.jsonl"
        live = log_run(path, hooks=[FailsOnCheckpoint()])
        out = tmp_path / "journal.jsonl"
        result = cli(
            "replay", path, "--hook", f"journal:path={out},tag=replayed", env={"PYTHONPATH": str(plugin_site)}
        )
        assert result.returncode == 0, result.stderr
        assert f"replayed {len(EVENTS)} records of {path} to hook journal" in result.stderr
        *delivered, closed = journal(out)
        assert closed == ["replayed", "closed", None]
        assert same([(event, payload) for _, event, payload in delivered], live)

    def test_replay_hook_builds_any_registered_type(self, plugin_site: Path, tmp_path: Path) -> None:
        """In Python: replay_hook(name, options) resolves through the same registry as a config."""
        path = tmp_path / "run" / "metrics.jsonl"
        live = log_run(path)
        out = tmp_path / "journal.jsonl"
        result = replay_run(path, [replay_hook("journal", {"path": str(out)})])
        assert result.replayed.total() == len(EVENTS)
        assert same([(event, payload) for _, event, payload in journal(out)[:-1]], live)

    def test_an_unknown_type_is_one_line_listing_the_known_ones(
        self, cli: CLI, plugin_site: Path, run_file: Path, tmp_path: Path
    ) -> None:
        """Exit 2, one line naming the type and the registered ones; no other target is created."""
        result = cli(
            "replay",
            run_file,
            "--tensorboard",
            tmp_path / "tb",
            "--hook",
            "jornal",
            env={"PYTHONPATH": str(plugin_site)},
        )
        assert_one_line_error(result, "unknown hook type 'jornal'", "journal", "tensorboard", "wandb")
        assert not (tmp_path / "tb").exists()

    @pytest.mark.parametrize(
        ("spec", "fragment"),
        [
            ("journal:path", "expected NAME[:KEY=VALUE,...], got 'path'"),
            (":path=x", "got no NAME"),
            ("journal:colour=red", "journal hook: unknown argument 'colour'; it accepts path, tag"),
        ],
        ids=["no_value", "no_name", "unknown_option"],
    )
    def test_a_bad_hook_spec_is_one_line(
        self, cli: CLI, plugin_site: Path, run_file: Path, spec: str, fragment: str
    ) -> None:
        """A malformed --hook, or options the hook refuses: exit 2, one line saying what is wrong."""
        result = cli("replay", run_file, "--hook", spec, env={"PYTHONPATH": str(plugin_site)})
        assert_one_line_error(result, fragment)

    def test_the_tensorboard_check_holds_for_hook_too(self, cli: CLI, run_file: Path, tmp_path: Path) -> None:
        """--hook tensorboard:log_dir=DIR refuses a directory holding events, as --tensorboard does."""
        log_dir = tmp_path / "tb"
        log_dir.mkdir()
        (log_dir / "events.out.tfevents.1.host.1.0").write_bytes(b"")
        result = cli("replay", run_file, "--hook", f"tensorboard:log_dir={log_dir}")
        assert_one_line_error(result, "already holds TensorBoard events", "--append")

    def test_runs_never_import_the_integrations(self) -> None:
        """The read-back layer reaches hooks through the registry: no arrow back up to integrations."""
        runs = Path(__file__).resolve().parents[2] / "speedtronic" / "runs"
        assert [p.name for p in runs.glob("*.py") if "integrations" in p.read_text()] == []
        code = "import sys, speedtronic.runs.replay; print('speedtronic.integrations' in sys.modules)"
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert result.stdout.strip() == "False", result.stderr


class TestParseHook:
    @pytest.mark.parametrize(
        ("spec", "parsed"),
        [
            ("tensorboard", ("tensorboard", {})),
            ("tensorboard:log_dir=tb/run", ("tensorboard", {"log_dir": "tb/run"})),
            ("wandb:project=p,mode=offline", ("wandb", {"project": "p", "mode": "offline"})),
            (
                'x:n=5,f=0.5,on=true,off=null,s="5"',
                ("x", {"n": 5, "f": 0.5, "on": True, "off": None, "s": "5"}),
            ),
            ("x:url=http://h:8080/a,b=2", ("x", {"url": "http://h:8080/a", "b": 2})),
            ("x:tags=[1,2],name=a,b", ("x", {"tags": [1, 2], "name": "a,b"})),
            ("pkg.mod:Hook", ("pkg.mod:Hook", {})),
            ("pkg.mod:Hook:url=http://h:8080/a,n=1", ("pkg.mod:Hook", {"url": "http://h:8080/a", "n": 1})),
        ],
    )
    def test_shapes(self, spec: str, parsed: tuple[str, dict[str, Any]]) -> None:
        """NAME[:KEY=VALUE,...], NAME a type or package.module:factory; JSON values as JSON, others as
        text; commas split only before KEY=."""
        assert parse_hook(spec) == parsed


# -- the command: failure paths that need no SDK -----------------------------------------------------


class TestReplayCommandErrors:
    def test_refuses_a_tensorboard_dir_holding_events(self, cli: CLI, run_file: Path, tmp_path: Path) -> None:
        """A directory with an event file is refused, naming it and --append; nothing is written."""
        log_dir = tmp_path / "tb"
        log_dir.mkdir()
        (log_dir / "events.out.tfevents.1.host.1.0").write_bytes(b"")
        result = cli("replay", run_file, "--tensorboard", log_dir)
        assert_one_line_error(result, str(log_dir), "already holds TensorBoard events", "--append")
        assert [p.name for p in log_dir.iterdir()] == ["events.out.tfevents.1.host.1.0"]

    def test_missing_run_creates_no_target(self, cli: CLI, tmp_path: Path) -> None:
        """A missing run: one-line error naming it, and no TensorBoard directory is created."""
        result = cli("replay", "gone.jsonl", "--tensorboard", tmp_path / "tb")
        assert_one_line_error(result, "gone.jsonl: No such file or directory")
        assert not (tmp_path / "tb").exists()

    def test_a_target_is_required(self, cli: CLI, run_file: Path) -> None:
        """Without --tensorboard or --wandb: a one-line error saying what to pass."""
        assert_one_line_error(cli("replay", run_file), "--tensorboard DIR", "--wandb PROJECT")


# -- against the real hooks -----------------------------------------------------------------------


class TestTensorboardReplay:
    def test_replay_matches_a_live_tensorboard_hook(self, cli: CLI, tmp_path: Path) -> None:
        """Same tags, steps and values as TensorboardHook writing the same events live (NaN too)."""
        hook_module = integrations()
        live_dir, replay_dir = tmp_path / "tb_live", tmp_path / "tb_replay"
        path = tmp_path / "run" / "metrics.jsonl"
        log_run(path, hooks=[hook_module.TensorboardHook(live_dir), FailsOnCheckpoint()])

        result = cli("replay", path, "--tensorboard", replay_dir)
        assert result.returncode == 0, result.stderr
        assert f"replayed {len(EVENTS)} records" in result.stderr
        live, replayed = tensorboard_scalars(live_dir), tensorboard_scalars(replay_dir)
        assert "train_step/loss" in live
        assert live.keys() == replayed.keys()
        for tag in live:
            assert same(live[tag], replayed[tag]), tag
        assert math.isnan(dict(replayed["train_step/loss"])[3])

    def test_append_adds_to_an_existing_run(self, cli: CLI, run_file: Path, tmp_path: Path) -> None:
        """--append writes a second event file next to the first; both replays' points are there."""
        integrations()
        log_dir = tmp_path / "tb"
        assert cli("replay", run_file, "--tensorboard", log_dir).returncode == 0
        result = cli("replay", run_file, "--tensorboard", log_dir, "--append")
        assert result.returncode == 0, result.stderr
        assert len(list(log_dir.glob("events.out.tfevents.*"))) == 2
        assert [step for step, _ in tensorboard_scalars(log_dir)["train_step/lr"]] == [1, 2, 3, 4] * 2

    def test_a_folder_of_runs_is_replayed_run_by_run(self, cli: CLI, tmp_path: Path) -> None:
        """replay runs/ --tensorboard tb: each run into tb/<run>, as TensorBoard lists several runs."""
        integrations()
        for name in ("a", "b"):
            log_run(tmp_path / "runs" / name / "metrics.jsonl")
        result = cli("replay", tmp_path / "runs", "--tensorboard", tmp_path / "tb")
        assert result.returncode == 0, result.stderr
        assert result.stderr.count(f"replayed {len(EVENTS)} records") == 2
        for name in ("a", "b"):
            steps = [step for step, _ in tensorboard_scalars(tmp_path / "tb" / name)["train_step/lr"]]
            assert steps == [1, 2, 3, 4]


class TestWandbReplay:
    def test_offline_replay_matches_a_live_wandb_hook(
        self, cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The replayed offline run's rows equal a live WandbHook's rows for the same events."""
        hook_module = integrations()
        pytest.importorskip("wandb")
        monkeypatch.setenv("WANDB_SILENT", "true")
        live_dir, replay_dir = tmp_path / "wb_live", tmp_path / "wb_replay"
        live_dir.mkdir()
        replay_dir.mkdir()
        path = tmp_path / "run" / "metrics.jsonl"
        live_hook = hook_module.WandbHook(project="readback", mode="offline", dir=str(live_dir))
        log_run(path, hooks=[live_hook, FailsOnCheckpoint()])

        result = cli(
            "replay",
            path,
            "--wandb",
            "readback",
            "--wandb-mode",
            "offline",
            "--wandb-dir",
            replay_dir,
            env={"WANDB_SILENT": "true"},
        )
        assert result.returncode == 0, result.stderr
        live, replayed = wandb_rows(live_dir), wandb_rows(replay_dir)
        events = [
            {key.split("/")[0] for key in row if "/" in key and not key.startswith("_")} for row in replayed
        ]
        charted = [{event} for event, _ in EVENTS if event not in ONE_OFF_EVENTS]  # the rest: the summary
        assert events == charted  # metrics are <event>/<key>
        assert same(replayed, live)
        (exit_record,) = [r for r in wandb_records(replay_dir) if r.WhichOneof("record_type") == "exit"]
        assert exit_record.exit.exit_code == 0  # train_end was replayed: a finished run
