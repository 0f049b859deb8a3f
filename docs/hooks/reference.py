"""The generated parts of the docs site: the error table, the command line and the HTTP
API, each built from the code it documents, so the reference cannot drift from it.

MkDocs runs this file as a hook (`hooks:` in mkdocs.yml): a page holding a marker such
as `<!-- generated: errors -->` gets the matching markdown in its place. The HTTP API
is rendered from `docs/reference/openapi.json`, which is committed so that the site
carries the document itself; `python docs/hooks/reference.py openapi` writes it again
from the FastAPI app, and a test checks that the committed one is current.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OPENAPI = ROOT / "docs" / "reference" / "openapi.json"
MARKER = re.compile(r"<!-- generated: ([a-z-]+) -->")


def _cell(text: str) -> str:
    """Text that stays inside one markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _summary(doc: str | None) -> str:
    """A docstring's first paragraph, on one line."""
    return _cell((doc or "").strip().split("\n\n", 1)[0])


# -- errors ---------------------------------------------------------------------------


def _error_classes() -> Iterator[type]:
    from writegate.approval.errors import WritegateError

    seen: list[type] = []
    stack = [WritegateError]
    while stack:
        cls = stack.pop(0)
        seen.append(cls)
        stack.extend(cls.__subclasses__())
    yield from seen


def errors_markdown() -> str:
    """One row per error class: its code, class, retryable, HTTP status and meaning."""
    import writegate
    from writegate.surfaces.web.errors import status_for

    public = set(writegate.__all__)
    rows = [
        "| code | class | retryable | HTTP | what it means |",
        "|---|---|---|---|---|",
    ]
    for cls in sorted(_error_classes(), key=lambda c: (c.code, c.__mro__.__len__())):
        name = f"`{cls.__name__}`" + (" (exported)" if cls.__name__ in public else "")
        shared = "code" not in vars(cls) and cls.__name__ != "WritegateError"
        meaning = _summary(cls.__doc__) if cls.__doc__ else _cell(cls.default_message)
        if shared:
            meaning = f"a kind of `{cls.__mro__[1].__name__}`: " + meaning
        retryable = "yes" if cls.retryable else "no"
        rows.append(f"| `{cls.code}` | {name} | {retryable} | {status_for(cls.code)} | {meaning} |")
    return "\n".join(rows) + "\n"


# -- the command line -----------------------------------------------------------------


# typer carries its own copy of click, so commands and parameters are read by their
# attributes, whichever click they come from.


def _is_group(cmd: Any) -> bool:
    return hasattr(cmd, "list_commands")


def _commands(group: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    yield path, group
    if _is_group(group):
        context = group.context_class(group)
        for name in sorted(group.list_commands(context)):
            sub = group.get_command(context, name)
            if sub is not None and not sub.hidden:
                yield from _commands(sub, [*path, name])


def _param_row(param: Any) -> str:
    if param.param_type_name == "option":
        names = ", ".join(f"`{n}`" for n in [*param.opts, *param.secondary_opts])
        what = param.help or ""
        default = param.default
        if (
            param.show_default is not False
            and default not in (None, False, (), "")
            and (not callable(default))
        ):
            what += f" (default: `{default}`)"
        if param.envvar:
            what += f" (env: `{param.envvar}`)"
    else:
        names = f"`{(param.name or '').upper()}`"
        what = getattr(param, "help", None) or ("required" if param.required else "optional")
    return f"| {names} | {_cell(what)} |"


def cli_markdown() -> str:
    """Every `writegate` command with its help text and its options, from the typer app."""
    import typer

    from writegate.__main__ import command

    root = typer.main.get_command(command())
    out: list[str] = []
    for path, cmd in _commands(root, ["writegate"]):
        if _is_group(cmd) and len(path) > 1 and not cmd.params:
            out += [f"## `{' '.join(path)}`", "", inspect.cleandoc(cmd.help or ""), ""]
            continue
        out += [f"## `{' '.join(path)}`", ""]
        if cmd.help:
            out += [inspect.cleandoc(cmd.help).replace("\b\n", ""), ""]
        params = [p for p in cmd.params if not getattr(p, "hidden", False)]
        if params:
            out += ["| argument or option | what it does |", "|---|---|"]
            out += [_param_row(p) for p in params] + [""]
    return "\n".join(out)


# -- the HTTP API ---------------------------------------------------------------------


def openapi_document() -> dict[str, Any]:
    """The HTTP service's OpenAPI document, as the app serves it at /openapi.json."""
    from writegate.surfaces.web.app import create_app

    return create_app().openapi()


def openapi_text() -> str:
    return json.dumps(openapi_document(), indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def http_api_markdown() -> str:
    """A table of the committed OpenAPI document's paths, methods and summaries."""
    document = json.loads(OPENAPI.read_text(encoding="utf-8"))
    rows = ["| method | path | what it does |", "|---|---|---|"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if method.startswith("x-") or method == "parameters":
                continue
            what = _summary(operation.get("description")) or operation.get("summary", "")
            rows.append(f"| `{method.upper()}` | `{path}` | {_cell(what)} |")
    return "\n".join(rows) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "errors": errors_markdown,
    "cli": cli_markdown,
    "http-api": http_api_markdown,
}


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs hook: put each generated part in place of its marker."""
    return MARKER.sub(lambda match: GENERATORS[match.group(1)](), markdown)


if __name__ == "__main__":
    if sys.argv[1:] != ["openapi"]:
        sys.exit("usage: python docs/hooks/reference.py openapi")
    OPENAPI.write_text(openapi_text(), encoding="utf-8")
    print(f"wrote {OPENAPI.relative_to(ROOT)}")
