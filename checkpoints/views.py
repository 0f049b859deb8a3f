"""Read-only lists of the ledger for people to look at: a user's pending and recent
approvals, a thread's proposals with their executions, the threads with what waits on
each. The surfaces show them; none of them writes a row.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from writegate.approval.models import Identity
from writegate.approval.views import Page, PageArgs, created_after, created_key
from writegate.checkpoints import views_sql
from writegate.checkpoints.ledger_sql import created_page
from writegate.checkpoints.namespace import sql_for
from writegate.checkpoints.pool import Pool

MAX_PROPOSALS = 1_000  # one page of a requester's proposals, at most
MAX_THREADS = 1_000  # one page of `writegate threads`, at most


def _proposal_key(row: dict[str, Any]) -> list[Any]:
    return created_key(row["created_at"], row["proposal_id"])


class LedgerViews:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.sql = sql_for(views_sql.ViewsSQL, pool.schema)

    def _all(self, query: str, params: Any) -> list[dict[str, Any]]:
        with self.pool.connection() as conn:
            return [dict(row) for row in conn.execute(query, params).fetchall()]

    def now(self) -> datetime:
        """The database's clock: expiry is judged by it, never by this process."""
        now: datetime = self._all(self.sql.NOW_SQL, None)[0]["now"]
        return now

    def my_proposals(
        self, identity: Identity, args: PageArgs, *, pending: bool = False
    ) -> Page[dict[str, Any]]:
        """A page of the requester's own proposals, `args.order` first by when each was
        proposed, filtered by `args` (its `tool_name` is the operation); `pending`: only
        those open and not past expiry."""
        limit, key = args.checked("my_proposals", MAX_PROPOSALS)
        given = {
            "pending": True if pending else None, "status": args.status,
            "thread_id": args.thread_id, "proposal_id": args.proposal_id,
            "operation": args.tool_name,
        }  # fmt: skip
        given = {name: value for name, value in given.items() if value is not None}
        params: dict[str, Any] = {"tenant_id": identity.tenant_id, "subject": identity.user_id}
        params.update(given)
        query = created_page(
            self.sql.MINE_PAGE_SQL, views_sql.MINE_FILTERS, given, views_sql.MINE_AFTER,
            args.order, created_after(key), params,
        )  # fmt: skip
        rows = self._all(query, {**params, "limit": limit + 1})
        return args.page(rows, "my_proposals", _proposal_key)

    def thread_proposals(self, identity: Identity, thread_id: str) -> list[dict[str, Any]]:
        """The thread's proposals, oldest first, each with its `execution_id` (or None)."""
        params = (thread_id, identity.tenant_id, identity.user_id)
        return self._all(self.sql.LIST_THREAD_PROPOSALS_SQL, params)

    def execution_ids(self, proposal_ids: list[str]) -> dict[str, str]:
        if not proposal_ids:
            return {}
        rows = self._all(self.sql.SELECT_EXECUTIONS_FOR_SQL, (proposal_ids,))
        return {row["proposal_id"]: row["execution_id"] for row in rows}

    def threads_page(
        self, args: PageArgs, *, user_id: str | None, tenant_id: str | None
    ) -> tuple[Page[dict[str, Any]], list[dict[str, Any]]]:
        """A page of threads, `args.order` first by when each began (its first
        checkpoint, or first proposal for a thread known only to the ledger by a pending
        one), both filtered by user and tenant; and the pending proposals of those
        threads."""
        limit, key = args.checked("checkpoint_threads", MAX_THREADS)
        params: dict[str, Any] = {"user_id": user_id, "tenant_id": tenant_id}
        query = created_page(
            self.sql.THREADS_PAGE_SQL, {}, {}, views_sql.THREADS_AFTER, args.order,
            created_after(key), params,
        )  # fmt: skip
        page = args.page(
            self._all(query, {**params, "limit": limit + 1}),
            "checkpoint_threads",
            lambda row: created_key(row["first_at"], row["thread_id"]),
        )
        ids = [row["thread_id"] for row in page]
        pending = self._all(self.sql.PENDING_PROPOSALS_SQL, {**params, "thread_ids": ids})
        return page, pending

    def pending_page(
        self, order: str, after: tuple[datetime, str] | None, limit: int, *,
        older_than: timedelta, tenant_id: str | None,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Up to `limit` pending proposals older than `older_than`, `order` first by when
        each was proposed, after the `(created_at, proposal_id)` `after`."""
        params: dict[str, Any] = {"older_than": older_than, "tenant_id": tenant_id}
        query = created_page(
            self.sql.PENDING_PAGE_SQL, {}, {}, views_sql.PENDING_AFTER, order, after, params
        )
        return self._all(query, {**params, "limit": limit})
