"""A database that is away, told apart from a database that refused.

A cut connection, a server restarting or shutting down, a pool that cannot hand out
a connection in time, or a node that became a standby under a kept connection (it
refuses every write: SQLSTATE 25006, read_only_sql_transaction) is an outage: nothing
the caller sent was wrong, and the same request may simply be sent again. Such driver errors become
`approval.errors.database_unavailable()` (`temporarily_unavailable`, retryable)
where they leave this package. Every other database error (a constraint, a
deadlock, a lock timeout) keeps its own meaning and is not mapped here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg_pool import PoolTimeout

from writegate.approval.errors import database_unavailable

# SQLSTATE classes of an outage: connection exception (08), insufficient resources
# such as too many clients (53), operator intervention: shutdown, restart (57P).
_OUTAGE_SQLSTATES = ("08", "53", "57P")
# read_only_sql_transaction: the node is a standby now (demoted by a failover, or fenced
# read-only by the HA engine); the pool drops its connections to it (`pool.py`).
READ_ONLY_SQLSTATE = "25006"


def is_read_only(exc: BaseException) -> bool:
    """True for a write refused because the server is (now) read-only."""
    return isinstance(exc, psycopg.Error) and exc.sqlstate == READ_ONLY_SQLSTATE


def is_outage(exc: BaseException) -> bool:
    """True for a driver error that means the database is (for now) out of reach."""
    if isinstance(exc, PoolTimeout) or is_read_only(exc):
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    # A broken or closed connection carries no SQLSTATE: the server never answered.
    return exc.sqlstate is None or exc.sqlstate.startswith(_OUTAGE_SQLSTATES)


@contextmanager
def outage_mapped() -> Iterator[None]:
    """Re-raise an outage inside the block as `TemporarilyUnavailable`, chained."""
    try:
        yield
    except psycopg.Error as exc:
        if not is_outage(exc):
            raise
        raise database_unavailable() from exc
