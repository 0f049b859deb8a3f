"""The conformance kit finds its database server the way `Writegate.open()` does.

`DATABASE_URL`'s server (same host, port and user), else a local server, else the
embedded one; `WRITEGATE_TEST_SERVER_URL` overrides. On that server the kit makes a
scratch database of its own and drops it, and touches nothing else: not the user's
database, not writegate's app database.

To tell the server apart from the old fixed default (postgres on 127.0.0.1:5432), the
user here is a role of its own, made for the test: the scratch database must belong to
it. The local server is the test server, found by the usual probe.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from writegate.checkpoints import database
from writegate.checkpoints.database import (
    DatabaseUnavailable,
    resolve_database_url,
    with_database,
)
from writegate.testing import throwaway_database

SERVER_ENV = "WRITEGATE_TEST_SERVER_URL"
DATABASE_OWNER_SQL = """
SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()"""
USER_TABLES_SQL = (
    "SELECT count(*) FROM information_schema.tables "
    "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
)
USER_TEST = '''
import json, os, pathlib
import psycopg

OWNER_SQL = """{owner_sql}"""


def test_scratch(writegate_database):
    with psycopg.connect(writegate_database) as conn:
        owner = conn.execute(OWNER_SQL).fetchone()[0]
    pathlib.Path(os.environ["KIT_SEEN"]).write_text(json.dumps([writegate_database, owner]))
'''


def _server_of(url: str) -> tuple[str, str, str]:
    params = conninfo_to_dict(url)
    return str(params.get("host")), str(params.get("port") or 5432), str(params.get("user"))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def admin(test_server_url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(test_server_url, autocommit=True) as conn:
        yield conn


def _databases(admin: psycopg.Connection[tuple[object, ...]]) -> set[str]:
    return {str(row[0]) for row in admin.execute("SELECT datname FROM pg_database")}


def _owner(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute(DATABASE_OWNER_SQL).fetchone()
    assert row is not None
    return str(row[0])


@pytest.fixture
def make_role(
    admin: psycopg.Connection[tuple[object, ...]],
) -> Iterator[Callable[[bool], str]]:
    """Factory: a new login role (allowed to create databases or not); dropped after,
    with any database it still owns."""
    made: list[str] = []

    def make(createdb: bool) -> str:
        name = f"kit_role_{secrets.token_hex(4)}"
        create = "CREATE ROLE {} LOGIN " + ("CREATEDB" if createdb else "NOCREATEDB")
        admin.execute(sql.SQL(create).format(sql.Identifier(name)))
        made.append(name)
        return name

    yield make
    for name in made:
        owned = admin.execute(
            "SELECT datname FROM pg_database WHERE datdba = (SELECT oid FROM pg_roles "
            "WHERE rolname = %s)",
            (name,),
        ).fetchall()
        for (datname,) in owned:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            admin.execute(drop.format(sql.Identifier(str(datname))))
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


@pytest.fixture
def only_database_url(
    monkeypatch: pytest.MonkeyPatch,
    create_database: Callable[[], str],
    make_role: Callable[[bool], str],
) -> Callable[[bool], str]:
    """Factory: DATABASE_URL set to the user's own (empty) database as a role of its
    own, no kit setting, and no local server to stumble on. Returns the URL."""

    def arrange(createdb: bool) -> str:
        user_db = create_database()
        role = make_role(createdb)
        host, port, _ = _server_of(user_db)
        dbname = conninfo_to_dict(user_db)["dbname"]
        if host.startswith("/"):  # a server on a unix socket only (the embedded one)
            url = f"postgresql://{role}@/{dbname}?host={host}&port={port}"
        else:
            url = f"postgresql://{role}@{host}:{port}/{dbname}"
        monkeypatch.delenv(SERVER_ENV, raising=False)
        monkeypatch.setenv("DATABASE_URL", url)
        monkeypatch.setattr(database, "LOCAL_SOCKET_DIRS", ())
        monkeypatch.setattr(database, "LOCAL_TCP_ADDRESSES", (("127.0.0.1", _closed_port()),))
        return url

    return arrange


def test_with_only_database_url_the_scratch_database_is_made_on_its_server(
    only_database_url: Callable[[bool], str], admin: psycopg.Connection[tuple[object, ...]]
) -> None:
    user_url = only_database_url(True)
    role = _server_of(user_url)[2]

    with throwaway_database() as scratch:
        name = str(conninfo_to_dict(scratch)["dbname"])
        assert name in _databases(admin)
        assert _server_of(scratch) == _server_of(user_url)  # same host, port and user
        assert _owner(scratch) == role
    assert name not in _databases(admin)
    with psycopg.connect(user_url) as conn:  # the user's own database: untouched
        assert conn.execute(USER_TABLES_SQL).fetchone() == (0,)


def test_the_pytest_fixture_with_only_database_url(
    only_database_url: Callable[[bool], str],
    admin: psycopg.Connection[tuple[object, ...]],
    tmp_path: Path,
) -> None:
    """The one command a user runs: `pytest` on their tests, with the kit's plugin on."""
    user_url = only_database_url(True)
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["writegate.testing.pytest_plugin"]\n')
    test_file = tmp_path / "test_user_tool.py"
    test_file.write_text(textwrap.dedent(USER_TEST.format(owner_sql=DATABASE_OWNER_SQL)))
    seen = tmp_path / "seen.json"
    env = {**os.environ, "KIT_SEEN": str(seen)}  # DATABASE_URL as set above
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    scratch, owner = json.loads(seen.read_text())
    assert _server_of(scratch) == _server_of(user_url)
    assert owner == _server_of(user_url)[2]
    assert str(conninfo_to_dict(scratch)["dbname"]) not in _databases(admin)


