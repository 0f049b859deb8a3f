"""The house keeps its shape: one namespace, imports only point down, no circles.

Every top-level package of the repository is installed as `writegate.<package>`; the
table below is the design brief's layout, and a package missing from it fails the test
so that a new one is placed deliberately. Imports inside functions and under
TYPE_CHECKING count too: a circle hidden in a function is still a circle.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "writegate"
# What each package may import from the project, lowest layer first.
ALLOWED: dict[str, set[str]] = {
    "approval": set(),
    "tools": {"approval"},
    "checkpoints": {"approval"},
    # The composition root: the wiring every way in opens (`runtime.wiring`).
    "runtime": {"approval", "tools", "checkpoints"},
    "graph": {"approval", "tools", "checkpoints", "runtime"},
    # The conformance kit that users run against their own tools, beside the surfaces.
    "testing": {"approval", "tools", "checkpoints", "runtime", "graph"},
    # The ways in. An application they serve is handed to them as a value, never imported.
    "surfaces": {"approval", "tools", "checkpoints", "runtime", "graph"},
    # The demo application and its own commands (`demo/cli/`), on the public face
    # (`writegate`, and `writegate.testing`, whose `ScriptedChatModel` its scripted model
    # extends). Still reaches below it for its runtime (a `Runtime` with its provider;
    # tests/unit/test_demo_face.py pins each name); never approval's, the tools', the
    # checkpoints' or graph's internals, never the surfaces: its commands are handed the
    # command line they join (`demo/cli/kit.py`).
    "demo": {"runtime", "testing"},
    # The `writegate` command composed, and nothing else: the surfaces' commands and the
    # demo's, which it hands the surfaces' consoles and rendering.
    "console": {"surfaces", "demo"},
    "bench": {
        "approval", "tools", "checkpoints", "runtime", "graph", "surfaces", "testing", "demo"
    },
}  # fmt: skip
# Modules with a wider allowance than their package. `Writegate`, the library's entry,
# hands out the graph adapters over the runtime (`tool_node()`, `middleware()`,
# `build_agent()`): the one module of the root that sits above graph/.
SUB_ALLOWED: dict[str, set[str]] = {
    "runtime/writegate.py": {"approval", "tools", "checkpoints", "graph"},
}
# The root package's own modules (the public face and the console entry) sit on top.
ROOT_MODULES = ("__init__.py", "__main__.py")


def _packages() -> set[str]:
    return {path.parent.name for path in ROOT.glob("*/__init__.py")}


def _modules() -> Iterator[tuple[str, Path]]:
    for module in ROOT_MODULES:
        yield NAMESPACE + "." + module.removesuffix(".py"), ROOT / module
    for package in sorted(_packages()):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join((NAMESPACE, *parts)), path


def _imports(path: Path, modules: Collection[str] = ()) -> Iterator[str]:
    """The modules `path` imports: `from p import m` names module p.m when m is one."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.relative_to(ROOT)}: use absolute writegate imports"
            if not node.module:
                continue
            submodules = [f"{node.module}.{a.name}" for a in node.names]
            named = [sub for sub in submodules if sub in modules]
            yield from named
            if len(named) < len(submodules):
                yield node.module


def _graph() -> dict[str, set[str]]:
    modules = dict(_modules())
    return {
        name: {target for target in _imports(path, modules) if target in modules} - {name}
        for name, path in modules.items()
    }


def test_every_top_level_package_has_a_place_in_the_layout() -> None:
    assert _packages() == set(ALLOWED), "add the new package to ALLOWED (and to the wheel)"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_layers_below_it(package: str) -> None:
    for path in sorted((ROOT / package).rglob("*.py")):
        inside = path.relative_to(ROOT).as_posix()
        allowed = next(
            (extra for sub, extra in SUB_ALLOWED.items() if inside.startswith(sub)),
            ALLOWED[package],
        )
        for target in _imports(path):
            top = target.split(".")[0]
            assert top not in ALLOWED, f"{path.relative_to(ROOT)} imports {target}: use writegate."
            parts = target.split(".")
            if parts[0] != NAMESPACE or len(parts) < 2 or parts[1] not in ALLOWED:
                continue
            layer = parts[1]
            assert layer == package or layer in allowed, (
                f"{path.relative_to(ROOT)} imports {target}, a layer {package} may not use"
            )


