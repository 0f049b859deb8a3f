"""A throwaway database for the kit: created on a server, dropped afterwards.

The server is the one `Writegate.open()` would use (`resolve_server_url`: the server of
DATABASE_URL, same host, port and user; else a local server; else the embedded one),
unless WRITEGATE_TEST_SERVER_URL names another. Only the database the kit created is
ever dropped; nothing else on the server is touched, not even writegate's app database.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from writegate.checkpoints.database import (
    DatabaseUnavailable,
    describe_database,
    resolve_server_url,
    with_database,
)

SERVER_ENV = "WRITEGATE_TEST_SERVER_URL"
CREATE_DATABASE_SQL = "CREATE DATABASE {}"
DROP_DATABASE_SQL = "DROP DATABASE IF EXISTS {} WITH (FORCE)"
_SET_SERVER = (
    f"set {SERVER_ENV} to a maintenance-database URL (…/postgres) of a role that may "
    "create databases"
)


def server_url() -> str:
    """The maintenance-database URL the kit makes its databases on: WRITEGATE_TEST_SERVER_URL
    when set, else the server `Writegate.open()` would use."""
    return os.environ.get(SERVER_ENV, "").strip() or resolve_server_url()


def admin_connection(url: str) -> psycopg.Connection[tuple[object, ...]]:
    """An autocommit connection to the server's maintenance database."""
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as err:
        raise DatabaseUnavailable(
            f"the conformance kit cannot connect to {describe_database(url)} ({err}); "
            f"start that server, check DATABASE_URL, or {_SET_SERVER}"
        ) from err


def create_database(server: str, prefix: str) -> str:
    """Create an empty database named `<prefix>_<random hex>` on `server`; its URL."""
    name = f"{prefix}_{secrets.token_hex(6)}"
    with admin_connection(server) as conn:
        try:
            conn.execute(sql.SQL(CREATE_DATABASE_SQL).format(sql.Identifier(name)))
        except psycopg.errors.InsufficientPrivilege as err:
            user = conn.info.user
            raise DatabaseUnavailable(
                f"the conformance kit makes a scratch database of its own, and user "
                f"{user!r} may not create databases on {describe_database(server)}: "
                f"grant it (ALTER ROLE {user} CREATEDB), or {_SET_SERVER}"
            ) from err
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
