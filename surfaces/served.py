"""Which tools the ways in serve on a database, and opening the runtime over them.

The commands that are not the demo's (`approvals`, `approve`, `revoke`, `confirm`,
`reconcile`, `serve`, `mcp`) act on whatever database DATABASE_URL names, often a
user's own. They serve, in this order:

- the user's tools, when `WRITEGATE_TOOLS` names them (`package.module:attribute`, an
  iterable of `write_tool` / `read_tool` tools, or a function that returns one);
- the demo's tools, on the demo's database only (one whose demo migration list is
  applied: `writegate demo`, `chat`, `db seed` made it);
- no tool otherwise: the ledger's lists and decisions work, and a proposal of a tool
  not served is refused as unknown.

Opening creates writegate's own tables (in their schema) and nothing else, unless the
database is already the demo's, whose tables are its own business.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from importlib import import_module
from typing import TYPE_CHECKING, Any

import psycopg

if TYPE_CHECKING:  # the command line imports this module before any command runs
    from writegate.approval.policy import Policy
    from writegate.runtime.wiring import Runtime
    from writegate.tools.registry import Registry

TOOLS_ENV = "WRITEGATE_TOOLS"
# The relations only a database the demo's migration list set up has (its version
# table; the table older releases recorded it in).
DEMO_MARKS = ("public.writegate_demo_migrations", "writegate.legacy_migrations")


class ToolsNotFound(ValueError):
    """`WRITEGATE_TOOLS` does not name an importable iterable of tools."""


def user_tools(spec: str) -> Registry:
    """The tools `spec` (`package.module:attribute`) names, as a registry."""
    from writegate.runtime.writegate import spec_of
    from writegate.tools.registry import Registry

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ToolsNotFound(f"{TOOLS_ENV}={spec!r}: write it as package.module:attribute")
    try:
        found: Any = getattr(import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ToolsNotFound(f"{TOOLS_ENV}={spec!r}: {exc}") from exc
    tools = found() if callable(found) and not hasattr(found, "spec") else found
    if not isinstance(tools, Iterable):
        raise ToolsNotFound(f"{TOOLS_ENV}={spec!r} is not a list of tools")
    try:
        return Registry(spec_of(tool) for tool in tools)
    except TypeError as exc:
        raise ToolsNotFound(f"{TOOLS_ENV}={spec!r}: {exc}") from exc


def is_demo_database(url: str) -> bool:
    """True when the demo's migration list set this database up."""
    with psycopg.connect(url, autocommit=True) as conn:
        for mark in DEMO_MARKS:
            row = conn.execute("SELECT to_regclass(%s)", (mark,)).fetchone()
            if row is not None and row[0] is not None:
                return True
    return False


def open_served(
    url: str,
    *,
    policy: Callable[[Policy], Policy] = lambda base: base,
    provider: Any = None,
    max_connections: int = 10,
) -> Runtime:
    """The runtime over the tools this database is served with (see the module's
    docstring). `policy` adjusts the base policy (the user's policy file, or the demo's
    on the demo's database); `provider`: the demo's payment provider, when it is served."""
    from writegate.approval.policy import load_policy
    from writegate.runtime.wiring import Runtime
    from writegate.tools.registry import Registry

    spec = os.environ.get(TOOLS_ENV, "").strip()
    if spec:
        registry = user_tools(spec)
    elif is_demo_database(url):
        from writegate.demo.policy import demo_policy
        from writegate.demo.runtime import open_demo

        return open_demo(
            url, policy=policy(demo_policy()), provider=provider, max_connections=max_connections
        )
    else:
        registry = Registry([])
    chosen = policy(load_policy())  # before the database: a bad file stops here
    return Runtime.open(url, tools=registry, policy=chosen, max_connections=max_connections)
