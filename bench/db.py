"""The bench's own databases, pools and data.

Every database the bench uses is created here, named `writegate_bench_<hex>[_part]`,
on the server the app resolves (DATABASE_URL, else the local server), and dropped at
the end unless `--keep`. Nothing else on the server is touched.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import Connection, sql
from psycopg.rows import DictRow, dict_row

from writegate.checkpoints.database import with_database
from writegate.checkpoints.namespace import DEFAULT_SCHEMA
from writegate.checkpoints.pool import Pool, open_pool
from writegate.demo.schema import setup_demo
from writegate.surfaces.store import setup_service

TENANT = "tenant_bench"
USER = "user_bench"
ORDER_PAYABLE = 19900
REFUND_AMOUNT = 1000

_CREATE_DATABASE = "CREATE DATABASE {}"
_DROP_DATABASE = "DROP DATABASE IF EXISTS {} WITH (FORCE)"
_BACKENDS_SQL = "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = %s"
_XACT_COMMIT_SQL = "SELECT xact_commit FROM pg_stat_database WHERE datname = %s"
_CLEAR_SNAPSHOT_SQL = "SELECT pg_stat_clear_snapshot()"
_USER_TABLES_SQL = """
SELECT schemaname, relname FROM pg_stat_user_tables ORDER BY schemaname, relname"""
# Named as TABLE_GROUPS names them: schema-qualified, but for the public schema's; and
# writegate's own schema's group, read from the catalog.
_RELATION_SIZE_SQL = """
SELECT CASE WHEN n.nspname = 'public' THEN c.relname
            ELSE n.nspname || '.' || c.relname END AS name,
       n.nspname = %(own)s AS own, c.relname,
       pg_total_relation_size(c.oid) AS bytes
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND n.nspname IN ('public', 'provider', %(own)s)"""
# Fresh orders: one per operation, so no refund ever runs out of balance.
INSERT_ORDERS_SQL = """
INSERT INTO orders (order_id, tenant_id, user_id, currency, payable_minor, shipping_address)
SELECT %s || g, %s, %s, 'CNY', %s, '' FROM generate_series(1, %s) AS g"""

# Which tables make up which part of the footprint. Writegate's own are every table of
# its schema, read from the catalog (`table_sizes`): its audit, and the rest, the ledger.
AUDIT_TABLE = "audit"
TABLE_GROUPS = {
    "checkpoints": ("checkpoints", "checkpoint_blobs", "checkpoint_writes"),
    "domain": ("orders", "refunds", "tickets"),
    "provider": ("provider.refunds",),
}


class BenchServer:
    """Creates and drops the bench's databases on one server."""

    def __init__(self, server_url: str, *, keep: bool = False) -> None:
        self.server_url = server_url
        self.keep = keep
        self.prefix = f"writegate_bench_{secrets.token_hex(4)}"
        self.created: list[str] = []

    def _admin(self) -> Connection[Any]:
        return psycopg.connect(self.server_url, autocommit=True, connect_timeout=10)

    def create(self, suffix: str = "", *, schema: bool = True) -> str:
        name = self.prefix + (f"_{suffix}" if suffix else "")
        with self._admin() as conn:
            conn.execute(sql.SQL(_CREATE_DATABASE).format(sql.Identifier(name)))
        self.created.append(name)
        url = with_database(self.server_url, name)
        if schema:
            setup_demo(url)
            setup_service(url)
        return url

    def drop_all(self) -> list[str]:
        if self.keep or not self.created:
            return list(self.created)
        with self._admin() as conn:
            for name in self.created:
                conn.execute(sql.SQL(_DROP_DATABASE).format(sql.Identifier(name)))
        return []

    def drop(self, url: str) -> None:
        name = dbname(url)
        if self.keep:
            return
        with self._admin() as conn:
            conn.execute(sql.SQL(_DROP_DATABASE).format(sql.Identifier(name)))
        self.created.remove(name)

    def wait_idle(self, url: str, deadline_s: float = 30.0) -> None:
        """Wait until no backend is connected to `url`'s database.

        A backend flushes its statistics when it exits, before it leaves
        pg_stat_activity, so after this the server's counters are complete.
        """
        name, deadline = dbname(url), time.monotonic() + deadline_s
        with self._admin() as conn:
            while conn.execute(_BACKENDS_SQL, (name,)).fetchone()[0]:  # type: ignore[index]
                if time.monotonic() > deadline:
                    raise RuntimeError(f"backends still connected to {name}")
                time.sleep(0.02)

    def xact_commit(self, url: str) -> int:
        """The server's committed-transaction counter for the database (after wait_idle)."""
        with self._admin() as conn:
            conn.execute(_CLEAR_SNAPSHOT_SQL)
            row = conn.execute(_XACT_COMMIT_SQL, (dbname(url),)).fetchone()
        return int(row[0]) if row else 0


def dbname(url: str) -> str:
    return str(psycopg.conninfo.conninfo_to_dict(url)["dbname"])


def open_bench_pool(
    url: str, *, max_size: int, connection_class: type[Connection[DictRow]] | None = None
) -> Pool:
    """`checkpoints.pool.open_pool`'s pool, with a chosen connection class."""
    return open_pool(url, max_size=max_size, connection_class=connection_class)


def disable_autovacuum(url: str) -> None:
    """So no autovacuum transaction lands in the database's commit counter.

    Our tables get autovacuum switched off; the catalogs cannot, so a VACUUM ANALYZE
    first leaves autovacuum nothing to do there after the schema was created.
    """
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        for schema, table in conn.execute(_USER_TABLES_SQL).fetchall():
            conn.execute(
                sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(
                    sql.Identifier(schema, table)
                )
            )


class Orders:
    """Hands out fresh order ids, inserting them in bulk ahead of use."""

    def __init__(self, pool: Pool, prefix: str, chunk: int = 500) -> None:
        self.pool, self.prefix, self.chunk = pool, prefix, chunk
        self._free: list[str] = []
        self._batches = 0
        self._lock = threading.Lock()

    def take(self) -> str:
        with self._lock:
            if not self._free:
                self._insert(self.chunk)
            return self._free.pop()

    def reserve(self, n: int) -> None:
        """Insert `n` more orders now, so timed sections rarely pay for an insert."""
        with self._lock:
            self._insert(n)

    def _insert(self, n: int) -> None:
        batch = f"{self.prefix}{self._batches}_"
        self._batches += 1
        with self.pool.connection() as conn:
            conn.execute(INSERT_ORDERS_SQL, (batch, TENANT, USER, ORDER_PAYABLE, n))
        self._free.extend(f"{batch}{g}" for g in range(n, 0, -1))


def table_sizes(conn: Connection[Any]) -> dict[str, int]:
    """Bytes on disk per table group (heap, indexes, TOAST, free-space and visibility maps):
    writegate's ledger (every table of its schema but the audit), its audit, and the
    groups of TABLE_GROUPS."""
    cur = conn.cursor(row_factory=dict_row)
    rows = cur.execute(_RELATION_SIZE_SQL, {"own": DEFAULT_SCHEMA}).fetchall()
    own = [row for row in rows if row["own"]]
    by_table = {row["name"]: int(row["bytes"]) for row in rows if not row["own"]}
    return {
        "ledger": sum(int(row["bytes"]) for row in own if row["relname"] != AUDIT_TABLE),
        "audit": sum(int(row["bytes"]) for row in own if row["relname"] == AUDIT_TABLE),
        **{group: sum(by_table.get(t, 0) for t in names) for group, names in TABLE_GROUPS.items()},
    }


@contextmanager
def connect(url: str) -> Iterator[Connection[DictRow]]:
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        yield conn
