"""The HTTP service's own rows: thread ownership, click records, approval lists, locks.

Threads opened over HTTP belong to the user who opened it; another user's thread is
reported missing. A click's idempotency key is claimed before the decision runs and
holds the answer afterwards. Graph runs on one thread are serialized across processes
with a PostgreSQL advisory lock held on a dedicated session, so a crashed process can
never leave a thread locked: its session ends and the lock with it.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.errors import LockNotAvailable
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from writegate.approval.errors import InProgress
from writegate.approval.models import Identity
from writegate.checkpoints import http_sql as sql
from writegate.checkpoints.pool import Pool

LOCK_NAMESPACE = "wg_thread:"


@dataclass(frozen=True)
class Click:
    """A click's stored record; `status_code` is None while its first answer is pending."""

    proposal_id: str
    request_digest: str
    status_code: int | None
    response: dict[str, Any] | None


class HttpStore:
    def __init__(self, pool: Pool, url: str) -> None:
        self.pool = pool
        self.url = url

    def _all(self, query: str, params: Any) -> list[dict[str, Any]]:
        with self.pool.connection() as conn:
            return [dict(row) for row in conn.execute(query, params).fetchall()]

    def now(self) -> datetime:
        """The database's clock: expiry is judged by it, never by this process."""
        return self._all(sql.NOW_SQL, None)[0]["now"]

    # -- threads ----------------------------------------------------------------------

    def create_thread(self, identity: Identity) -> dict[str, Any]:
        thread_id = "th_" + secrets.token_urlsafe(12)
        params = (thread_id, identity.tenant_id, identity.user_id)
        return self._all(sql.INSERT_THREAD_SQL, params)[0]

    def get_thread(self, identity: Identity, thread_id: str) -> dict[str, Any] | None:
        rows = self._all(sql.SELECT_THREAD_SQL, (thread_id, identity.tenant_id, identity.user_id))
        return rows[0] if rows else None

    def list_threads(self, identity: Identity, limit: int) -> list[dict[str, Any]]:
        return self._all(sql.LIST_THREADS_SQL, (identity.tenant_id, identity.user_id, limit))

    # -- approvals (read-only views of the ledger) ------------------------------------

    def pending_proposals(self, identity: Identity, limit: int) -> list[dict[str, Any]]:
        return self._all(sql.LIST_PENDING_SQL, (identity.tenant_id, identity.user_id, limit))

    def recent_proposals(self, identity: Identity, limit: int) -> list[dict[str, Any]]:
        return self._all(sql.LIST_RECENT_SQL, (identity.tenant_id, identity.user_id, limit))

    def thread_proposals(self, identity: Identity, thread_id: str) -> list[dict[str, Any]]:
        params = (thread_id, identity.tenant_id, identity.user_id)
        return self._all(sql.LIST_THREAD_PROPOSALS_SQL, params)

    def execution_ids(self, proposal_ids: list[str]) -> dict[str, str]:
        if not proposal_ids:
            return {}
        rows = self._all(sql.SELECT_EXECUTIONS_FOR_SQL, (proposal_ids,))
        return {row["proposal_id"]: row["execution_id"] for row in rows}

    # -- clicks -----------------------------------------------------------------------

    def claim_click(
        self, identity: Identity, key: str, proposal_id: str, request_digest: str
    ) -> Click | None:
        """None when this request claimed the key; else the record already there."""
        ids = (identity.tenant_id, identity.user_id, key)
        with self.pool.connection() as conn:
            claimed = conn.execute(
                sql.CLAIM_CLICK_SQL, (*ids, proposal_id, request_digest)
            ).fetchone()
            if claimed is not None:
                return None
            row = conn.execute(sql.SELECT_CLICK_SQL, ids).fetchone()
        assert row is not None  # click rows are never deleted
        return Click(row["proposal_id"], row["request_digest"], row["status_code"], row["response"])

    def finish_click(
        self, identity: Identity, key: str, status_code: int, response: dict[str, Any]
    ) -> None:
        ids = (identity.tenant_id, identity.user_id, key)
        with self.pool.connection() as conn:
            conn.execute(sql.FINISH_CLICK_SQL, (status_code, Jsonb(response), *ids))

    # -- per-thread serialization -----------------------------------------------------

    def lock_thread(self, thread_id: str, *, wait_s: float) -> ThreadLock:
        """Take the thread's lock, waiting up to wait_s (0: don't wait); InProgress if busy."""
        return ThreadLock(self.url, thread_id, wait_s)

    @contextmanager
    def thread_lock(self, thread_id: str, *, wait_s: float) -> Iterator[None]:
        lock = self.lock_thread(thread_id, wait_s=wait_s)
        try:
            yield
        finally:
            lock.release()


class ThreadLock:
    """One thread's advisory lock, held on a dedicated session until `release()`.

    A dedicated session rather than a pooled one: the lock lives exactly as long as
    this object says, a pool can neither hand it to another request nor run dry of
    it, and if the process dies the session ends and releases it.
    """

    def __init__(self, url: str, thread_id: str, wait_s: float) -> None:
        self.key = LOCK_NAMESPACE + thread_id
        self._conn = psycopg.connect(url, autocommit=True, row_factory=dict_row)
        try:
            self._acquire(thread_id, wait_s)
        except BaseException:
            self._conn.close()
            raise

    def _acquire(self, thread_id: str, wait_s: float) -> None:
        if wait_s <= 0:
            row = self._conn.execute(sql.THREAD_TRY_LOCK_SQL, (self.key,)).fetchone()
            if not (row and row["ok"]):
                raise InProgress("another request is running this thread", thread_id=thread_id)
            return
        self._conn.execute(sql.SET_LOCK_TIMEOUT_SQL, (f"{int(wait_s * 1000)}ms",))
        try:
            self._conn.execute(sql.THREAD_LOCK_SQL, (self.key,))
        except LockNotAvailable as exc:
            raise InProgress(
                "another request is still running this thread", thread_id=thread_id
            ) from exc

    def release(self) -> None:
        if self._conn.closed:
            return
        # Unlock first so a waiter gets the lock at once; closing the session would
        # release it too, so a failed unlock on a broken session changes nothing.
        with suppress(psycopg.Error):
            self._conn.execute(sql.THREAD_UNLOCK_SQL, (self.key,))
        self._conn.close()
