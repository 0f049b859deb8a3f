"""Apply writegate's SQL migrations, once each, safely from many processes.

A migration list is append-only: the position in the list (from 1) is the
version, and a version table records what was applied, with a checksum so an
edited old migration is caught instead of silently skipped.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg import Connection, sql
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row, tuple_row

# Every writegate migrator serializes on this one key ("writegat" in ASCII).
MIGRATION_LOCK_KEY = 0x7772697465676174
LOCK_WAIT_S = 300.0

_READ_COMMITTED = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"
_TRY_XACT_LOCK = "SELECT pg_try_advisory_xact_lock(%s)"
_TRY_SESSION_LOCK = "SELECT pg_try_advisory_lock(%s)"
_CREATE_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS {table} (
    version    integer PRIMARY KEY,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""
_APPLIED_VERSIONS = "SELECT version, checksum FROM {table} ORDER BY version"
_RECORD_VERSION = "INSERT INTO {table} (version, checksum) VALUES (%s, %s)"


class MigrationError(Exception):
    """A migration failed, or the recorded history disagrees with the list."""


def apply_migrations(
    conn_or_url: Connection[Any] | str,
    migrations: Sequence[str],
    *,
    table: str = "writegate_migrations",
) -> int:
    """Apply the migrations not yet recorded in ``table``; return how many.

    All pending migrations run in one transaction: either all apply or none.
    A connection passed in must have no transaction open.
    """
    if isinstance(conn_or_url, str):
        with psycopg.connect(conn_or_url, autocommit=True) as conn:
            return _apply(conn, migrations, table)
    return _apply(conn_or_url, migrations, table)


def setup_database(url: str) -> None:
    """Bring ``url`` up to date: writegate's schema and LangGraph's checkpointer."""
    from writegate.checkpoints.schema import MIGRATIONS

    # PostgresSaver needs autocommit (its indexes are built CONCURRENTLY) and dict rows.
    with psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        # The checkpointer's setup races with itself, so hold the same key for
        # the whole setup; closing the connection releases it, even on error.
        with conn.cursor(row_factory=tuple_row) as cur:
            _wait_for_lock(cur, _TRY_SESSION_LOCK)
        apply_migrations(conn, MIGRATIONS)  # the xact lock re-enters our session lock
        PostgresSaver(conn).setup()


def migration_checksum(migration: str) -> str:
    """Checksum of a migration's text, blind to whitespace-only edits."""
    return hashlib.sha256(" ".join(migration.split()).encode()).hexdigest()


def _apply(conn: Connection[Any], migrations: Sequence[str], table: str) -> int:
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise MigrationError("apply_migrations needs a connection with no transaction open")
    ident = sql.Identifier(*table.split("."))
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        # Under REPEATABLE READ a waiter would miss rows committed by the
        # process it waited for, and apply them again.
        cur.execute(_READ_COMMITTED)
        _wait_for_lock(cur, _TRY_XACT_LOCK)
        cur.execute(sql.SQL(_CREATE_VERSION_TABLE).format(table=ident))
        applied = cur.execute(sql.SQL(_APPLIED_VERSIONS).format(table=ident)).fetchall()
        _check_history(applied, migrations, table)
        pending = range(len(applied) + 1, len(migrations) + 1)
        for version in pending:
            migration = migrations[version - 1]
            try:
                # Not prepared: a migration may hold several statements.
                cur.execute(migration, prepare=False)
            except psycopg.Error as err:
                first_line = migration.strip().splitlines()[0] if migration.strip() else ""
                raise MigrationError(
                    f"migration {version} ({first_line[:60]!r}) failed, nothing applied: {err}"
                ) from err
            record = sql.SQL(_RECORD_VERSION).format(table=ident)
            cur.execute(record, (version, migration_checksum(migration)))
    return len(pending)


def _check_history(applied: list[tuple[int, str]], migrations: Sequence[str], table: str) -> None:
    versions = [version for version, _ in applied]
    if versions != list(range(1, len(applied) + 1)):
        raise MigrationError(f"{table} has gaps in its versions: {versions}")
    if len(applied) > len(migrations):
        raise MigrationError(
            f"the database is at version {len(applied)} but this code has only "
            f"{len(migrations)} migrations: it is older than the database"
        )
    for version, checksum in applied:
        if checksum != migration_checksum(migrations[version - 1]):
            raise MigrationError(
                f"migration {version} changed after it was applied; migrations are "
                "append-only: undo the edit and add a new migration instead"
            )


def _wait_for_lock(cur: psycopg.Cursor[tuple[Any, ...]], try_lock: str) -> None:
    # Poll rather than block: a backend blocked in pg_advisory_lock() holds a
    # snapshot, and the checkpointer's CREATE INDEX CONCURRENTLY in the lock
    # holder waits for every older snapshot, so blocking would deadlock.
    deadline = time.monotonic() + LOCK_WAIT_S
    delay = 0.01
    while True:
        row = cur.execute(try_lock, (MIGRATION_LOCK_KEY,)).fetchone()
        if row and row[0]:
            return
        if time.monotonic() > deadline:
            raise MigrationError(f"another migrator held the lock for over {LOCK_WAIT_S:.0f} s")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
