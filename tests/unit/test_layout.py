"""The folders keep to their lanes: approval imports no other layer, and so on."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What each package may import from the project (the design brief's layout table).
ALLOWED = {
    "approval": set(),
    "tools": {"approval"},
    "checkpoints": {"approval"},
    "graph": {"approval", "tools", "checkpoints"},
}


def _project_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found & set(ALLOWED)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_layers_below_it(package: str) -> None:
    for path in sorted((ROOT / package).rglob("*.py")):
        wrong = _project_imports(path) - ALLOWED[package] - {package}
        assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)}"
