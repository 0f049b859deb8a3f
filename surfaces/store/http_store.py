"""The HTTP service's own rows: thread ownership, click records, locks.

Threads opened over HTTP belong to the user who opened it; another user's thread is
reported missing. A click's idempotency key is claimed before the decision runs and
holds the answer afterwards. Graph runs on one thread are serialized across processes
with a PostgreSQL advisory lock held on a session of its own, so a crashed process can
never leave a thread locked: its session ends and the lock with it. A run that writes
also holds the thread's lease row, taken in the same statement (docs/failover.md): a
lock session can die while its process runs on (a failover, a cut connection), and the
lease, which a failover does not lose, keeps the next run out until the first lets go
or its lease runs out (a process that died mid-run: `THREAD_LEASE_S`).

Those sessions come from a small bounded pool of their own (never the runtime's pool,
whose connections a lock holder's graph run needs), so a storm of clicks can never open
more server connections than the two pools allow: when every lock session is taken,
the request is told at once to retry (`unavailable`, 503) instead of queueing.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import Connection
from psycopg.errors import LockNotAvailable
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb
from psycopg_pool import PoolTimeout

from writegate.approval.errors import (
    InProgress,
    NotFound,
    Unavailable,
    WritegateError,
    database_unavailable,
)
from writegate.approval.models import Identity
from writegate.approval.views import Page, PageArgs, created_after, created_key
from writegate.checkpoints.database import DatabaseUnavailable
from writegate.checkpoints.ledger_sql import created_page
from writegate.checkpoints.outage import outage_mapped
from writegate.checkpoints.pool import Pool, open_pool
from writegate.surfaces.store import http_sql as sql
from writegate.surfaces.store.keys import KeyHolder

MAX_THREADS = 1_000  # one page of a user's threads, at most

LOCK_NAMESPACE = "wg_thread:"
LOCK_CONNECTIONS = 8  # lock sessions per process: requests running a graph at once
LOCK_CHECKOUT_S = 1.0  # how long a request waits for a free lock session
THREAD_LEASE_S = 60.0  # a run's hold on its thread when its lock session is gone
THREAD_LEASE_ENV = "WRITEGATE_THREAD_LEASE_SECONDS"
FREE_ATTEMPTS = 3  # sessions tried to free a lease whose lock session died
NO_THREAD = "no such thread for this user"

Statement = tuple[str, dict[str, Any]]  # a statement and its named parameters
Read = Callable[[Connection[DictRow]], Any]  # a read made on a given session
# Reads made on the session that commits a thread's release, in that transaction, and
# the statements to commit there with them (`ThreadLock.release`).
Finish = Callable[[Connection[DictRow]], tuple[Statement, ...]]


@dataclass(frozen=True)
class Click:
    """A click's stored record; `status_code` is None while its first answer is pending."""

    proposal_id: str
    request_digest: str
    status_code: int | None
    response: dict[str, Any] | None


