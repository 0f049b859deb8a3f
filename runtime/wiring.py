"""Wiring: one database, one pool, the ledger, the tools, the services.

Everything that runs writegate (`Writegate`, the graph, the CLI, the HTTP and MCP
servers, the reconciler) builds one `Runtime` over the tools it protects and shares its
pool; LangGraph's Postgres checkpointer uses the same pool, so ledgers and checkpoints
live in one database. Nothing here knows the demo: `demo/runtime.py` opens a runtime over
the demo's tools.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Self

from writegate.approval.execution import Executor, RetryPolicy
from writegate.approval.policy import load_policy
from writegate.approval.retype import check_tools
from writegate.approval.service import ApprovalService, Policy
from writegate.approval.store import PresentedQuestions
from writegate.checkpoints.database import resolve_database_url
from writegate.checkpoints.ledger import PgLedgerStore
from writegate.checkpoints.namespace import DEFAULT_SCHEMA
from writegate.checkpoints.pool import Pool, open_pool
from writegate.checkpoints.presented import PgPresentedQuestions
from writegate.checkpoints.saver import Saver
from writegate.checkpoints.schema import setup_database
from writegate.checkpoints.views import LedgerViews
from writegate.tools.registry import Registry


@dataclass(frozen=True)
class ServerUserFields:
    """Which fields of LangGraph Server's authenticated user say who acts.

    Each names a field of the user your auth handler returns (a key of its dict, or an
    attribute). `roles` or `trust` set to None: the server user gives none (no roles;
    the policy's default trust), and the client may not give any either.
    """

    user: str = "identity"
    tenant: str = "tenant_id"
    roles: str | None = "roles"
    trust: str | None = "trust"


@dataclass
class Runtime:
    url: str
    pool: Pool
    store: PgLedgerStore
    registry: Registry
    service: ApprovalService
    executor: Executor
    presented: PresentedQuestions
    views: LedgerViews
    # Where the identity is read in LangGraph Server's authenticated user.
    server_user: ServerUserFields = field(default_factory=ServerUserFields)
    # The application's own system prompt for writegate's agent over these tools (the
    # served HTTP agent uses it); None: the library's.
    system_prompt: str | None = None
    # The application's own chat model for that agent, like its prompt, made for the
    # tools' specs when the agent is built; None: `graph.model.env_chat_model`'s.
    chat_model: Callable[[list[dict[str, Any]]], Any] | None = None
    _saver: Saver | None = field(default=None, repr=False)

    @classmethod
    def open(
        cls,
        url: str | None = None,
        *,
        tools: Registry,
        setup: bool = True,
        schema: str = DEFAULT_SCHEMA,
        policy: Policy | None = None,
        retry: RetryPolicy | None = None,
        step_hook: Callable[[str], None] | None = None,
        clock: Callable[[], datetime] | None = None,
        max_connections: int = 10,
        pool: Pool | None = None,
        server_user: ServerUserFields | None = None,
    ) -> Runtime:
        """Open the database (set up writegate's own tables there unless `setup=False`)
        and wire the services over `tools`. `pool`: one already open on `url`. A policy
        that cannot ask what its tiers promise for one of the tools (every call would
        need a re-typed field and none is named) stops it here, before the database."""
        policy = policy or load_policy()
        check_tools(policy.risk, tools.specs(), policy.version)
        url = url or resolve_database_url()
        if setup:
            setup_database(url, schema=schema)  # idempotent and safe from many processes
        pool = pool or open_pool(url, max_size=max_connections, schema=schema)
        store = PgLedgerStore(pool, clock=clock)
        service = ApprovalService(store, tools, policy)
        executor = Executor(service, retry=retry, step_hook=step_hook)
        presented = PgPresentedQuestions(pool)
        views = LedgerViews(pool)
        server_user = server_user or ServerUserFields()
        return cls(url, pool, store, tools, service, executor, presented, views, server_user)

    @property
    def checkpointer(self) -> Saver:
        """LangGraph's Postgres saver on the same pool (its tables made by the setup); a
        database outage leaves it as `TemporarilyUnavailable`."""
        if self._saver is None:
            self._saver = Saver(self.pool)
        return self._saver

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
