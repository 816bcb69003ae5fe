"""Optional dependencies: import one, or raise ``ModuleNotFoundError`` naming the extra to install."""

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