class HttpStore:
    def __init__(
        self,
        pool: Pool,
        url: str,
        *,
        lock_connections: int = LOCK_CONNECTIONS,
        lock_checkout_s: float = LOCK_CHECKOUT_S,
        lease_s: float = THREAD_LEASE_S,
    ) -> None:
        self.pool = pool
        self.url = url
        self.lock_checkout_s = lock_checkout_s
        self.lease_s = lease_s
        self.lock_connections = lock_connections
        self._lock_pool: Pool | None = None
        self._guard = threading.Lock()

    @property
    def lock_pool(self) -> Pool:
        """The thread locks' own sessions, opened on first use (and again after close():
        an app whose lifespan ends and starts again, as a test client's does, goes on)."""
        return self.open_lock_pool()

    def open_lock_pool(self, connection_class: type[Connection[DictRow]] | None = None) -> Pool:
        """The lock pool, opened now if it is not (with `connection_class`: the bench's
        counting connections)."""
        with self._guard:
            if self._lock_pool is None:
                self._lock_pool = open_pool(
                    self.url,
                    min_size=1,
                    max_size=self.lock_connections,
                    connection_class=connection_class,
                )
            return self._lock_pool

    def close(self) -> None:
        with self._guard:
            pool, self._lock_pool = self._lock_pool, None
        if pool is not None:
            pool.close()

    def _all(self, query: str, params: Any) -> list[dict[str, Any]]:
        with self.pool.connection() as conn:
            return [dict(row) for row in conn.execute(query, params).fetchall()]

    # -- threads ----------------------------------------------------------------------

    def create_thread(self, key: KeyHolder) -> dict[str, Any]:
        """A new thread of the key's holder, the key checked in the same transaction."""
        thread_id = "th_" + secrets.token_urlsafe(12)
        with self.transaction() as conn:
            identity = key.identity(conn)
            params = (thread_id, identity.tenant_id, identity.user_id)
            row = conn.execute(sql.INSERT_THREAD_SQL, params).fetchone()
        assert row is not None
        return dict(row)

    def get_thread(self, identity: Identity, thread_id: str) -> dict[str, Any] | None:
        rows = self._all(sql.SELECT_THREAD_SQL, (thread_id, identity.tenant_id, identity.user_id))
        return rows[0] if rows else None

    def list_threads(self, identity: Identity, args: PageArgs) -> Page[dict[str, Any]]:
        """A page of the user's threads, `args.order` first by when each was opened."""
        args.refuse("thread_id", "proposal_id", "tool_name", "status")
        limit, key = args.checked("threads", MAX_THREADS)
        params: dict[str, Any] = {"tenant_id": identity.tenant_id, "user_id": identity.user_id}
        query = created_page(
            sql.LIST_THREADS_PAGE_SQL, {}, {}, sql.THREADS_AFTER, args.order, created_after(key),
            params,
        )  # fmt: skip
        rows = self._all(query, {**params, "limit": limit + 1})
        return args.page(rows, "threads", lambda r: created_key(r["created_at"], r["thread_id"]))

    # -- clicks -----------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Connection[DictRow]]:
        """A session of the runtime's pool, in one transaction (one commit); a database
        outage leaves it as `TemporarilyUnavailable`, as the ledger's do."""
        with outage_mapped(), self.pool.connection() as conn, conn.transaction():
            yield conn

    @staticmethod
    def claim_click(
        conn: Connection[DictRow],
        identity: Identity,
        key: str,
        proposal_id: str,
        request_digest: str,
    ) -> Click | None:
        """Claim a click's key on `conn` (in the caller's transaction): None when this
        request claimed it; else the record already there."""
        ids = (identity.tenant_id, identity.user_id, key)
        claimed = conn.execute(sql.CLAIM_CLICK_SQL, (*ids, proposal_id, request_digest)).fetchone()
        if claimed is not None:
            return None
        row = conn.execute(sql.SELECT_CLICK_SQL, ids).fetchone()
        assert row is not None  # click rows are never deleted
        return Click(row["proposal_id"], row["request_digest"], row["status_code"], row["response"])

    @staticmethod
    def finish_click_statement(
        identity: Identity, key: str, status_code: int, response: dict[str, Any]
    ) -> Statement:
        """The statement that stores a click's final answer (for the thread's release to
        commit: `ThreadLock.release`); only the first one is kept."""
        params = {
            "status_code": status_code,
            "response": Jsonb(response),
            "tenant_id": identity.tenant_id,
            "user_id": identity.user_id,
            "key": key,
        }
        return sql.FINISH_CLICK_SQL, params

    # -- per-thread serialization -----------------------------------------------------

    def lock_thread(
        self,
        thread_id: str,
        *,
        wait_s: float,
        shared: bool = False,
        owner: KeyHolder | None = None,
        read: Read | None = None,
    ) -> ThreadLock:
        """Take the thread's lock, waiting up to wait_s (0: don't wait); InProgress if the
        thread is busy, Unavailable if every lock session of this process is taken.
        Exclusive, it comes with the thread's lease: InProgress too while a run whose
        lock session died still holds it. `shared` (with a wait): held beside other
        shared holders, never beside the one exclusive holder; for a request that only
        reads the thread. `owner`: the caller's key, then the thread, are checked in the
        lock's own transaction, before any lock is taken:
        Unauthorized for a key no longer valid, NotFound unless the thread is this
        user's; the lock's `owner` is then the identity. `read`: made on the lock's
        session once the lock (and lease) is granted, in the transaction that took it,
        so as of the grant and with no commit of its own; its result is the lock's
        `read`."""
        try:
            pool = self.lock_pool
            conn = pool.getconn(timeout=self.lock_checkout_s)
        except DatabaseUnavailable as exc:  # the lock sessions' pool could not open
            raise database_unavailable() from exc
        except PoolTimeout as exc:
            raise Unavailable(
                "too many requests are running on this server; retry shortly",
                thread_id=thread_id,
            ) from exc
        lease = None if shared else Lease(thread_id, self.lease_s, self.pool)
        return ThreadLock(
            self.lock_pool,
            conn,
            thread_id,
            wait_s,
            shared=shared,
            lease=lease,
            owner=owner,
            read=read,
            spare=self.pool,
        )

    @contextmanager
    def thread_lock(self, thread_id: str, *, wait_s: float, shared: bool = False) -> Iterator[None]:
        lock = self.lock_thread(thread_id, wait_s=wait_s, shared=shared)
        try:
            yield
        finally:
            lock.release()


