"""The graph LangGraph Studio and LangGraph Server serve (see `langgraph.json`, id `writegate`).

The server imports this file by path and reads the module-level `graph`. It is compiled
without a checkpointer because the server supplies its own (in memory under
`langgraph dev`, Postgres via POSTGRES_URI in a deployment). writegate's ledgers, the
domain tables and the simulated provider always live in the database DATABASE_URL names
(or the default resolution of `checkpoints.database`).

Importing needs no database: the runtime opens on the first run that uses it, so the
server starts, lists the graph and serves its schemas even while PostgreSQL is still
coming up. Identity comes from the server's authenticated user when the server has an
auth handler (`langgraph.auth.json`), else from each run's `user_id` / `tenant_id` in
its configurable or context (see `graph/identity.py`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from writegate import resolve_database_url, setup_database
from writegate.demo.domain import default_registry
from writegate.demo.prompt import DEMO_PROMPT
from writegate.demo.runtime import open_demo
from writegate.graph.build import build_graph
from writegate.graph.model import build_chat_model
from writegate.runtime.wiring import Runtime


class LazyRuntime:
    """Stands in for a `Runtime` and opens the real one on first attribute access."""

    def __init__(self, url: str | None = None) -> None:
        self._url = url
        self._runtime: Runtime | None = None
        # Server runs execute sync nodes on worker threads: open exactly once.
        self._lock = threading.Lock()

    def get(self) -> Runtime:
        if self._runtime is None:
            with self._lock:
                if self._runtime is None:
                    self._runtime = open_demo(self._url)
        return self._runtime

    def close(self) -> None:
        with self._lock:
            if self._runtime is not None:
                self._runtime.close()
                self._runtime = None

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not found on this object: the runtime's fields.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.get(), name)


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
    return default_registry(_SchemaOnlyProvider()).openai_tools()


def make_graph(runtime: Runtime | LazyRuntime) -> Any:
    """The writegate graph on `runtime`, without a checkpointer, as a server wants it."""
    model = build_chat_model(tool_specs())  # bound here so compiling opens nothing
    return build_graph(
        cast(Runtime, runtime), model=model, checkpointer=None, system_prompt=DEMO_PROMPT
    )


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


runtime = LazyRuntime()
graph = make_graph(runtime)
