"""Optional dependencies: import one, or say which extra to install.

speedtronic's core needs only structlog and orjson. Everything heavier (torch, wandb, TensorBoard,
matplotlib, polars, the framework adapters, MLflow, OpenTelemetry) is an extra, imported where it is
used. A missing one raises ``ModuleNotFoundError`` naming what needed it and the extra that brings it
(``speedtronic.integrations.WandbHook requires wandb: pip install 'speedtronic[wandb]'``), with
``name`` set, as structlog does for Rich. A module that is installed but fails on an import of its
own keeps its own error: that says more than an install hint would.

``require`` imports one module; a module-level ``try: import ... except ModuleNotFoundError as
error: raise missing(error, ...)`` keeps a block of ``from x import y`` lines as they are.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["missing", "require"]


def missing(
    error: ModuleNotFoundError, module: str, extra: str, *, needed_by: str, package: str | None = None
) -> ModuleNotFoundError:
    """The error to raise for ``error``, caught importing ``module``: the install hint when ``module``
    (or a package above it) is what is missing, else ``error`` itself.

    ``package`` is the name users know (``"Lightning"``, ``"PyYAML"``); default: ``module``'s top level.
    """
    if error.name is None or not (module == error.name or module.startswith(error.name + ".")):
        return error  # installed, but one of its own imports is missing: its error says which
    top = module.partition(".")[0]
    hint = f"{needed_by} requires {package or top}: pip install 'speedtronic[{extra}]'"
    return ModuleNotFoundError(hint, name=top)


def require(module: str, extra: str, *, needed_by: str, package: str | None = None) -> ModuleType:
    """``importlib.import_module(module)``, or ``missing``'s install hint."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        raise missing(error, module, extra, needed_by=needed_by, package=package) from None
