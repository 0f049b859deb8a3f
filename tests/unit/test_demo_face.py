"""The demo is an application of the library, its commands (`demo/cli/`) included: it
imports what `writegate` exports (`writegate/__init__.py`'s `__all__`), what the public
`writegate.testing` exports (its scripted demo model is a `ScriptedChatModel`) and its
own modules, and nothing from below the public face: what it takes from there is
pinned here, name by name, and the list is empty, so a new reach into writegate's
internals fails this test."""

from __future__ import annotations

import ast
from pathlib import Path

import writegate
import writegate.testing

ROOT = Path(__file__).resolve().parents[2]

# (module, name) the demo imports from below the public face, today: none. It opens
# through `Writegate.open` and hands back the `Writegate` (the surfaces serve an
# application through the one its `open` returns, `surfaces.served.Application`).
BELOW_THE_FACE: set[tuple[str, str]] = set()


def _demo_imports() -> set[tuple[str, str]]:
    found = set()
    for path in sorted((ROOT / "demo").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {(alias.name, "") for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                found |= {(node.module, alias.name) for alias in node.names}
    return found


def test_the_demo_imports_the_public_face_its_own_modules_and_only_the_pinned_rest() -> None:
    own = [(m, n) for m, n in _demo_imports() if m == "writegate" or m.startswith("writegate.")]
    face = {n for m, n in own if m == "writegate"}
    assert face <= set(writegate.__all__), (
        f"not exported by writegate: {face - set(writegate.__all__)}"
    )
    kit = {n for m, n in own if m == "writegate.testing"}
    assert kit <= set(writegate.testing.__all__), (
        f"not exported by writegate.testing: {kit - set(writegate.testing.__all__)}"
    )
    public = ("writegate", "writegate.testing")
    below = {(m, n) for m, n in own if m not in public and not m.startswith("writegate.demo")}
    assert below == BELOW_THE_FACE