@dataclass
class Lease:
    """A thread's lease row as one run holds it: its generation, once taken. Renewed and
    freed on the runtime's pool when the lock's session is gone (it follows a failover)."""

    thread_id: str
    seconds: float
    pool: Pool
    generation: int | None = None
    renewed_at: float = 0.0  # time.monotonic() when taken or last renewed

    def params(self, key: str = "") -> dict[str, Any]:
        return {"thread": self.thread_id, "lease_s": self.seconds, "key": key,
                "generation": self.generation}  # fmt: skip

    def keep(self) -> None:
        """Between a run's steps: renew once half the lease has gone by (no statement
        before that); Unavailable when it was lost, so the run stops before its next
        step writes."""
        if self.generation is None or time.monotonic() - self.renewed_at < self.seconds / 2:
            return
        with self.pool.connection() as conn:
            renewed = conn.execute(sql.RENEW_LEASE_SQL, self.params()).fetchone()
        if renewed is None:
            raise Unavailable(
                "this request lost its hold on the thread; retry shortly", thread_id=self.thread_id
            )
        self.renewed_at = time.monotonic()

    def free(self) -> None:
        """Let the lease go from any session; if none answers, the lease runs out."""
        commit_anywhere(self.pool, [(sql.FREE_LEASE_SQL, self.params())])


def commit_anywhere(pool: Pool, statements: list[Statement] | Finish) -> bool:
    """Commit `statements` in one transaction on a session of `pool`, for when the
    lock's own session is gone (a `Finish`: made on that session, each time it is
    tried). After a failover the first pooled session may still be the old primary's
    (closed on its error), so a few are tried. False if none took them."""
    for _ in range(FREE_ATTEMPTS):
        try:
            with pool.connection() as conn, conn.transaction():
                for statement in statements(conn) if callable(statements) else statements:
                    conn.execute(*statement)
            return True
        except psycopg.Error:
            continue
        except (PoolTimeout, WritegateError):
            return False
    return False


