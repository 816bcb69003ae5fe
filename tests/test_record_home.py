"""speedtronic.record is the record's one home: no other module re-declares a part of it, and the
modules that use a part of the contract import it from the record floor."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from speedtronic.record import contract

PACKAGE = Path(__file__).resolve().parents[1] / "speedtronic"
CONTRACT = Path(contract.__file__)
FLOOR = CONTRACT.parent

TABLES = {
    "the non-finite names": {"NaN", "Infinity", "-Infinity"},
    "the note's non-finite kinds": {"nan", "inf", "neg_inf"},
}
"""Literal sets that, written together in one module, are a second copy of a contract table."""

FORMS = {
    "the timestamp's strftime form": "%Y-%m-%dT%H:%M:%S",
    "the timestamp's pattern": r"\d{4}-\d\d-\d\dT",
    "the rank file name's pattern": r"\.rank(?P<rank>",
}
"""Texts that, in a literal, are a second copy of a contract form."""

WORDS = {
    "the note's field names": {"v", "non_finite", "converted", "truncated", "origin"},
    "the record's note key": {"_speedtronic"},
    "the rate suffix": {"_per_s"},
}
"""Strings that, used as a key or compared in code, are a part of the contract written again: the
module must import its name (``NOTE_VERSION_KEY``, ``NOTE_NON_FINITE``, ``NOTE_KEY``, ``RATE_SUFFIX``...)."""

PIECES = {
    "a JSON Pointer's escapes": ("~0", "~1"),
    "the renamed payload key's prefix": ("payload_",),
    "a rank file name's infix": (".rank",),
    "a renamed key's counter": ("#",),
    "the timestamp's end": (".", "Z"),
}
"""Pieces of an f-string or literal that build a contract form by hand (``f"{key}#{n}"``,
``f"{stem}.rank{r}"``, ``f"{second}.{micros:06d}Z"``, ``"~1"``)."""


def _docstrings(tree: ast.AST) -> set[int]:
    found = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return found | {  # an attribute's docstring: a string statement after an assignment
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def code_strings(path: Path) -> set[str]:
    """The string literals of ``path`` that are code, not docstrings."""
    tree = ast.parse(path.read_text("utf-8"))
    docstrings = _docstrings(tree)
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    }


def used_words(path: Path) -> set[str]:
    """Strings ``path`` uses as a key (a subscript, a ``.get``/``.pop``/``.endswith``... argument, an
    ``in`` or ``==`` operand): where a contract's name would be written again."""
    tree = ast.parse(path.read_text("utf-8"))
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            found.append(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            found += node.args
        elif isinstance(node, ast.Compare):
            found += [node.left, *node.comparators]
    return {node.value for node in found if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def built_forms(path: Path) -> list[str]:
    """The contract forms ``path`` builds by hand: in an f-string or a plain literal."""
    tree = ast.parse(path.read_text("utf-8"))
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            texts = [part.value for part in node.values if isinstance(part, ast.Constant)]
            joined = "\x00".join(str(text) for text in texts)
            if any(text.startswith("#") for text in texts[1:] if isinstance(text, str)) or (
                texts and isinstance(texts[0], str) and texts[0].startswith("#") and len(node.values) > 1
                and isinstance(node.values[0], ast.FormattedValue)
            ):  # fmt: skip
                found.append("a renamed key's counter")
            if "payload_" in joined:
                found.append("the renamed payload key's prefix")
            if ".rank" in joined:
                found.append("a rank file name's infix")
            if "Z" in texts and any(
                isinstance(part, ast.FormattedValue) and part.format_spec is not None
                and "06d" in ast.unparse(part.format_spec)
                for part in node.values
            ):  # fmt: skip
                found.append("the timestamp's end")
        elif isinstance(node, ast.Constant) and node.value in {"~0", "~1"} and id(node) not in docstrings:
            found.append("a JSON Pointer's escapes")
    return sorted(set(found))


def second_copies(path: Path) -> list[str]:
    """What of the contract ``path`` declares again, or builds or names without importing it."""
    strings = code_strings(path)
    found = [name for name, table in TABLES.items() if table <= strings]
    found += [name for name, form in FORMS.items() if any(form in text for text in strings)]
    words = used_words(path)
    found += [name for name, names in WORDS.items() if names & words]
    return found + built_forms(path)


def outside_the_contract() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p != CONTRACT]


def test_the_contract_module_holds_each_part() -> None:
    """The scan recognises each part where it lives: in speedtronic.record.contract."""
    assert set(second_copies(CONTRACT)) >= {*TABLES, *FORMS}
    assert {"a JSON Pointer's escapes", "the renamed payload key's prefix", "the timestamp's end"} <= set(
        built_forms(CONTRACT)
    )


@pytest.mark.parametrize("path", outside_the_contract(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_other_module_declares_it_again(path: Path) -> None:
    """Writers and readers import the contract's tables, forms and names from speedtronic.record."""
    allowed = {"the rate suffix"} if path == PACKAGE / "events.py" else set()  # the role table's home
    assert [part for part in second_copies(path) if part not in allowed] == []


VALUE_HELPERS = {"to_python", "unique_key", "json_safe_record", "format_fields", "redact_text", "quote",
                 "safe_str", "key_text", "is_secret_key", "format_key", "format_value"}  # fmt: skip


@pytest.mark.parametrize(
    "path",
    [p for p in outside_the_contract() if FLOOR not in p.parents and p.parent.name != "processors"],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_values_come_from_the_record_floor(path: Path) -> None:
    """Hooks, integrations, the trainer and the readers import value helpers from speedtronic.record,
    never from a stage's module in speedtronic.processors."""
    tree = ast.parse(path.read_text("utf-8"))
    from_stages = sorted(
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("speedtronic.processors")
        for alias in node.names
        if alias.name in VALUE_HELPERS
    )
    assert from_stages == []
