"""What tests share lives in support modules: no test module imports another test module or a
conftest (pytest gives fixtures to the tests that ask; a helper imported from a test module
brings that module's tests along, and ties two test files' edits together)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parents[1]


def _imported(path: Path) -> list[tuple[int, str]]:
    """The modules `path` imports from, relative imports resolved, with their lines."""
    package = [TESTS.name, *path.relative_to(TESTS).parent.parts]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            found.append((node.lineno, ".".join([*base, *(node.module or "").split(".")])))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return found


def test_no_test_module_imports_a_test_module_or_a_conftest() -> None:
    found = [f"{path.relative_to(TESTS.parent)}:{line}: {module}"
             for path in sorted(TESTS.rglob("*.py"))
             for line, module in _imported(path)
             if module.split(".")[0] == TESTS.name
             and module.split(".")[-1].startswith(("test_", "conftest"))]
    assert found == [], "move what they share into a support module"
