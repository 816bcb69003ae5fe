"""Optional dependencies: never imported until a hook needs them, and a clear hint when missing.

Each check runs in a fresh interpreter, since this test process has imported everything already.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

BLOCK = textwrap.dedent(
    """
    import sys
    class Uninstalled:
        # Makes these top-level packages fail to import as if they were not installed.
        def __init__(self, *names):
            self.names = names
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in self.names:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    """
)


ROOT = Path(__file__).resolve().parents[2]


def python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter, in an empty directory of its own (a hook it builds writes
    there, never into the checkout)."""
    with tempfile.TemporaryDirectory() as cwd:
        return subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=cwd,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip


SDKS = {"torch", "wandb", "tensorboard", "mlflow", "opentelemetry"}


def test_importing_speedtronic_imports_no_sdk() -> None:
    """speedtronic, its integrations (the MLflow and OpenTelemetry modules too), testing and pytest plugin
    import without torch, wandb, tensorboard, mlflow or opentelemetry."""
    result = python(
        "import sys, speedtronic, speedtronic.integrations, speedtronic.testing, speedtronic.pytest_plugin\n"
        "import speedtronic.profiling, speedtronic.integrations.mlflow, speedtronic.integrations.otel\n"
        "from speedtronic.integrations import MlflowHook, OtelHook, StructlogHook, TensorboardHook\n"
        f"print(sorted({{m.partition('.')[0] for m in sys.modules}} & {SDKS!r}))"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("construct", "blocked", "hint"),
    [
        ("WandbHook(project='p')", "wandb", "pip install 'speedtronic[wandb]'"),
        ("TensorboardHook('tb')", "tensorboard", "pip install 'speedtronic[tensorboard]'"),
        ("MlflowHook()", "mlflow", "MlflowHook requires mlflow: pip install 'speedtronic[mlflow]'"),
        ("OtelHook()", "opentelemetry", "requires opentelemetry-api: pip install 'speedtronic[otel]'"),
    ],
)
def test_a_missing_sdk_names_the_extra_to_install(construct: str, blocked: str, hint: str) -> None:
    """Constructing a hook without its SDK raises ModuleNotFoundError with the install command."""
    result = python(
        BLOCK + f"sys.meta_path.insert(0, Uninstalled({blocked!r}))\n"
        "from speedtronic.integrations import MlflowHook, OtelHook, TensorboardHook, WandbHook\n"
        "try:\n"
        f"    {construct}\n"
        "except ModuleNotFoundError as error:\n"
        "    print(error.name, '|', error)\n"
    )
    assert result.returncode == 0, result.stderr
    name, message = result.stdout.strip().split(" | ")
    assert name == blocked
    assert hint in message


def test_a_broken_sdk_install_is_not_reported_as_missing() -> None:
    """tensorboard present but its protobuf dependency missing: the real error, not the hint."""
    result = python(
        BLOCK + "sys.meta_path.insert(0, Uninstalled('google'))\n"
        "from speedtronic.integrations import TensorboardHook\n"
        "try:\n"
        "    TensorboardHook('tb')\n"
        "except ModuleNotFoundError as error:\n"
        "    print(error.name, '|', error)\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("google")
    assert "speedtronic[tensorboard]" not in result.stdout


@pytest.mark.parametrize(
    ("framework", "message"),
    [
        (
            "lightning",
            "speedtronic.integrations.lightning requires Lightning: pip install 'speedtronic[lightning]'",
        ),
        (
            "transformers",
            "speedtronic.integrations.transformers requires transformers: "
            "pip install 'speedtronic[transformers]'",
        ),
        (
            "accelerate",
            "speedtronic.integrations.accelerate requires Accelerate: pip install 'speedtronic[accelerate]'",
        ),
    ],
)
def test_an_adapter_without_its_framework_names_the_extra(framework: str, message: str) -> None:
    """Importing an adapter without its framework raises ModuleNotFoundError with the install hint;
    importing speedtronic.integrations never imports the framework."""
    result = python(
        "import sys\n"
        "import speedtronic.integrations\n"
        f"assert {framework!r} not in sys.modules\n"
        f"sys.modules[{framework!r}] = None\n"
        "try:\n"
        f"    import speedtronic.integrations.{framework}\n"
        "except ModuleNotFoundError as error:\n"
        "    print(error.name, '|', error)\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{framework} | {message}"
