"""Connection pool shared by the ledgers and LangGraph's Postgres checkpointer.

Connections are autocommit with dict rows, the settings ``PostgresSaver``
requires, so one pool serves both: ``PostgresSaver(pool)`` works as is. Code
that needs a transaction opens one explicitly with ``conn.transaction()``. The pool
knows the schema of writegate's own tables (`schema`), which every store on it uses.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from weakref import WeakKeyDictionary

import psycopg
from psycopg import Connection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout
from psycopg_pool.base import AttemptWithBackoff

from writegate.checkpoints.database import CONNECT_TIMEOUT_S, DatabaseUnavailable, describe_database
from writegate.checkpoints.namespace import DEFAULT_SCHEMA, schema_name
from writegate.checkpoints.outage import is_read_only
from writegate.checkpoints.timelines import note_timeline

OPEN_TIMEOUT_S = 10.0
# How long a caller waits for a connection before it is told `temporarily_unavailable`.
CHECKOUT_TIMEOUT_S = 10.0
# A connection back in the pool for less than this is handed out without a check (as
# HikariCP's alive-bypass window): it answered a moment ago, and checking it cost one
# round trip per checkout, a quarter of a write's statements. One idle longer is checked.
CHECK_AFTER_IDLE_S = 0.5
# After a failed connection attempt the pool tries again 0.2 s later, doubling up to
# 1 s (psycopg_pool's own: 1 s doubling without end, so after a failover the pool served
# the new primary 3.4 s after its promotion, measured; now within a second).
RECONNECT_FIRST_S = 0.2
RECONNECT_MAX_S = 1.0


class _Reconnect(AttemptWithBackoff):
    INITIAL_DELAY = RECONNECT_FIRST_S

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, RECONNECT_MAX_S)


class _AliveCheck:
    """The pool's checkout check, skipped for connections returned a moment ago."""

    def __init__(self, idle_s: float = CHECK_AFTER_IDLE_S) -> None:
        self.idle_s = idle_s
        self._returned: WeakKeyDictionary[Connection[DictRow], float] = WeakKeyDictionary()

    def returned(self, conn: Connection[DictRow]) -> None:
        """Runs on every connection given back (`Pool.putconn`)."""
        self._returned[conn] = time.monotonic()

    def __call__(self, conn: Connection[DictRow]) -> None:
        returned = self._returned.get(conn)
        if returned is not None and time.monotonic() - returned < self.idle_s:
            return
        # Not ConnectionPool.check_connection: with prepare_threshold=0 its empty query
        # is prepared under a new name on every checkout, and those statements pile up
        # on the server for the connection's lifetime.
        conn.execute("", prepare=False)


class Pool(ConnectionPool[Connection[DictRow]]):
    """psycopg's pool, noting each connection's return in the caller's thread, dropping
    its connections to a node that became read-only, and the schema of writegate's
    tables on this database.

    A `reset` hook could note the return too, but then psycopg_pool hands every return
    to a worker thread: a thread switch per checkout (over 1 ms of CPU per write,
    measured), and a connection missing from the pool for a moment after each use.
    """

    def __init__(
        self,
        *args: Any,
        returned: Callable[[Connection[DictRow]], None],
        schema: str = DEFAULT_SCHEMA,
        **kw: Any,
    ):
        self._returned = returned
        self.schema = schema_name(schema)
        super().__init__(*args, **kw)

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[Connection[DictRow]]:
        with super().connection(timeout) as conn:
            try:
                yield conn
            except psycopg.Error as exc:
                if is_read_only(exc):
                    # The node became a standby: this connection and its siblings on it
                    # would refuse every write. Drained, the failing one is closed when it
                    # comes back and new ones find the primary (target_session_attrs).
                    self.drain()
                raise

    def putconn(self, conn: Connection[DictRow]) -> None:
        self._returned(conn)  # a broken one is discarded below all the same
        super().putconn(conn)

    def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        # psycopg_pool's own hook for each new connection; only the first attempt's
        # backoff is ours (it carries itself through the retries).
        first = attempt or _Reconnect(timeout=self.reconnect_timeout)
        super()._add_connection(first, growing)


def open_pool(
    url: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    check_after_idle_s: float = CHECK_AFTER_IDLE_S,
    connection_class: type[Connection[DictRow]] | None = None,
    timeout: float = CHECKOUT_TIMEOUT_S,
    schema: str = DEFAULT_SCHEMA,
) -> Pool:
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

    alive = _AliveCheck(check_after_idle_s)

    def check(conn: Connection[DictRow]) -> None:
        try:
            alive(conn)
        except psycopg.OperationalError:
            # A dead connection usually means a restart or a cut took its idle siblings too.
            # Drop them all now: the pool backs off 1, 2, 4 ... s before each further
            # check, so finding them one at a time would hold the caller for seconds.
            pool.drain()
            raise

    pool = Pool(
        url,
        connection_class=connection_class or Connection[DictRow],
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        min_size=min_size,
        max_size=max_size,
        open=False,
        timeout=timeout,
        # A server restart leaves dead connections in the pool; test on checkout those
        # that sat idle. A broken connection given back is discarded by the pool itself.
        check=check,
        # Each new connection notes the server's timeline: after a failover, the ledger
        # knows what predates the promotion (checkpoints/timelines.py).
        configure=lambda conn: note_timeline(conn, schema_name(schema)),
        returned=alive.returned,
        schema=schema,
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
