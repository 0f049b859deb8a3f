"""The pool's checkout check: a connection cut while it sat idle is replaced, not served.

Connections given back a moment ago skip the check (one round trip per checkout saved);
these tests set the idle window to zero or to an hour so no timing is involved.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from writegate.checkpoints.pool import Pool, open_pool

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
