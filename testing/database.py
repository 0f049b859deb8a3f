"""A throwaway database for the kit: created on a server, dropped afterwards.

Only the database it created is ever dropped; nothing else on the server is touched.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from writegate.checkpoints.database import describe_database, with_database

SERVER_ENV = "WRITEGATE_TEST_SERVER_URL"
DEFAULT_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
CREATE_DATABASE_SQL = "CREATE DATABASE {}"
DROP_DATABASE_SQL = "DROP DATABASE IF EXISTS {} WITH (FORCE)"


def server_url() -> str:
    """The maintenance-database URL from WRITEGATE_TEST_SERVER_URL (else local postgres)."""
    return os.environ.get(SERVER_ENV, "").strip() or DEFAULT_SERVER_URL


def admin_connection(url: str) -> psycopg.Connection[tuple[object, ...]]:
    """An autocommit connection to the server's maintenance database."""
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as err:
        raise RuntimeError(
            f"no PostgreSQL at {describe_database(url)}; start one or set {SERVER_ENV} "
            f"to a server where databases may be created ({err})"
        ) from err


def create_database(server: str, prefix: str) -> str:
    """Create an empty database named `<prefix>_<random hex>` on `server`; its URL."""
    name = f"{prefix}_{secrets.token_hex(6)}"
    with admin_connection(server) as conn:
        conn.execute(sql.SQL(CREATE_DATABASE_SQL).format(sql.Identifier(name)))
    return with_database(server, name)


def drop_database(server: str, url: str) -> None:
    """Drop the database `url` names (one `create_database` made), connections and all."""
    name = str(conninfo_to_dict(url)["dbname"])
    with admin_connection(server) as conn:
        conn.execute(sql.SQL(DROP_DATABASE_SQL).format(sql.Identifier(name)))


@contextmanager
def throwaway_database(server: str | None = None, prefix: str = "writegate_kit") -> Iterator[str]:
    """Create an empty database on `server` (default: `server_url()`), yield its URL,
    then drop it, connections and all."""
    admin_url = server or server_url()
    url = create_database(admin_url, prefix)
    try:
        yield url
    finally:
        drop_database(admin_url, url)