def test_a_role_that_may_not_create_databases_is_told_what_to_do(
    only_database_url: Callable[[bool], str], admin: psycopg.Connection[tuple[object, ...]]
) -> None:
    user_url = only_database_url(False)
    role = _server_of(user_url)[2]
    before = _databases(admin)

    with pytest.raises(DatabaseUnavailable) as refused, throwaway_database():
        pass
    message = str(refused.value)
    assert role in message and "CREATEDB" in message and SERVER_ENV in message, message
    assert not {n for n in _databases(admin) - before if n.startswith("writegate_kit")}


def test_with_nothing_set_the_kit_uses_the_server_writegate_open_resolves(
    monkeypatch: pytest.MonkeyPatch,
    loopback_server: tuple[str, int],
    make_role: Callable[[bool], str],
    admin: psycopg.Connection[tuple[object, ...]],
) -> None:
    host, port = loopback_server
    role = make_role(True)
    monkeypatch.delenv(SERVER_ENV, raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    # A developer whose login name is a PostgreSQL role: the usual local setup.
    monkeypatch.setenv("LOGNAME", role)
    monkeypatch.setattr(database, "LOCAL_SOCKET_DIRS", ())
    monkeypatch.setattr(database, "LOCAL_TCP_ADDRESSES", ((host, int(port)),))
    app_database = f"writegate_test_app_{secrets.token_hex(4)}"
    monkeypatch.setattr(database, "APP_DATABASE", app_database)

    with throwaway_database() as scratch:
        name = str(conninfo_to_dict(scratch)["dbname"])
        assert name in _databases(admin)
        assert _owner(scratch) == role
    assert name not in _databases(admin)
    assert app_database not in _databases(admin)  # the kit made no app database

    opened = resolve_database_url()  # what Writegate.open() uses (it makes the app db)
    assert _server_of(opened) == _server_of(scratch)
    assert opened == with_database(scratch, app_database)


def test_with_no_server_at_all_the_kit_goes_where_writegate_open_goes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No DATABASE_URL and no local server: the embedded server, in its usual folder
    (where the suite's own may already run: then nothing is started). As root it is
    refused at once, and the kit must give the same answer `Writegate.open()` gives."""
    monkeypatch.delenv(SERVER_ENV, raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setattr(database, "LOCAL_SOCKET_DIRS", (str(tmp_path / "no-socket"),))
    port = _closed_port()
    monkeypatch.setattr(database, "LOCAL_TCP_ADDRESSES", (("127.0.0.1", port),))
    if os.geteuid() != 0:
        with throwaway_database() as scratch, psycopg.connect(scratch) as conn:
            row = conn.execute("SELECT current_setting('data_directory')").fetchone()
            assert row is not None and Path(row[0]) == database.embedded_data_dir()
            assert _server_of(scratch) == _server_of(database.resolve_server_url())
        return
    monkeypatch.setenv("WRITEGATE_HOME", str(tmp_path / "home"))
    with pytest.raises(DatabaseUnavailable) as opened:
        resolve_database_url()
    with pytest.raises(DatabaseUnavailable) as kit, throwaway_database():
        pass
    assert "embedded server cannot start as root" in str(opened.value)
    # The same answer; the kit probed each server's maintenance database, not the app's.
    probed_app = f":{port}/{database.APP_DATABASE}"
    assert str(kit.value) == str(opened.value).replace(probed_app, f":{port}/postgres")
    assert not (tmp_path / "home").exists()  # nothing made on the way


def test_the_kit_setting_still_overrides(
    monkeypatch: pytest.MonkeyPatch,
    test_server_url: str,
    admin: psycopg.Connection[tuple[object, ...]],
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@db.invalid:5432/elsewhere")
    monkeypatch.setenv(SERVER_ENV, test_server_url)
    with throwaway_database() as scratch:
        assert _server_of(scratch) == _server_of(test_server_url)
        assert str(conninfo_to_dict(scratch)["dbname"]) in _databases(admin)
