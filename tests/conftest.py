"""Shared fixtures: throwaway PostgreSQL databases and a pool on them.

Each test session creates its own databases named ``writegate_test_<hex>`` on
the server given by ``WRITEGATE_TEST_SERVER_URL`` (default: local postgres
over TCP) and drops exactly those at the end; no other database is touched.
Tests under ``tests/integration`` are marked ``integration`` automatically.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from writegate.checkpoints.database import describe_database, with_database
from writegate.checkpoints.migrate import setup_database
from writegate.checkpoints.pool import Pool, open_pool

DEFAULT_TEST_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
_INTEGRATION_DIR = Path(__file__).parent / "integration"

_CREATE_DATABASE = "CREATE DATABASE {}"
_DROP_DATABASE = "DROP DATABASE IF EXISTS {} WITH (FORCE)"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _INTEGRATION_DIR in item.path.parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def test_server_url() -> str:
    """Maintenance-database URL of the server that test databases live on."""
    return os.environ.get("WRITEGATE_TEST_SERVER_URL", "").strip() or DEFAULT_TEST_SERVER_URL


@pytest.fixture(scope="session")
def create_database(test_server_url: str) -> Iterator[Callable[[], str]]:
    """Factory: each call makes a new empty database and returns its URL.

    All of them are dropped when the session ends.
    """
    created: list[str] = []

    def _admin() -> psycopg.Connection[tuple[object, ...]]:
        try:
            return psycopg.connect(test_server_url, autocommit=True, connect_timeout=5)
        except psycopg.OperationalError as err:
            raise RuntimeError(
                f"Test PostgreSQL at {describe_database(test_server_url)} is unreachable; "
                f"start it or set WRITEGATE_TEST_SERVER_URL ({err})"
            ) from err

    def _create() -> str:
        name = f"writegate_test_{secrets.token_hex(6)}"
        with _admin() as conn:
            conn.execute(sql.SQL(_CREATE_DATABASE).format(sql.Identifier(name)))
        created.append(name)
        return with_database(test_server_url, name)

    yield _create

    if created:
        with _admin() as conn:
            for name in created:
                conn.execute(sql.SQL(_DROP_DATABASE).format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def database_url(create_database: Callable[[], str]) -> str:
    """URL of a fresh database with writegate's schema and LangGraph's checkpointer tables."""
    url = create_database()
    setup_database(url)
    return url


@pytest.fixture(scope="session")
def pool(database_url: str) -> Iterator[Pool]:
    """Pool on ``database_url``: autocommit connections with dict rows."""
    p = open_pool(database_url)
    yield p
    p.close()
