from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import yaml

from speedtronic import runtime
from speedtronic.events import PAYLOADS, Event, level_for
from speedtronic.processors.validate import payload_problems
from speedtronic.training.config import default_values, markdown_table
from tests.helpers import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "config.yaml"


class TestExampleConfig:
    def test_it_loads(self) -> None:
        """examples/config.yaml is a valid config; its tensorboard entry writes under the run dir."""
        config = runtime.load_config(EXAMPLE, {"run_dir": "r"})
        assert config["logging"]["hooks"] == [{"type": "tensorboard", "log_dir": "r/tensorboard"}]

    def test_it_shows_every_option_at_its_default(self) -> None:
        """Every key of the schema is set in the file, to its default: the example can't drift from it
        (hooks aside: the example shows the TensorBoard entry the default has when it is installed)."""
        written = flatten(yaml.safe_load(EXAMPLE.read_text()))
        expected = flatten(default_values())
        assert written.keys() == expected.keys()
        assert {key: value for key, value in written.items() if key != "logging.hooks"} == {
            key: value for key, value in expected.items() if key != "logging.hooks"
        }

    def test_it_makes_a_fresh_run_each_time(self) -> None:
        """No hard-coded run_dir: running the example twice never mixes two runs in one directory."""
        assert yaml.safe_load(EXAMPLE.read_text())["run_dir"] is None

    def test_it_shows_every_kind_of_hook(self) -> None:
        """The hooks list shows the built-in types, a module:factory and an entry-point name."""
        text = EXAMPLE.read_text()
        for entry in (
            "type: tensorboard",
            "# - type: wandb",
            "# - type: structlog",
            '# - type: "mypackage.hooks:',
        ):
            assert entry in text


def test_quickstart_runs(tmp_path: Path) -> None:
    """examples/quickstart.py writes its JSONL and returns 0."""
    spec = importlib.util.spec_from_file_location("quickstart", ROOT / "examples" / "quickstart.py")
    assert spec is not None
    assert spec.loader is not None
    quickstart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quickstart)
    assert quickstart.main(tmp_path / "q") == 0
    records = read_jsonl(tmp_path / "q" / "metrics.jsonl")
    assert [record["event"] for record in records] == [
        "train_start",
        *["train_step"] * 5,
        "checkpoint",
        "train_end",
    ]
    assert [payload_problems(record["event"], record) for record in records] == [[]] * len(records)


def test_the_examples_point_at_docs_that_exist() -> None:
    """Each page an example names exists, and each section it quotes ('docs/x.md "Heading"') is a
    heading of that page."""
    pointers = 0
    for example in sorted(path for path in (ROOT / "examples").iterdir() if path.is_file()):
        text = example.read_text()
        for match in re.finditer(r"\b(README\.md|README|docs/[\w-]+\.md)(?: \"([^\"]+)\")?", text):
            page = ROOT / (match.group(1) if match.group(1) != "README" else "README.md")
            assert page.is_file(), (example.name, match.group())
            headings = re.findall(r"^#+ (.+)$", page.read_text(), re.MULTILINE)
            section = match.group(2)
            assert section is None or any(h.startswith(section) for h in headings), (example.name, section)
            pointers += 1
    assert pointers >= 2


def test_the_event_docs_list_every_event_its_level_and_required_keys() -> None:
    """docs/events.md's table has one row per Event, with its text-log level and required keys."""
    readme = (ROOT / "docs" / "events.md").read_text()
    rows = {
        match.group(1): (match.group(2), match.group(3))
        for match in re.finditer(r"^\| `(\w+)` \| (INFO|WARNING|ERROR) \|([^\n]*)$", readme, re.MULTILINE)
    }
    assert set(rows) == {event.value for event in Event}
    for event, payload_type in PAYLOADS.items():
        level, keys = rows[event.value]
        assert level == level_for(event).upper(), event
        for key in payload_type.__required_keys__:  # type: ignore[attr-defined]
            assert f"`{key}`" in keys, (event, key)


def test_the_configuration_docs_table_is_the_schemas() -> None:
    """docs/configuration.md holds ``markdown_table()`` verbatim: one row per key, with its default."""
    docs = (ROOT / "docs" / "configuration.md").read_text()
    assert markdown_table() in docs
    for key in flatten(default_values()):
        assert f"| `{key}` |" in docs, key


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train.steps": 200, ...}``: every leaf key of a config, dotted."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
