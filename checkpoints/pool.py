"""Connection pool shared by the ledgers and LangGraph's Postgres checkpointer.

Connections are autocommit with dict rows, the settings ``PostgresSaver``
requires, so one pool serves both: ``PostgresSaver(pool)`` works as is. Code
that needs a transaction opens one explicitly with ``conn.transaction()``.
"""

from __future__ import annotations

import psycopg
from psycopg import Connection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from writegate.checkpoints.database import CONNECT_TIMEOUT_S, DatabaseUnavailable, describe_database

Pool = ConnectionPool[Connection[DictRow]]

OPEN_TIMEOUT_S = 10.0


def _check_alive(conn: Connection[DictRow]) -> None:
    # Not ConnectionPool.check_connection: with prepare_threshold=0 its empty query is
    # prepared under a new name on every checkout, and those statements pile up on the
    # server for the connection's lifetime.
    conn.execute("", prepare=False)


def open_pool(url: str, *, min_size: int = 1, max_size: int = 10) -> Pool:
    """Open a pool on ``url`` and wait until its first connections are ready.

    Raises ``DatabaseUnavailable`` with the server's own reason when the
    database cannot be reached, instead of the pool's generic timeout.
    """
    where = describe_database(url)
    # One direct attempt first: the pool would retry quietly and then report
    # only a timeout, hiding errors such as a wrong password or database name.
    try:
        with psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S):
            pass
    except psycopg.OperationalError as err:
        raise DatabaseUnavailable(f"Cannot connect to {where}: {err}".strip()) from err

    pool: Pool = ConnectionPool(
        url,
        connection_class=Connection[DictRow],
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        min_size=min_size,
        max_size=max_size,
        open=False,
        # A server restart leaves dead connections in the pool; test on checkout.
        check=_check_alive,
        name="writegate",
    )
    try:
        pool.open(wait=True, timeout=OPEN_TIMEOUT_S)
    except PoolTimeout as err:
        pool.close()
        raise DatabaseUnavailable(
            f"Connected to {where} once but the pool could not open {min_size} "
            f"connection(s) within {OPEN_TIMEOUT_S:.0f} s (too many clients?)"
        ) from err
    return pool
