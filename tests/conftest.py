"""Shared fixtures: throwaway PostgreSQL databases and a pool on them.

Each test session creates its own databases named ``writegate_test_<hex>`` on
the server given by ``WRITEGATE_TEST_SERVER_URL`` (default: local postgres
over TCP, whatever DATABASE_URL says: tests set that themselves) and drops exactly
those at the end; no other database is touched.
Tests under ``tests/integration`` are marked ``integration`` automatically.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.app_db import setup_app
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


@pytest.fixture(scope="session")
def test_server_url() -> str:
    """Maintenance-database URL of the server that test databases live on."""
    return os.environ.get(throwaway.SERVER_ENV, "").strip() or LOCAL_SERVER_URL


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
