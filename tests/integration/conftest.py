"""Fixtures shared by the HTTP service tests: a seeded database per module, and the
app in process on it (a module may define its own `url` or `client` instead)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient

from tests.integration.http_fixtures import seeded_database
from writegate.graph.demo import open_demo
from writegate.surfaces.web import create_app


@pytest.fixture(scope="module")
def url(create_database: Callable[[], str]) -> str:
    return seeded_database(create_database)


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[TestClient]:
    runtime = open_demo(url, setup=False)
    with TestClient(create_app(runtime)) as test_client:
        yield test_client
    runtime.close()
