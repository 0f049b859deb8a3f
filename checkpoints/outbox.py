"""The webhook outbox on PostgreSQL: `approval.store.OutboxStore`, and its endpoints.

Every call is one statement on its own (the pool's connections are autocommit): a
claim commits before anything is sent, so no transaction stays open across a request
to an endpoint. Endpoints belong to one tenant; `tenant_id`, where a call takes it,
confines it to that tenant's rows (None: every tenant, for an operator).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from writegate.approval.events import Due
from writegate.approval.views import Page, PageArgs, created_after, created_key, serial_after
from writegate.checkpoints import outbox_sql
from writegate.checkpoints.ledger_sql import created_page, keyset
from writegate.checkpoints.namespace import sql_for
from writegate.checkpoints.pool import Pool

MAX_FAILING = 1_000  # one page of failing deliveries, or of endpoints, at most


@dataclass(frozen=True)
class Endpoint:
    """Where a tenant's events go (the secret is shown once, when it is added)."""

    endpoint_id: str
    tenant_id: str
    url: str
    event_types: list[str] | None
    expiring_within: timedelta
    created_at: datetime


class PgOutbox:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.sql = sql_for(outbox_sql.OutboxSQL, pool.schema)

    def _all(self, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        with self.pool.connection() as conn:
            return [dict(row) for row in conn.execute(query, params).fetchall()]

    # -- endpoints --------------------------------------------------------------------

    def add_endpoint(
        self,
        *,
        endpoint_id: str,
        tenant_id: str,
        url: str,
        secret: str,
        event_types: Sequence[str] | None = None,
        expiring_within: timedelta = timedelta(minutes=5),
    ) -> Endpoint:
        params = {
            "endpoint_id": endpoint_id,
            "tenant_id": tenant_id,
            "url": url,
            "secret": secret,
            "event_types": list(event_types) if event_types else None,
            "expiring_within": expiring_within.total_seconds(),
        }
        (row,) = self._all(self.sql.ADD_ENDPOINT_SQL, params)
        return Endpoint(**row)

    def endpoints(
        self, tenant_id: str | None = None, args: PageArgs | None = None
    ) -> Page[Endpoint]:
        """A page of endpoints not removed, by when each was added, oldest first by default."""
        args = args or PageArgs(limit=MAX_FAILING)
        args.refuse("thread_id", "proposal_id", "tool_name", "status")
        limit, key = args.checked("endpoints", MAX_FAILING)
        given = {"tenant_id": tenant_id} if tenant_id is not None else {}
        params: dict[str, Any] = {**given, "limit": limit + 1}
        query = created_page(
            self.sql.LIST_ENDPOINTS_SQL, outbox_sql.ENDPOINT_FILTERS, given,
            outbox_sql.ENDPOINTS_AFTER, args.order, created_after(key), params,
        )  # fmt: skip
        rows = [Endpoint(**row) for row in self._all(query, params)]
        return args.page(rows, "endpoints", lambda e: created_key(e.created_at, e.endpoint_id))

    def remove_endpoint(self, endpoint_id: str, tenant_id: str | None = None) -> bool:
        params = {"endpoint_id": endpoint_id, "tenant_id": tenant_id}
        return bool(self._all(self.sql.REMOVE_ENDPOINT_SQL, params))

    # -- deliveries (OutboxStore) -----------------------------------------------------

    def write_expiring(self) -> int:
        with self.pool.connection() as conn:
            return conn.execute(self.sql.WRITE_EXPIRING_SQL).rowcount

    def claim_due(self, owner: str, *, lease_seconds: float, limit: int) -> list[Due]:
        params = {"owner": owner, "lease_seconds": lease_seconds, "limit": limit}
        return [Due(**row) for row in self._all(self.sql.CLAIM_DUE_SQL, params)]

    def mark_delivered(self, delivery_id: int) -> None:
        with self.pool.connection() as conn:
            conn.execute(self.sql.MARK_DELIVERED_SQL, {"delivery_id": delivery_id})

    def mark_failed(self, delivery_id: int, owner: str, error: str, retry_in: float) -> None:
        params = {"delivery_id": delivery_id, "owner": owner, "error": error,
                  "retry_in": retry_in}  # fmt: skip
        with self.pool.connection() as conn:
            conn.execute(self.sql.MARK_FAILED_SQL, params)

    # -- for operators ----------------------------------------------------------------

    def failing(
        self, *, min_attempts: int = 3, tenant_id: str | None = None, args: PageArgs | None = None
    ) -> Page[dict[str, Any]]:
        """A page of deliveries not yet accepted after `min_attempts` attempts, by
        `delivery_id`, oldest first by default."""
        args = args or PageArgs()
        args.refuse("thread_id", "proposal_id", "tool_name", "status")
        limit, key = args.checked("failing_deliveries", MAX_FAILING)
        given = {"tenant_id": tenant_id} if tenant_id is not None else {}
        later, direction = outbox_sql.FAILING_AFTER[args.order]
        later = later if key is not None else ""
        query = keyset(self.sql.FAILING_SQL, outbox_sql.FAILING_FILTERS, given, later, direction)
        params = {**given, "min_attempts": min_attempts, "after": serial_after(key)}
        rows = self._all(query, {**params, "limit": limit + 1})
        return args.page(rows, "failing_deliveries", lambda r: [r["delivery_id"]])

    def replay(self, delivery_id: int, tenant_id: str | None = None) -> dict[str, Any] | None:
        """Make one delivery due now (again, if it was delivered), under its event id."""
        params = {"delivery_id": delivery_id, "tenant_id": tenant_id}
        rows = self._all(self.sql.REPLAY_SQL, params)
        return rows[0] if rows else None

    def deliveries(self, tenant_id: str | None = None) -> list[dict[str, Any]]:
        return self._all(self.sql.DELIVERIES_SQL, {"tenant_id": tenant_id})
