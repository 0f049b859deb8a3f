"""When this database last became a primary: a failover's mark, for the ledger.

A promoted standby starts a new timeline. With asynchronous replication it may lack
commits the old primary acknowledged: a proposal created before the promotion may
have been confirmed, claimed and sent to its downstream in commits that are gone, so
that here it looks never started. The ledger asks `failed_over_since(created_at)` and
then hands the claim to the reconciler, which looks the request key up before anything
is sent again.

Each new pooled connection notes the server's timeline in `writegate.timelines`
(migration 2); the first connection to a new primary inserts its row, so its `began_at` is the
moment writegate first wrote there, just after the promotion. The connection keeps that
`began_at` beside it, so asking costs no round trip, and it is never stale: a failover
ends every connection to the old primary, and the pool opens new ones.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any
from weakref import WeakKeyDictionary

import psycopg

from writegate.checkpoints.namespace import for_schema

log = logging.getLogger("writegate.timelines")

# The timeline is the first 8 hex digits of the current WAL file's name; it changes at
# the promotion itself (a checkpoint's record of it comes later).
_CURRENT = "('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer"
HAS_TIMELINES_SQL = """
SELECT to_regclass('writegate.timelines') IS NOT NULL AND NOT pg_is_in_recovery() AS ready"""
NOTE_TIMELINE_SQL = f"""
WITH current AS (SELECT {_CURRENT} AS timeline_id),
noted AS (
    INSERT INTO writegate.timelines (timeline_id) SELECT timeline_id FROM current
    ON CONFLICT (timeline_id) DO NOTHING
    RETURNING began_at
)
SELECT NULLIF(began_at, '-infinity') AS began_at FROM noted
UNION ALL
SELECT NULLIF(t.began_at, '-infinity') FROM writegate.timelines t JOIN current c USING (timeline_id)
LIMIT 1
"""

_began: WeakKeyDictionary[Any, datetime] = WeakKeyDictionary()


def note_timeline(conn: psycopg.Connection[Any], schema: str) -> None:
    """The pool's `configure` hook: note the server's timeline and keep when it began,
    in writegate's tables of `schema`. Before the migrations ran (or on a standby)
    there is nothing to note."""
    try:
        ready = conn.execute(for_schema(HAS_TIMELINES_SQL, schema)).fetchone()
        if not ready or not _value(ready):
            return
        row = conn.execute(for_schema(NOTE_TIMELINE_SQL, schema)).fetchone()
    except psycopg.OperationalError:
        raise  # the connection is useless: the pool discards it and tries again
    except psycopg.Error as exc:  # e.g. a role that may not read the WAL position
        log.warning("cannot note the database's timeline: %s", exc)
        return
    began = _value(row) if row is not None else None
    if began is not None:  # None: the timeline writegate was installed on, never in doubt
        _began[conn] = began


def began_at(conn: Any) -> datetime | None:
    """When the server behind `conn` became the primary it is (None: not noted)."""
    return _began.get(conn)


def _value(row: Any) -> Any:
    return next(iter(row.values())) if isinstance(row, dict) else row[0]
