"""Hook types by name: the ``speedtronic.hooks`` entry-point group, read in one place.

speedtronic registers its own hooks there (``tensorboard``, ``wandb``, ``mlflow``, ``otel``,
``structlog``, ``progress``, in its ``pyproject.toml``) exactly as a third-party package registers
its own::

    [project.entry-points."speedtronic.hooks"]
    myhook = "mypackage.hooks:MyHook"

so a config's ``{type: myhook}`` and ``speedtronic replay RUN --hook myhook`` accept any installed hook
type. A name speedtronic registers can't be taken over by another package. Nothing is imported until
a type is asked for (``hook_type``): listing the types imports no SDK.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

__all__ = ["ENTRY_POINT_GROUP", "hook_type", "hook_types"]

ENTRY_POINT_GROUP = "speedtronic.hooks"
"""The entry-point group hook types are registered in: ``name = "package.module:factory"``."""

_OWN_DISTRIBUTION = "speedtronic"


def hook_types() -> dict[str, str]:
    """Every registered hook type, as ``{name: "package.module:factory"}``, sorted by name.

    Read from the installed distributions' entry points at each call (nothing is imported). A name
    speedtronic's own distribution registers wins over another package's; between other packages, the
    first distribution found on ``sys.path`` wins.
    """
    import importlib.metadata  # here, not at import: it costs more than the rest of speedtronic.hooks

    own: dict[str, str] = {}
    others: dict[str, str] = {}
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(entry_point, "dist", None)
        is_own = dist is not None and _normalized(dist.name) == _OWN_DISTRIBUTION
        (own if is_own else others).setdefault(entry_point.name, entry_point.value)
    return dict(sorted({**others, **own}.items()))


def hook_type(name: str) -> Callable[..., Any]:
    """The factory (usually a class) of the hook type ``name``, imported now.

    ``name`` is a registered name (``hook_types()``) or, for a factory nobody registered,
    ``"package.module:factory"``. Raises ``LookupError`` for an unknown name, with the known ones
    listed, and for a factory that can't be imported or isn't callable. A factory's own optional
    dependency (an SDK) is imported when the hook is constructed, not here.
    """
    known = hook_types()
    target = known.get(name)
    if target is None and ":" not in name:
        listed = ", ".join(known) or "none (speedtronic's package metadata is missing: pip install -e .)"
        raise LookupError(f"unknown hook type {name!r}; known types: {listed}, or 'package.module:factory'")
    target = target or name
    module_name, _, attribute = target.partition(":")
    attribute = attribute.split("[", 1)[0].strip()  # an entry point's "[extra]" marker is not a name
    try:
        found: Any = importlib.import_module(module_name.strip())
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError) as error:
        raise LookupError(f"hook type {name!r} ({target}) can't be imported: {error}") from None
    if not callable(found):
        raise LookupError(f"hook type {name!r} ({target}) is not callable")
    return found  # type: ignore[no-any-return]  # checked callable just above


def _normalized(name: str) -> str:
    """A distribution name as packaging compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()
