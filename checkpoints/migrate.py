"""Apply migration lists, once each, safely from many processes.

A migration list is append-only: the position in the list (from 1) is the version, and
a version table records what was applied, with a checksum so an edited old migration
is caught instead of silently skipped. writegate's core, the HTTP service and the demo
domain each own a list (`MigrationList`); `checkpoints/schema.py`'s `setup_database`
applies only the core's, and LangGraph's checkpoint tables.

Each run that applies something records, per list, which writegate release did it
(`writegate.releases`, once the core's migration made it). A release older than the
database (fewer migrations than recorded) refuses before changing anything, naming
both releases: the database's and its own.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import psycopg
from psycopg import Connection
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from writegate.checkpoints.namespace import DEFAULT_SCHEMA, for_schema, schema_name

# Every writegate migrator serializes on this one key ("writegat" in ASCII).
MIGRATION_LOCK_KEY = 0x7772697465676174
LOCK_WAIT_S = 300.0

_READ_COMMITTED = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"
_TRY_XACT_LOCK = "SELECT pg_try_advisory_xact_lock(%s)"
TRY_SESSION_LOCK = "SELECT pg_try_advisory_lock(%s)"
_CREATE_SCHEMA = "CREATE SCHEMA IF NOT EXISTS {schema}"  # a checked name (namespace.py)
_CREATE_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS {table} (
    version    integer PRIMARY KEY,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""
_APPLIED_VERSIONS = "SELECT version, checksum FROM {table} ORDER BY version"
_RECORD_VERSION = "INSERT INTO {table} (version, checksum) VALUES (%s, %s)"
_EXISTS = "SELECT to_regclass(%s) IS NOT NULL"
# Which release last applied a list's migrations (a core migration), where it exists.
RELEASES_TABLE = "writegate.releases"
_RECORD_RELEASE = """
INSERT INTO {table} (migrations, release, version) VALUES (%s, %s, %s)
ON CONFLICT (migrations) DO UPDATE
SET release = excluded.release, version = excluded.version, migrated_at = now()"""
_RECORDED_RELEASE = "SELECT release, version, migrated_at FROM {table} WHERE migrations = %s"


def _this_release() -> str:
    try:
        return metadata.version("writegate")  # as `writegate.__version__`
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0.0.0"


RELEASE = _this_release()


class MigrationError(Exception):
    """A migration failed, or the recorded history disagrees with the list."""


@dataclass(frozen=True)
class MigrationList:
    """One owner's migrations and the table that records them: writegate's own lists,
    or an application's tables beside writegate's, applied with `apply_migrations`.

    `name` is what `writegate db status` calls the list; `table` (schema-qualified,
    e.g. `public.myapp_migrations`) records the versions applied; `migrations` is the
    SQL of each version in order, the position being the version: append, never edit
    (a changed migration is refused by its checksum). In writegate's own lists, `table`
    and the migrations name writegate's schema as `writegate.`; they are applied to the
    schema given (`checkpoints/namespace.py`). `legacy`, if set, is a relation that only
    a database set up before that schema has, and the SQL that adopts its tables as this
    list's version 1 instead of creating them.
    """

    name: str
    table: str
    migrations: Sequence[str]
    legacy: tuple[str, str] | None = None


def apply_migrations(
    conn_or_url: Connection[Any] | str,
    migrations: MigrationList,
    *,
    schema: str = DEFAULT_SCHEMA,
) -> int:
    """Apply the migrations of `migrations` not yet recorded on the database (a URL, or
    a connection with no transaction open); return how many.

    All pending migrations run in one transaction, under an advisory lock, so many
    processes may call it at once: either all apply or none, and each applies once.
    """
    schema = schema_name(schema)
    if isinstance(conn_or_url, str):
        with psycopg.connect(conn_or_url, autocommit=True) as conn:
            return _apply(conn, migrations, schema)
    return _apply(conn_or_url, migrations, schema)


def migration_checksum(migration: str) -> str:
    """Checksum of a migration's text, blind to whitespace-only edits."""
    return hashlib.sha256(" ".join(migration.split()).encode()).hexdigest()


def _apply(conn: Connection[Any], migrations: MigrationList, schema: str) -> int:
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise MigrationError("apply_migrations needs a connection with no transaction open")
    table = for_schema(migrations.table, schema)
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        # Under REPEATABLE READ a waiter would miss rows committed by the
        # process it waited for, and apply them again.
        cur.execute(_READ_COMMITTED)
        wait_for_lock(cur, _TRY_XACT_LOCK)
        if migrations.table.startswith(f"{DEFAULT_SCHEMA}."):
            cur.execute(_CREATE_SCHEMA.format(schema=schema))  # writegate's own schema
        cur.execute(_CREATE_VERSION_TABLE.format(table=table))
        applied = cur.execute(_APPLIED_VERSIONS.format(table=table)).fetchall()
        if len(applied) > len(migrations.migrations):
            raise MigrationError(_newer_database(cur, migrations, schema, len(applied)))
        _check_history(applied, migrations.migrations, table)
        if not applied and _adopt(cur, migrations, schema):
            applied = [(1, migration_checksum(migrations.migrations[0]))]
            cur.execute(_RECORD_VERSION.format(table=table), applied[0])
        pending = range(len(applied) + 1, len(migrations.migrations) + 1)
        for version in pending:
            migration = migrations.migrations[version - 1]
            _run(cur, for_schema(migration, schema), f"{migrations.name} migration {version}")
            record = _RECORD_VERSION.format(table=table)
            cur.execute(record, (version, migration_checksum(migration)))
        releases = for_schema(RELEASES_TABLE, schema)
        if pending and _exists(cur, releases):
            done = (migrations.name, RELEASE, len(migrations.migrations))
            cur.execute(_RECORD_RELEASE.format(table=releases), done)
    return len(pending)