def test_no_module_imports_itself_back_through_a_circle() -> None:
    graph = _graph()
    circles = [scc for scc in _strongly_connected(graph) if len(scc) > 1]
    assert circles == [], f"import circles: {circles}"


def test_the_circle_finder_finds_a_circle() -> None:
    circles = _strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert sorted(sorted(c) for c in circles if len(c) > 1) == [["a", "b", "c"]]


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative: the graph's strongly connected components."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            advanced = False
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                found.append(component)
    return found


# Private names of the standard library's own API that code may use.
_STDLIB_PRIVATE = {"_replace", "_asdict", "_fields", "_make", "_exit"}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_no_module_reaches_into_another_ones_private_names(package: str) -> None:
    """`x._name` only on self or cls; `from m import _name` never (a package's face is
    what its __init__ names; everything else is its own business)."""
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith(NAMESPACE)
            ):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{where} imports private {private} from {node.module}"
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and node.attr not in _STDLIB_PRIVATE
                and isinstance(node.value, ast.Name)
                and node.value.id not in ("self", "cls")
            ):
                owner = node.value.id
                # An instance of the module's own class (e.g. made by a classmethod) is fine.
                if not _defines_class_using(path, node.attr):
                    pytest.fail(f"{where} uses {owner}.{node.attr}, a private name")


def _defines_class_using(path: Path, attr: str) -> bool:
    """True when a class in `path` itself sets or reads `self.<attr>`."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == attr
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            return True
    return False


def test_console_composes_the_command_and_holds_no_command_of_its_own() -> None:
    """A command is a surface's (`surfaces/cli/`) or the demo's (`demo/cli/`); console/
    only lists them (no `@app.command`, no `typer.Option` of its own)."""
    for path in sorted((ROOT / "console").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            named = ast.unparse(node.func) if isinstance(node, ast.Call) else ""
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            assert not named.endswith((".command", ".add_typer", "Option", "Argument")), (
                f"{where} declares a command ({named}): put it in surfaces/cli or demo/cli"
            )


def test_audit_rows_are_built_only_by_the_builders_in_approval_audit() -> None:
    builders = ROOT / "approval" / "audit.py"
    for package in sorted(ALLOWED):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == builders:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "AuditRecord":
                    pytest.fail(f"{path.relative_to(ROOT)}:{node.lineno} builds an AuditRecord")


# -- no private path: the demo's tools are declared as anyone's are ---------------------

# The one class built on the internal `tools.registry.Tool`: the kit's adapter.
TOOL_BASE_USERS = {"tools/kit_spec.py": {"CallableTool"}}


def _subclasses_of_tool(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef):
            bases = {ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases}
            if "Tool" in bases:
                found.add(node.name)
    return found


def test_only_the_kit_builds_on_the_internal_tool_base() -> None:
    users = {}
    for package in sorted(_packages()):
        for path in sorted((ROOT / package).rglob("*.py")):
            if classes := _subclasses_of_tool(path):
                users[str(path.relative_to(ROOT))] = classes
    assert users == TOOL_BASE_USERS


def test_every_shipped_tool_is_declared_with_write_tool_or_read_tool() -> None:
    from tests.demo_registry import default_registry
    from writegate.demo.domain import domain_tools
    from writegate.tools.kit import GuardedTool
    from writegate.tools.kit_spec import CallableTool

    tools = domain_tools(None)  # type: ignore[arg-type]  # no provider call is made
    assert tools and all(isinstance(tool, GuardedTool) for tool in tools)
    specs = default_registry(None).specs()  # type: ignore[arg-type]
    assert [spec.name for spec in specs] == [tool.name for tool in tools]
    assert all(type(spec) is CallableTool for spec in specs)


LINKS = ROOT / ".editable" / NAMESPACE


@pytest.mark.parametrize("name", [*sorted(ALLOWED), *ROOT_MODULES])
def test_the_editable_install_links_every_package_to_the_root(name: str) -> None:
    link = LINKS / name
    assert link.is_symlink(), f".editable/{NAMESPACE}/{name} is missing: add the link"
    assert link.resolve() == (ROOT / name).resolve()


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_refuses_a_bare_import_from_the_repository_root(package: str) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", f"import {package}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert f"import writegate.{package}, not {package}" in done.stderr
