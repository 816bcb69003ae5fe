"""The package's layers: every import points down the pipeline, and no modules import each other."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "speedtronic"

LAYERS = [
    # catalog and contracts: what an event, a record, a level, an error, a rank is
    [
        "accelerators",
        "errors",
        "extras",
        "strings",
        "checks",
        "record",
        "events",
        "levels",
        "distributed",
        "_exit_and_fork",
        "_version",
    ],
    ["processors"],  # the stages
    ["alerts"],  # rules over records, their chain stage, rules from config
    ["sinks", "lifecycle", "stacks"],  # where lines go, the process's signals and exit, stacks on demand
    ["hooks"],  # the hook contract, dispatch, background hooks, hooks from config
    ["chain", "failures", "profiling", "testing", "pytest_plugin"],  # the logger
    ["integrations"],  # W&B, TensorBoard, structlog, MLflow, OpenTelemetry, the framework adapters
    ["training", "runtime"],  # the reference trainer and its runtime
    ["runs"],  # reading runs back
    ["commands", "__main__", ""],  # the CLI; "" is the package itself (speedtronic/__init__.py)
]
"""Lowest first; a module may import its own layer and the layers below, never one above."""


def layer_of(module: str) -> int:
    """The layer of ``speedtronic.<module>``, by its first name."""
    first = module.split(".")[0]
    for index, names in enumerate(LAYERS):
        if first in names:
            return index
    raise AssertionError(f"speedtronic.{module} is in no layer: add it to LAYERS")


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def imports(path: Path) -> set[str]:
    """The speedtronic modules ``path`` imports, at its top or inside functions (without the prefix)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "speedtronic":
            base = node.module.removeprefix("speedtronic").lstrip(".")
            if base:
                found.add(base)
            else:  # from speedtronic import x: a module, or a name of the package itself
                found |= {a.name if (PACKAGE / a.name).exists() or (PACKAGE / f"{a.name}.py").exists()
                          else "" for a in node.names}  # fmt: skip
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("speedtronic.")]
            found |= {name.removeprefix("speedtronic.") for name in names}
    return found


GRAPH = {module: imports(path) for module, path in modules()}


def test_every_import_points_down_the_pipeline() -> None:
    """No module imports one of a higher layer (an arrow that climbs back up is a misplaced name)."""
    upward = [
        f"speedtronic.{module} imports speedtronic.{target}"
        for module, targets in GRAPH.items()
        for target in targets
        if layer_of(target) > layer_of(module)
    ]
    assert upward == []


def test_no_import_cycles() -> None:
    """No module reaches itself through its imports (package __init__ re-exports of its own children
    aside: a package importing its submodules is how it lists them)."""

    def reaches(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [t for t in GRAPH.get(start, ()) if not _child(t, start)]
        while todo:
            module = todo.pop()
            if module in seen or module not in GRAPH:
                continue
            seen.add(module)
            todo += [t for t in GRAPH[module] if not _child(t, module)]
        return seen

    cycles = sorted(module for module in GRAPH if module and module in reaches(module))
    assert cycles == []


def _child(target: str, module: str) -> bool:
    """Whether ``target`` is a submodule of the package ``module`` (or of the root package)."""
    return module == "" or target.startswith(module + ".")


def arrows() -> set[tuple[str, str]]:
    """The imports between rooms (a top-level module or package of speedtronic, ``""`` the package
    itself), each pair once: the figure docs and reviews quote as "arrows"."""
    room = {module: module.split(".")[0] for module in GRAPH}
    return {(room[m], t.split(".")[0]) for m, ts in GRAPH.items() for t in ts if room[m] != t.split(".")[0]}


if __name__ == "__main__":  # python tests/test_layers.py: the counts
    print(f"{len({m.split('.')[0] for m in GRAPH})} rooms, {len(arrows())} arrows, "
          f"{sum(map(len, GRAPH.values()))} module imports")  # fmt: skip
