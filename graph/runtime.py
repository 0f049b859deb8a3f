"""Wiring: one database, one pool, the ledger, the registry, the provider, the services.

Everything that runs writegate (the graph, the CLI, the HTTP and MCP servers, the
reconciler) builds one `Runtime` and shares its pool; LangGraph's Postgres
checkpointer uses the same pool, so ledgers and checkpoints live in one database.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from writegate.approval.execution import Executor, RetryPolicy
from writegate.approval.service import ApprovalService, Policy
from writegate.approval.store import PresentedQuestions
from writegate.checkpoints.database import resolve_database_url
from writegate.checkpoints.ledger import PgLedgerStore
from writegate.checkpoints.migrate import setup_database
from writegate.checkpoints.ops import PgTombstones
from writegate.checkpoints.pool import Pool, open_pool
from writegate.checkpoints.presented import PgPresentedQuestions
from writegate.checkpoints.saver import Saver
from writegate.graph.identity import ServerUserFields
from writegate.tools.domain import default_registry
from writegate.tools.provider import ProviderClient, SimulatedProvider
from writegate.tools.provider_http import HttpProvider
from writegate.tools.registry import Registry
from writegate.tools.step_kill import kill_hook_from_env

LEASE_ENV = "WRITEGATE_EXECUTION_LEASE_SECONDS"
CALL_TIMEOUT_ENV = "WRITEGATE_CALL_TIMEOUT_SECONDS"


def retry_from_env() -> RetryPolicy | None:
    """The default retry policy with the execution lease (LEASE_ENV) and the deadline
    per call (CALL_TIMEOUT_ENV) from the environment, where set; None if neither is."""
    lease = os.environ.get(LEASE_ENV, "").strip()
    deadline = os.environ.get(CALL_TIMEOUT_ENV, "").strip()
    settings: dict[str, Any] = {}
    if lease:
        settings["lease"] = timedelta(seconds=float(lease))
    if deadline:
        settings["call_timeout"] = float(deadline)
    return RetryPolicy(**settings) if settings else None


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
    presented: PresentedQuestions
    # Where the identity is read in LangGraph Server's authenticated user.
    server_user: ServerUserFields = field(default_factory=ServerUserFields)
    _saver: Saver | None = field(default=None, repr=False)

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
        registry: Registry | None = None,
        server_user: ServerUserFields | None = None,
    ) -> Runtime:
        """Open the database (set it up unless `setup=False`) and wire the services over
        `registry`: the demo domain's tools unless given."""
        url = url or resolve_database_url()
        if setup:
            setup_database(url)  # idempotent and safe from many processes at once
        pool = open_pool(url, max_size=max_connections)
        store = PgLedgerStore(pool, clock=clock)
        provider = provider or default_provider(pool)
        registry = registry if registry is not None else default_registry(provider)
        service = ApprovalService(store, registry, policy)
        step_hook = step_hook or kill_hook_from_env()  # fault testing only
        retry = retry or retry_from_env()
        executor = Executor(service, retry=retry, step_hook=step_hook, tombstones=PgTombstones())
        presented = PgPresentedQuestions(pool)
        server_user = server_user or ServerUserFields()
        return cls(url, pool, store, registry, provider, service, executor, presented, server_user)

    @property
    def checkpointer(self) -> Saver:
        """LangGraph's Postgres saver on the same pool (tables made by `db setup`); a
        database outage leaves it as `TemporarilyUnavailable`."""
        if self._saver is None:
            self._saver = Saver(self.pool)
        return self._saver

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
