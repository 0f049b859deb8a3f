"""Shared fixtures: throwaway PostgreSQL databases and a pool on them.

Each test session creates its own databases named ``writegate_test_<hex>`` on one
server, and drops exactly those at the end; no other database is touched. The server:
``WRITEGATE_TEST_SERVER_URL`` when set; else postgres on 127.0.0.1:5432 when it answers
(whatever DATABASE_URL says: tests set that themselves); else the embedded PostgreSQL
(the ``[embedded]`` extra, started as `Writegate.open()` starts it), said in one line.
It is chosen once, after collection, when a collected test needs a database; as root
with no server the suite stops there, with one line that says what to do.

A test needing a system package the machine lacks skips with a reason naming it
(tests/system_packages.py); under CI=true that skip is a failure.
Tests under ``tests/integration`` are marked ``integration`` automatically.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.app_db import setup_app
from tests.system_packages import fail_on_ci
from writegate.checkpoints.database import (
    DatabaseUnavailable,
    embedded_data_dir,
    embedded_server_url,
)
from writegate.checkpoints.pool import Pool, open_pool
from writegate.testing import database as throwaway

# The conformance kit's `writegate_database` fixture, as a user enables it.
pytest_plugins = ["writegate.testing.pytest_plugin"]

_INTEGRATION_DIR = Path(__file__).parent / "integration"
LOCAL_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _INTEGRATION_DIR in item.path.parents:
            item.add_marker(pytest.mark.integration)


# Fixtures that need the server: this conftest's, and the kit's (writegate.testing).
SERVER_FIXTURES = {"test_server_url", "writegate_database"}
_SERVER = pytest.StashKey[str]()
NO_SERVER_AS_ROOT = (
    "No PostgreSQL answered at 127.0.0.1:5432 and the embedded one cannot start as root: "
    f"start a local server (trust auth), set {throwaway.SERVER_ENV}="
    "postgresql://USER@HOST:5432/postgres, or run the tests as another user."
)


def _answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


def _say(config: pytest.Config, line: str) -> None:
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else nullcontext():
        print(line, flush=True)


def _choose_server(config: pytest.Config) -> str:
    """The server's URL; it is exported as WRITEGATE_TEST_SERVER_URL, so that the kit's
    `writegate_database` and every child process use the same one."""
    url = os.environ.get(throwaway.SERVER_ENV, "").strip()
    if not url and _answers(LOCAL_SERVER_URL):
        url = LOCAL_SERVER_URL
    if not url:
        if os.geteuid() == 0:
            pytest.exit(NO_SERVER_AS_ROOT, returncode=pytest.ExitCode.USAGE_ERROR)
        try:
            url = embedded_server_url(notify=lambda _: None)  # the line below says it
        except DatabaseUnavailable as err:
            pytest.exit(str(err), returncode=pytest.ExitCode.USAGE_ERROR)
        _say(config, f"tests: no PostgreSQL answered at 127.0.0.1:5432 and "
             f"{throwaway.SERVER_ENV} is not set: using the embedded PostgreSQL, data "
             f"in {embedded_data_dir()}")  # fmt: skip
    os.environ[throwaway.SERVER_ENV] = url
    return url


def pytest_collection_finish(session: pytest.Session) -> None:
    # Chosen before the first test runs: as root with no server, nothing runs at all.
    if any(SERVER_FIXTURES & set(getattr(item, "fixturenames", ())) for item in session.items):
        session.config.stash[_SERVER] = _choose_server(session.config)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Under CI=true every system package is installed: a skip for one fails."""
    outcome = yield
    fail_on_ci(outcome.get_result())


@pytest.fixture(scope="session")
def test_server_url(request: pytest.FixtureRequest) -> str:
    """Maintenance-database URL of the server that test databases live on."""
    stash = request.config.stash
    if _SERVER not in stash:  # a test that needs it indirectly, through a plugin
        stash[_SERVER] = _choose_server(request.config)
    return stash[_SERVER]


@pytest.fixture(scope="session")
def create_database(test_server_url: str) -> Iterator[Callable[[], str]]:
    """Factory: each call makes a new empty database and returns its URL.

    All of them are dropped when the session ends.
    """
    created: list[str] = []

    def _create() -> str:
        created.append(throwaway.create_database(test_server_url, "writegate_test"))
        return created[-1]

    yield _create

    for url in created:
        throwaway.drop_database(test_server_url, url)


@pytest.fixture(scope="session")
def database_url(create_database: Callable[[], str]) -> str:
    """URL of a fresh database with every table the demo application uses: writegate's,
    LangGraph's checkpoints, the HTTP service's and the demo domain's."""
    url = create_database()
    setup_app(url)
    return url


@pytest.fixture(scope="session")
def pool(database_url: str) -> Iterator[Pool]:
    """Pool on ``database_url``: autocommit connections with dict rows."""
    p = open_pool(database_url)
    yield p
    p.close()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Debian's Chromium under Playwright, once per test module. The Sync API runs an
    event loop in this thread while it is open: one at a time, and closed with the module
    so that later tests may run their own (`asyncio.run`)."""
    from playwright.sync_api import sync_playwright

    from tests.system_packages import CHROMIUM, CHROMIUM_ARGS, browser_missing

    reason = browser_missing()
    if reason:
        pytest.skip(reason)
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()