class ThreadLock:
    """One thread's advisory lock, held on a session of the lock pool until `release()`.

    The session is this lock's alone while it is held: the lock pool serves nothing
    else, and the session goes back only once unlocked (or closed, which
    releases the lock too, when the unlock could not be confirmed). If the process dies,
    the session ends and releases it. An exclusive lock holds the thread's `Lease` too.
    """

    def __init__(
        self,
        pool: Pool,
        conn: Connection[DictRow],
        thread_id: str,
        wait_s: float,
        *,
        shared: bool = False,
        lease: Lease | None = None,
        owner: KeyHolder | None = None,
        read: Read | None = None,
        spare: Pool,
    ) -> None:
        self.key = LOCK_NAMESPACE + thread_id
        self._spare = spare  # the runtime's pool: `release`'s statements if its session died
        self.lease = lease
        assert shared == (lease is None), "an exclusive lock comes with the lease"
        if lease is not None:
            self._lock_sql, self._try_sql = sql.THREAD_LEASE_SQL, sql.THREAD_TRY_LEASE_SQL
            self._unlock_sql = sql.THREAD_UNLOCK_SQL  # locked, but the lease was not free
        else:
            self._lock_sql = sql.THREAD_LOCK_SHARED_SQL
            self._try_sql = sql.THREAD_TRY_LOCK_SHARED_SQL
            self._unlock_sql = sql.THREAD_UNLOCK_SHARED_SQL
        self._pool = pool
        self._conn: Connection[DictRow] | None = conn
        # Held unless the server said it was not granted: a statement that failed any
        # other way may have taken it, and release() must then unlock it.
        self._held = True
        self.read: Any = None  # what `read` gave, in the transaction that took the lock
        self.owner: Identity | None = None  # the owner's identity, as checked there
        try:
            self._acquire(conn, thread_id, wait_s, owner, read)
        except BaseException:
            self.release()
            raise

    def _params(self) -> Any:
        return self.lease.params(self.key) if self.lease is not None else (self.key,)

    def _acquire(
        self,
        conn: Connection[DictRow],
        thread_id: str,
        wait_s: float,
        owner: KeyHolder | None,
        read: Read | None,
    ) -> None:
        # One transaction: the owner's key and thread, the wait's lock_timeout (it ends
        # with the transaction), the session lock and the lease row, and the read once
        # they are granted, in one commit.
        try:
            with conn.transaction():
                if owner is not None:
                    try:
                        self.owner = owner.identity(conn)
                    except WritegateError:
                        self._held = False
                        raise
                    ids = (thread_id, self.owner.tenant_id, self.owner.user_id)
                    if conn.execute(sql.SELECT_THREAD_SQL, ids).fetchone() is None:
                        self._held = False
                        raise NotFound(NO_THREAD, thread_id=thread_id)
                if wait_s > 0:
                    conn.execute(sql.SET_LOCK_TIMEOUT_SQL, (f"{int(wait_s * 1000)}ms",))
                row = conn.execute(
                    self._lock_sql if wait_s > 0 else self._try_sql, self._params()
                ).fetchone()
                granted = wait_s > 0 or bool(row and row["ok"])
                leased = self.lease is None or (row is not None and row["generation"] is not None)
                if read is not None and granted and leased:
                    self.read = read(conn)
        except LockNotAvailable as exc:
            self._held = False
            raise InProgress(
                "another request is still running this thread", thread_id=thread_id
            ) from exc
        if not granted:
            self._held = False
            raise InProgress("another request is running this thread", thread_id=thread_id)
        if not leased:
            # Locked, but a run whose lock session died (a failover) still holds the
            # lease: it may be writing this thread right now.
            raise InProgress(
                "another request is still running this thread; retry shortly",
                thread_id=thread_id,
            )
        if self.lease is not None:
            assert row is not None
            self.lease.generation = int(row["generation"])
            self.lease.renewed_at = time.monotonic()

    def keep(self) -> None:
        """Between a run's steps (see `Lease.keep`); a shared lock has nothing to keep."""
        if self.lease is not None:
            self.lease.keep()

    def release(self, *also: Statement, finish: Finish | None = None) -> bool:
        """Let the thread go. `also`: statements committed with the release, in one
        transaction on the lock's session (a turn's last stream events), before the lock
        is let go; `finish`: reads made in that transaction, while the thread is still
        held, and the statements they give to commit with it (a click's answer, read
        and stored). If that session is gone, they are made and committed on another
        session, the thread still held by its lease (`commit_anywhere`), which is then
        freed. False when they could not be committed."""
        conn, self._conn = self._conn, None
        if conn is None:
            return not also and finish is None

        def statements(session: Connection[DictRow]) -> tuple[Statement, ...]:
            return (*also, *(finish(session) if finish is not None else ()))

        work = bool(also) or finish is not None
        # Unlock first so a waiter gets the lock at once; only what was taken is undone
        # (unlocking a lock not held draws a server WARNING). A session whose unlock
        # fails is closed instead (which releases the lock); the pool replaces it,
        # and the lease is freed on the runtime's pool.
        leased = self.lease is not None and self.lease.generation is not None
        let_go = False
        try:
            try:
                with conn.transaction() if work else nullcontext():
                    for statement in statements(conn):
                        conn.execute(*statement)
                    if self._held and leased:
                        assert self.lease is not None
                        conn.execute(sql.THREAD_UNLEASE_SQL, self.lease.params(self.key))
                    elif self._held:
                        conn.execute(self._unlock_sql, (self.key,))
                let_go = True
                return True
            except psycopg.Error:
                conn.close()
                return not work or commit_anywhere(self._spare, statements)
        except BaseException:  # `finish` failed: nothing is committed, the thread goes
            conn.close()
            raise
        finally:
            if leased and not let_go:
                assert self.lease is not None
                self.lease.free()
            self._pool.putconn(conn)