@dataclass(frozen=True)
class ListStatus:
    """Where one migration list stands on a database, for `writegate db status`."""

    name: str
    applied: int  # versions recorded in the database
    known: int  # migrations this code has
    release: str | None  # the writegate release that last applied some, if recorded
    migrated_at: Any = None


def migration_status(
    conn: Connection[Any], migrations: MigrationList, *, schema: str = DEFAULT_SCHEMA
) -> ListStatus:
    """Read `migrations`' state on `conn`'s database; changes nothing."""
    schema = schema_name(schema)
    table = for_schema(migrations.table, schema)
    with conn.cursor(row_factory=tuple_row) as cur:
        applied = 0
        if _exists(cur, table):
            counted = cur.execute(f"SELECT count(*) FROM {table}").fetchone()
            applied = int(counted[0]) if counted else 0
        recorded = _recorded(cur, migrations.name, schema)
    release, at = (recorded[0], recorded[2]) if recorded else (None, None)
    return ListStatus(migrations.name, applied, len(migrations.migrations), release, at)


def _exists(cur: psycopg.Cursor[tuple[Any, ...]], relation: str) -> bool:
    found = cur.execute(_EXISTS, (relation,)).fetchone()
    return bool(found and found[0])


def _recorded(
    cur: psycopg.Cursor[tuple[Any, ...]], name: str, schema: str
) -> tuple[Any, ...] | None:
    releases = for_schema(RELEASES_TABLE, schema)
    if not _exists(cur, releases):
        return None
    return cur.execute(_RECORDED_RELEASE.format(table=releases), (name,)).fetchone()


def _newer_database(
    cur: psycopg.Cursor[tuple[Any, ...]], migrations: MigrationList, schema: str, applied: int
) -> str:
    recorded = _recorded(cur, migrations.name, schema)
    by = (
        f"writegate {recorded[0]}" if recorded else "a writegate release that did not record itself"
    )
    return (
        f"this database was migrated by {by} ({migrations.name} migrations: {applied}), "
        f"but this is writegate {RELEASE}, which has only {len(migrations.migrations)}: "
        "it is older than the database. Nothing was changed; run writegate "
        f"{recorded[0] if recorded else 'of that release'} or later against it"
    )


def _adopt(cur: psycopg.Cursor[tuple[Any, ...]], migrations: MigrationList, schema: str) -> bool:
    """Adopt a database set up before writegate's schema as version 1, if it is one."""
    if migrations.legacy is None:
        return False
    marker, adoption = migrations.legacy
    if not _exists(cur, for_schema(marker, schema)):
        return False
    _run(cur, for_schema(adoption, schema), f"adopting the {migrations.name} tables")
    return True


def renamed_as_fresh(version_table: str) -> str:
    """SQL that strips the `wg_` prefix from the constraints, indexes and sequences in the
    schema of `version_table`, for tables adopted from the layout before that schema
    (one index an old migration left as `proposals_open3_fp_idx` gets its fresh name)."""
    return f"""
DO $rename$
DECLARE
    ns oid := (SELECT relnamespace FROM pg_class WHERE oid = '{version_table}'::regclass);
    r record;
BEGIN
    FOR r IN SELECT c.conrelid::regclass AS tbl, c.conname FROM pg_constraint c
             WHERE c.connamespace = ns AND c.conname LIKE 'wg\\_%' LOOP
        EXECUTE format('ALTER TABLE %s RENAME CONSTRAINT %I TO %I', r.tbl, r.conname,
                       substr(r.conname, 4));
    END LOOP;
    FOR r IN SELECT c.relname, c.relkind, n.nspname FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.relnamespace = ns AND c.relkind IN ('i', 'S') AND c.relname LIKE 'wg\\_%'
             LOOP
        EXECUTE format('ALTER %s %I.%I RENAME TO %I',
                       CASE r.relkind WHEN 'i' THEN 'INDEX' ELSE 'SEQUENCE' END, r.nspname,
                       r.relname,
                       replace(substr(r.relname, 4), 'proposals_open3_', 'proposals_open_'));
    END LOOP;
END
$rename$;
"""


def _run(cur: psycopg.Cursor[tuple[Any, ...]], text: str, what: str) -> None:
    try:
        # Not prepared: a migration may hold several statements.
        cur.execute(text, prepare=False)
    except psycopg.Error as err:
        first_line = text.strip().splitlines()[0] if text.strip() else ""
        raise MigrationError(
            f"{what} ({first_line[:60]!r}) failed, nothing applied: {err}"
        ) from err


def _check_history(applied: list[tuple[int, str]], migrations: Sequence[str], table: str) -> None:
    versions = [version for version, _ in applied]
    if versions != list(range(1, len(applied) + 1)):
        raise MigrationError(f"{table} has gaps in its versions: {versions}")
    for version, checksum in applied:
        if checksum != migration_checksum(migrations[version - 1]):
            raise MigrationError(
                f"migration {version} changed after it was applied; migrations are "
                "append-only: undo the edit and add a new migration instead"
            )


def wait_for_lock(cur: psycopg.Cursor[tuple[Any, ...]], try_lock: str) -> None:
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
