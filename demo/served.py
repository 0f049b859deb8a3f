"""The demo as the commands that are not its own serve it: `serve`, `mcp`, `reconcile`,
`approvals`, `db setup`, `db status` act on the demo's database with its tools, policy
and provider, and on no other database. The `writegate` command is composed with a
`DemoApplication` (`writegate.console`); the runtime is imported only when one opens,
so `writegate --help` does not load it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import psycopg

from writegate import Policy
from writegate.demo.schema import DEMO

if TYPE_CHECKING:
    from writegate import Writegate

# The relations only a database the demo's migration list set up has (its version
# table; the table older releases recorded it in).
DEMO_MARKS = ("public.writegate_demo_migrations", "writegate.legacy_migrations")


def is_demo_database(url: str) -> bool:
    """True when the demo's migration list set this database up."""
    with psycopg.connect(url, autocommit=True) as conn:
        for mark in DEMO_MARKS:
            row = conn.execute("SELECT to_regclass(%s)", (mark,)).fetchone()
            if row is not None and row[0] is not None:
                return True
    return False


class DemoApplication:
    """The demo's tools, policy and provider, served on the demo's database only."""

    migrations = DEMO

    def owns(self, url: str) -> bool:
        return is_demo_database(url)

    def setup(self, url: str) -> None:
        from writegate.demo.schema import setup_demo

        setup_demo(url)

    def describe_model(self) -> str:
        from writegate.demo.model import describe_demo_model

        return describe_demo_model()

    def open(
        self,
        url: str,
        *,
        tune: Callable[[Policy], Policy],
        provider_url: str | None,
        max_connections: int,
        step_hook: Callable[[str], None] | None,
    ) -> Writegate:
        from writegate.demo.policy import demo_policy
        from writegate.demo.provider_http import HttpProvider
        from writegate.demo.runtime import open_demo

        provider = HttpProvider(provider_url) if provider_url else None
        return open_demo(
            url,
            policy=tune(demo_policy()),
            provider=provider,
            max_connections=max_connections,
            step_hook=step_hook,
        )
