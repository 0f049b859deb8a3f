"""Which tools the ways in serve on a database, and opening the runtime over them.

The commands that are not the demo's (`approvals`, `approve`, `revoke`, `confirm`,
`reconcile`, `serve`, `mcp`) act on whatever database DATABASE_URL names, often a
user's own. They serve, in this order:

- the user's tools, when `WRITEGATE_TOOLS` names them (`package.module:attribute`, an
  iterable of `write_tool` / `read_tool` tools, or a function that returns one);
- the tools of the `Application` the command was composed with (the `writegate`
  command is composed with the demo, in `writegate.console`), on that application's
  own database only (one it set up: `writegate demo`, `chat`, `db seed` made the
  demo's);
- no tool otherwise: the ledger's lists and decisions work, and a proposal of a tool
  not served is refused as unknown.

Opening creates writegate's own tables (in their schema) and nothing else, unless the
database is already the application's, whose tables are its own business. The
surfaces never import an application: it is handed to them as a value.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from importlib import import_module
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the command line imports this module before any command runs
    from writegate.approval.policy import Policy
    from writegate.checkpoints.migrate import MigrationList
    from writegate.runtime.wiring import Runtime
    from writegate.runtime.writegate import Writegate
    from writegate.tools.registry import Registry

TOOLS_ENV = "WRITEGATE_TOOLS"


class Application(Protocol):
    """An application whose tools the commands that are not its own serve on its own
    database. The composition point (`writegate.console`) hands one to the commands;
    nothing below it imports an application."""

    @property
    def migrations(self) -> MigrationList:
        """Its own tables' migration list (`db status` shows where it stands)."""
        ...

    def owns(self, url: str) -> bool:
        """True when this application set the database `url` up."""
        ...

    def setup(self, url: str) -> None:
        """Create or migrate its own tables on `url` (idempotent)."""
        ...

    def describe_model(self) -> str:
        """One line naming the chat model its agent uses, never showing a key (its
        runtime's `chat_model` makes that model)."""
        ...

    def open(
        self,
        url: str,
        *,
        tune: Callable[[Policy], Policy],
        provider_url: str | None,
        max_connections: int,
        step_hook: Callable[[str], None] | None,
    ) -> Writegate:
        """Its tools on `url` opened through the public entry (`Writegate.open`), its
        policy adjusted by `tune`; the runtime the commands serve is its `runtime`.
        `provider_url`: its downstream service's address, when the command was given
        one (`reconcile --provider-url`)."""
        ...


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


def serving(url: str, application: Application | None) -> Application | None:
    """The application whose tools are served on `url`: None when `WRITEGATE_TOOLS`
    names the user's own, or the database is not the application's."""
    if os.environ.get(TOOLS_ENV, "").strip():
        return None
    return application if application is not None and application.owns(url) else None


def describe_served_model(url: str, application: Application | None) -> str:
    """One line naming the chat model the agent served on `url` uses: the serving
    application's, else the one the environment configures (`env_chat_model`)."""
    from writegate.graph.model import describe_env_model

    serving_app = serving(url, application)
    return describe_env_model() if serving_app is None else serving_app.describe_model()


def open_served(
    url: str,
    *,
    application: Application | None = None,
    policy: Callable[[Policy], Policy] = lambda base: base,
    provider_url: str | None = None,
    max_connections: int = 10,
) -> Runtime:
    """The runtime over the tools this database is served with (see the module's
    docstring). `policy` adjusts the base policy (the user's policy file, or the
    application's on its database); `provider_url` goes to the application."""
    from writegate.approval.policy import load_policy
    from writegate.runtime.wiring import Runtime
    from writegate.surfaces.step_kill import kill_hook_from_env
    from writegate.tools.registry import Registry

    hook = kill_hook_from_env()  # fault testing only
    spec = os.environ.get(TOOLS_ENV, "").strip()
    serving_app = serving(url, application)
    if spec:
        registry = user_tools(spec)
    elif serving_app is not None:
        return serving_app.open(
            url,
            tune=policy,
            provider_url=provider_url,
            max_connections=max_connections,
            step_hook=hook,
        ).runtime
    else:
        registry = Registry([])
    chosen = policy(load_policy())  # before the database: a bad file stops here
    return Runtime.open(
        url, tools=registry, policy=chosen, max_connections=max_connections, step_hook=hook
    )
