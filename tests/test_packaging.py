"""What installing and importing speedtronic costs a user: no heavy imports, a typed package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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

    for module in (speedtronic, speedtronic.errors, speedtronic.hooks, speedtronic.processors,
                   speedtronic.profiling):
        names = list(module.__all__)
        assert len(names) == len(set(names)), module.__name__
        assert all(hasattr(module, name) for name in names)


def test_py_typed_shipped() -> None:
    assert (Path(speedtronic.__file__).parent / "py.typed").exists()


def test_quickstart_example_runs(tmp_path: Path) -> None:
    """examples/quickstart.py runs and writes its JSONL."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    )
    assert "train_step step=50" in result.stdout
    assert (tmp_path / "runs" / "quickstart" / "metrics.jsonl").exists()
