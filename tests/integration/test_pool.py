"""The pool's checkout check: a connection cut while it sat idle is replaced, not served.

Connections given back a moment ago skip the check (one round trip per checkout saved);
these tests set the idle window to zero or to an hour so no timing is involved.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from writegate.approval.errors import TemporarilyUnavailable, is_database_outage
from writegate.approval.models import AuditRecord
from writegate.checkpoints.ledger import PgLedgerStore
from writegate.checkpoints.pool import Pool, open_pool
from writegate.checkpoints.schema import setup_database

BACKEND_PID_SQL = "SELECT pg_backend_pid() AS pid"


def _cut_the_served_connection(pool: Pool, server_url: str) -> int:
    """Check a connection out and back, then end its backend; its pid."""
    with pool.connection() as conn:
        row = conn.execute(BACKEND_PID_SQL).fetchone()
    assert row is not None
    _cut(server_url, row["pid"])
    return int(row["pid"])


def _cut(server_url: str, pid: int) -> None:
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        # pg_terminate_backend only signals: wait until the backend is gone.
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            admin.execute("SELECT pg_sleep(0.01)")


def test_a_connection_cut_while_idle_is_replaced_on_checkout(
    create_database: Callable[[], str], test_server_url: str
) -> None:
    pool = open_pool(create_database(), min_size=1, max_size=1, check_after_idle_s=0.0)
    try:
        pid = _cut_the_served_connection(pool, test_server_url)
        with pool.connection() as conn:
            again = conn.execute(BACKEND_PID_SQL).fetchone()
        assert again is not None and again["pid"] != pid
    finally:
        pool.close()


def test_a_connection_cut_within_the_window_fails_once_then_the_pool_recovers(
    create_database: Callable[[], str], test_server_url: str
) -> None:
    """Inside the window the cut is not seen at checkout (no check ran): the first
    statement fails, the pool discards the broken connection, the next checkout works."""
    pool = open_pool(create_database(), min_size=1, max_size=1, check_after_idle_s=3600.0)
    try:
        pid = _cut_the_served_connection(pool, test_server_url)
        with pytest.raises(psycopg.OperationalError), pool.connection() as conn:
            conn.execute("SELECT 1")
        with pool.connection() as conn:
            again = conn.execute(BACKEND_PID_SQL).fetchone()
        assert again is not None and again["pid"] != pid
    finally:
        pool.close()


def test_a_connection_is_back_in_the_pool_when_its_block_ends(
    create_database: Callable[[], str],
) -> None:
    """Given back in the caller's thread: a pool `reset` hook would hand every return to
    a worker thread, a thread switch per checkout, and the connection would be missing
    from the pool for a moment after each use."""
    pool = open_pool(create_database(), min_size=2, max_size=2)
    try:
        for _ in range(20):
            with pool.connection() as conn:
                conn.execute("SELECT 1")
            stats = pool.get_stats()
            assert stats["pool_available"] == stats["pool_size"] == 2, stats
    finally:
        pool.close()


# -- a node that became a standby -----------------------------------------------------

READ_ONLY_SQL = "SET default_transaction_read_only = on"


def _audit_row(n: int) -> AuditRecord:
    return AuditRecord(
        tenant_id="t_standby",
        user_id="u",
        thread_id=None,
        tool_name="probe",
        event="read",
        arguments=None,
        arguments_hash=None,
        status="ok",
        result={"n": n},
    )


def _write(store: PgLedgerStore, n: int) -> int:
    """One ledger write; the backend that made it."""
    with store.transaction() as tx:
        tx.insert_audit(_audit_row(n))
        row = tx.conn.execute(BACKEND_PID_SQL).fetchone()
    assert row is not None
    return int(row["pid"])


def test_a_write_on_a_node_turned_read_only_is_an_outage(create_database: Callable[[], str]):
    """A node demoted to a standby under kept connections refuses every write with
    SQLSTATE 25006 (read_only_sql_transaction). The database is away for writes, as in a
    cut: `temporarily_unavailable`, retryable, never a driver error. Connections that set
    `default_transaction_read_only` (psycopg's `options`) stand in for such a node."""
    url = create_database()
    setup_database(url)
    read_only = "options=-c%20default_transaction_read_only%3Don"
    pool = open_pool(f"{url}{'&' if '?' in url else '?'}{read_only}", max_size=2)
    try:
        with pytest.raises(TemporarilyUnavailable) as refused:
            _write(PgLedgerStore(pool), 1)
        assert refused.value.retryable and is_database_outage(refused.value)
    finally:
        pool.close()


def test_connections_on_a_node_turned_read_only_are_discarded_not_served_again(
    create_database: Callable[[], str],
) -> None:
    """The write that meets a read-only node is told to retry; the connections on that
    node (the one that failed and its idle siblings) leave the pool, so the retry runs
    on a new connection, where target_session_attrs=read-write finds the primary."""
    url = create_database()
    setup_database(url)
    pool = open_pool(url, min_size=2, max_size=2, check_after_idle_s=3600.0)
    store = PgLedgerStore(pool)
    try:
        with pool.connection() as one, pool.connection() as two:
            demoted = set()
            for conn in (one, two):
                conn.execute(READ_ONLY_SQL)
                row = conn.execute(BACKEND_PID_SQL).fetchone()
                assert row is not None
                demoted.add(row["pid"])
        with pytest.raises(TemporarilyUnavailable):
            _write(store, 1)
        assert _write(store, 2) not in demoted
    finally:
        pool.close()
