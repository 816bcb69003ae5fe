"""speedtronic.record is the record contract's one home: no other module re-declares a part of it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from speedtronic import record

PACKAGE = Path(__file__).resolve().parents[1] / "speedtronic"

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


def code_strings(path: Path) -> set[str]:
    """The string literals of ``path`` that are code, not docstrings."""
    tree = ast.parse(path.read_text("utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    docstrings |= {  # an attribute's docstring: a string statement after an assignment
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    }


def second_copies(path: Path) -> list[str]:
    """What of the contract ``path`` declares again."""
    strings = code_strings(path)
    found = [name for name, table in TABLES.items() if table <= strings]
    found += [name for name, form in FORMS.items() if any(form in text for text in strings)]
    return found


def test_the_contract_module_holds_each_part() -> None:
    """The scan recognises each part where it lives: in speedtronic.record."""
    assert set(second_copies(Path(record.__file__))) == {*TABLES, *FORMS}


@pytest.mark.parametrize(
    "path",
    [p for p in sorted(PACKAGE.rglob("*.py")) if p.name != "record.py"],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_no_other_module_declares_it_again(path: Path) -> None:
    """Writers and readers import the contract's tables and forms from speedtronic.record."""
    assert second_copies(path) == []
