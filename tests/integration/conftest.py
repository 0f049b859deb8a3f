"""Fixtures shared by the HTTP service tests: a seeded database per module, and the
app in process on it (a module may define its own `url` or `client` instead)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient
from psycopg.conninfo import conninfo_to_dict

from tests.integration.fault_proxy import FaultProxy
from tests.integration.http_fixtures import seeded_database
from writegate.demo.runtime import open_demo
from writegate.surfaces.web import create_app
from writegate.testing.database import SERVER_ENV


@pytest.fixture(scope="module")
def url(create_database: Callable[[], str]) -> str:
    return seeded_database(create_database)


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[TestClient]:
    runtime = open_demo(url, setup=False).runtime
    with TestClient(create_app(runtime)) as test_client:
        yield test_client
    runtime.close()


@pytest.fixture(scope="session")
def loopback_server(test_server_url: str) -> Iterator[tuple[str, int]]:
    """The test server's TCP address on 127.0.0.1, where a local probe looks: its own,
    or, for a server on a unix socket only (the embedded one), a relay to that socket."""
    params = conninfo_to_dict(test_server_url)
    host = str(params.get("host") or "")
    if params.get("password"):
        pytest.skip(f"{SERVER_ENV} names a password, which a local probe never sends")
    if host in ("127.0.0.1", "localhost"):
        yield host, int(params.get("port") or 5432)
    elif host.startswith("/"):
        relay = FaultProxy(test_server_url)
        yield "127.0.0.1", relay.port
        relay.close()
    else:
        pytest.skip(f"{SERVER_ENV} names a server on another machine, {host}")
