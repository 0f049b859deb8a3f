"""The graph LangGraph Studio and LangGraph Server serve (see `langgraph.json`, id `writegate`).

The server imports this file by path and reads the module-level `graph`. It is compiled
without a checkpointer because the server supplies its own (in memory under
`langgraph dev`, Postgres via POSTGRES_URI in a deployment). writegate's ledgers, the
domain tables and the simulated provider always live in the database DATABASE_URL names
(or `writegate.resolve_database_url`'s default).

It is built with `writegate.server_agent`, as an application's own would be. Importing
needs no database: the demo opens on the first run that uses it, so the
server starts, lists the graph and serves its schemas even while PostgreSQL is still
coming up. Identity comes from the server's authenticated user when the server has an
auth handler (`langgraph.auth.json`), else from each run's `user_id` / `tenant_id` in
its configurable or context (see `graph/identity.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from writegate import resolve_database_url, server_agent, setup_database
from writegate.demo.domain import domain_tools
from writegate.demo.model import demo_chat_model
from writegate.demo.prompt import DEMO_PROMPT
from writegate.demo.runtime import open_demo


class _SchemaOnlyProvider:
    """A provider that only lets the tool schemas be read; the real one is the runtime's."""

    def refund(self, **_: Any) -> dict[str, Any]:
        raise RuntimeError("schema-only provider: refunds go through the runtime's provider")

    def lookup(self, idempotency_key: str) -> dict[str, Any] | None:
        raise RuntimeError("schema-only provider: lookups go through the runtime's provider")

    def applied_since(self, since: Any) -> dict[str, dict[str, Any]]:
        raise RuntimeError("schema-only provider: listings go through the runtime's provider")


def tool_specs() -> list[dict[str, Any]]:
    """The OpenAI tool specs; they do not depend on the provider or the database."""
    return [tool.openai_tool() for tool in domain_tools(_SchemaOnlyProvider())]


def make_graph(url: str | None = None) -> Any:
    """The writegate agent over the demo opened on `url` on its first run, without a
    checkpointer, as a server wants it (`writegate.server_agent`)."""
    model = demo_chat_model(tool_specs())  # bound here so compiling opens nothing
    return server_agent(lambda: open_demo(url), model, system_prompt=DEMO_PROMPT)


@asynccontextmanager
async def postgres_checkpointer() -> AsyncIterator[AsyncPostgresSaver]:
    """Threads in writegate's database, for `langgraph dev` (opt in through langgraph.json).

    The server enters this once per event loop; its own POSTGRES_URI setting is the
    way to go in a LangGraph Server deployment instead.
    """
    # Blocking I/O (probing servers, migrating) stays off the server's event loop.
    url = await asyncio.to_thread(resolve_database_url)
    await asyncio.to_thread(setup_database, url)  # the saver's tables; idempotent
    async with AsyncConnectionPool(
        url,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        connection_class=AsyncConnection[Any],
        open=False,
    ) as pool:
        yield AsyncPostgresSaver(pool)


graph = make_graph()
