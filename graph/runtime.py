"""Wiring: one database, one pool, the ledger, the registry, the provider, the services.

Everything that runs writegate (the graph, the CLI, the HTTP and MCP servers, the
reconciler) builds one `Runtime` and shares its pool; LangGraph's Postgres
checkpointer uses the same pool, so ledgers and checkpoints live in one database.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from langgraph.checkpoint.postgres import PostgresSaver

from writegate.approval.execution import Executor, RetryPolicy
from writegate.approval.service import ApprovalService, Policy
from writegate.checkpoints.database import resolve_database_url
from writegate.checkpoints.ledger import PgLedgerStore
from writegate.checkpoints.migrate import setup_database
from writegate.checkpoints.ops import PgTombstones
from writegate.checkpoints.pool import Pool, open_pool
from writegate.tools.provider import ProviderClient, SimulatedProvider
from writegate.tools.provider_http import HttpProvider
from writegate.tools.registry import Registry, default_registry


def default_provider(pool: Pool) -> ProviderClient:
    """The provider process at WRITEGATE_PROVIDER_URL, else the in-process simulator."""
    url = os.environ.get("WRITEGATE_PROVIDER_URL", "").strip()
    return HttpProvider(url) if url else SimulatedProvider(pool=pool)


@dataclass
class Runtime:
    url: str
    pool: Pool
    store: PgLedgerStore
    registry: Registry
    provider: ProviderClient
    service: ApprovalService
    executor: Executor
    _saver: PostgresSaver | None = field(default=None, repr=False)

    @classmethod
    def open(
        cls,
        url: str | None = None,
        *,
        setup: bool = True,
        policy: Policy | None = None,
        provider: ProviderClient | None = None,
        retry: RetryPolicy | None = None,
        step_hook: Callable[[str], None] | None = None,
        clock: Callable[[], datetime] | None = None,
        max_connections: int = 10,
    ) -> Runtime:
        url = url or resolve_database_url()
        if setup:
            setup_database(url)  # idempotent and safe from many processes at once
        pool = open_pool(url, max_size=max_connections)
        store = PgLedgerStore(pool, clock=clock)
        provider = provider or default_provider(pool)
        registry = default_registry(provider)
        service = ApprovalService(store, registry, policy)
        executor = Executor(service, retry=retry, step_hook=step_hook, tombstones=PgTombstones())
        return cls(url, pool, store, registry, provider, service, executor)

    @property
    def checkpointer(self) -> PostgresSaver:
        """LangGraph's Postgres saver on the same pool (tables made by `db setup`)."""
        if self._saver is None:
            self._saver = PostgresSaver(self.pool)
        return self._saver

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
