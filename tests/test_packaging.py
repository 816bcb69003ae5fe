"""What installing and importing speedtronic costs a user: no heavy imports, a typed package."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import speedtronic

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "module", ["speedtronic", "speedtronic.profiling", "speedtronic.hooks", "speedtronic.processors"]
)
def test_import_is_light(module: str) -> None:
    """Importing speedtronic imports none of torch, wandb, tensorboard, numpy, mlflow, opentelemetry."""
    code = (
        f"import sys, {module}\n"
        "heavy = sorted(m for m in ('torch', 'wandb', 'tensorboard', 'numpy', 'mlflow', 'opentelemetry')\n"
        "               if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_public_modules_declare_their_api() -> None:
    """Every public module lists its API in __all__ (ruff's RUF022 keeps it sorted)."""
    import speedtronic.errors
    import speedtronic.hooks
    import speedtronic.processors
    import speedtronic.profiling

    for module in (
        speedtronic,
        speedtronic.errors,
        speedtronic.hooks,
        speedtronic.processors,
        speedtronic.profiling,
    ):
        names = list(module.__all__)
        assert len(names) == len(set(names)), module.__name__
        assert all(hasattr(module, name) for name in names)


def test_py_typed_shipped() -> None:
    assert (Path(speedtronic.__file__).parent / "py.typed").exists()


def test_quickstart_example_runs(tmp_path: Path) -> None:
    """examples/quickstart.py runs and writes its JSONL."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "train_step step=50" in result.stdout
    assert (tmp_path / "runs" / "quickstart" / "metrics.jsonl").exists()


def test_public_names_and_submodules_load_on_first_use() -> None:
    """`import speedtronic` loads no logging machinery; its names and submodules still resolve on use."""
    probe = (
        "import sys, speedtronic\n"
        "before = 'speedtronic.profiling' in sys.modules or 'structlog' in sys.modules\n"
        "from speedtronic import MetricLogger\n"
        "assert MetricLogger is speedtronic.profiling.MetricLogger\n"
        "assert speedtronic.hooks.on_event is speedtronic.on_event\n"
        "try:\n"
        "    speedtronic.no_such_name\n"
        "except AttributeError as error:\n"
        "    print(before, error)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False module 'speedtronic' has no attribute 'no_such_name'"


def test_alerts_and_stack_dumps_load_only_for_a_logger_that_asks(tmp_path: Path) -> None:
    """A MetricLogger without rules or a stack signal never loads `speedtronic.alerts` or
    `speedtronic.stacks` (their import cost); one given rules loads them on use, and alerts."""
    probe = (
        "import sys\n"
        "from speedtronic.profiling import MetricLogger\n"
        "with MetricLogger(json_file=sys.argv[1] + '/plain.jsonl', stream=sys.stdout) as log:\n"
        "    log.emit('train_step', {'step': 1, 'loss': float('nan')})\n"
        "print(sorted(m for m in ('speedtronic.alerts', 'speedtronic.stacks') if m in sys.modules))\n"
        "from speedtronic.alerts import NonFinite\n"
        "rules = [NonFinite()]\n"
        "with MetricLogger(json_file=sys.argv[1] + '/rules.jsonl', stream=sys.stdout, alerts=rules) as log:\n"
        "    log.emit('train_step', {'step': 1, 'loss': float('nan')})\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == "[]"
    assert " | ERROR | alert rule=non_finite " in lines[-1]
    assert '"event":"alert"' in (tmp_path / "rules.jsonl").read_text()
    assert '"event":"alert"' not in (tmp_path / "plain.jsonl").read_text()


@pytest.fixture(scope="module")
def project() -> dict[str, Any]:
    """pyproject.toml's [project] table as setuptools builds it (dynamic fields filled in)."""
    from setuptools.config.pyprojecttoml import read_configuration

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a deprecated form (license = {text = ...}) fails here
        return dict(read_configuration(ROOT / "pyproject.toml")["project"])


class TestProjectMetadata:
    def test_the_version_is_written_once(self, project: dict[str, Any]) -> None:
        """The package metadata's version is speedtronic.__version__, read from speedtronic/_version.py."""
        assert project["dynamic"] == ["version"]
        assert project["version"] == speedtronic.__version__
        versions = re.findall(r"\b\d+\.\d+\.\d+\b", (ROOT / "pyproject.toml").read_text())
        assert speedtronic.__version__ not in versions

    def test_the_license_is_an_spdx_expression_with_its_file(self, project: dict[str, Any]) -> None:
        """license = "MIT" and the LICENSE file holding the MIT text ship together."""
        assert (project["license"], project["license-files"]) == ("MIT", ["LICENSE"])
        assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")

    def test_an_index_can_classify_it(self, project: dict[str, Any]) -> None:
        """Keywords and trove classifiers a package index shows and filters by."""
        assert {"pytorch", "logging", "structlog"} <= set(project["keywords"])
        assert "Typing :: Typed" in project["classifiers"]
        assert "License :: OSI Approved :: MIT License" not in project["classifiers"]  # SPDX says it


def _requirement_names(project: dict[str, Any], extras: str) -> set[str]:
    """The distributions ``pip install '.[extras]'`` pulls in from pyproject.toml, nested extras
    (``speedtronic[wandb,tensorboard]``) expanded."""
    names: set[str] = set()
    for extra in extras.split(","):
        for requirement in project["optional-dependencies"][extra.strip()]:
            nested = re.fullmatch(r"speedtronic\[([^]]+)\]", requirement)
            if nested:
                names |= _requirement_names(project, nested[1])
            else:
                names.add(re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower())
    return names


class TestTheMainJob:
    def test_make_run_installs_what_the_default_config_uses(self, project: dict[str, Any]) -> None:
        """`make run` installs psutil (the default config's system events), TensorBoard, tqdm and
        matplotlib, so its first line is the log's, not a warning, and every printed command works."""
        makefile = (ROOT / "Makefile").read_text()
        recipe = makefile[makefile.index("$(VENV)/.run-installed:") :]
        extras = re.search(r'-e "\.\[([^]]+)\]"', recipe)
        assert extras is not None
        assert {"psutil", "tensorboard", "tqdm", "matplotlib"} <= _requirement_names(project, extras[1])

    def test_the_torch_extra_has_what_the_default_config_samples(self, project: dict[str, Any]) -> None:
        """pip install 'speedtronic[torch]' gets psutil: `speedtronic train`'s default config samples the
        process and the host (logging.system_interval_s: 10) without a warning."""
        assert "psutil" in _requirement_names(project, "torch")

    def test_make_test_says_how_long_it_takes_before_it_starts(self) -> None:
        """`make test`'s first line says how long it usually takes on a 2-core machine; the README's
        first screen says it once."""
        makefile = (ROOT / "Makefile").read_text()
        recipe = makefile[makefile.index("\ntest:\n") + len("\ntest:\n") :].splitlines()
        assert recipe[0].startswith("\t@echo ")
        assert re.search(r"about \d+ minutes on a 2-core machine", recipe[0])
        readme = (ROOT / "README.md").read_text()
        first_screen = readme[: readme.index("```python")]
        assert len(re.findall(r"about \d+ minutes on 2 cores", readme)) == 1
        assert re.search(r"about \d+ minutes on 2 cores", first_screen)
