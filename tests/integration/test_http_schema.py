"""The OpenAPI document is accurate: schemathesis against the live app finds no 5xx
and no response that breaks the schema (status codes, content types, bodies, auth)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from writegate.surfaces.web import Settings, create_app
from writegate.surfaces.web.services import Services
from writegate.graph.runtime import Runtime
from tests.integration.http_fixtures import make_key, seeded_database

# Small on purpose: every operation is exercised, and the whole run stays well under 60 s.
EXAMPLES_PER_OPERATION = 12

# The schema is read at import time, before any database exists; the fixture below
# gives this same app its runtime, so the cases run against the real service.
APP = create_app(settings=Settings())
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@pytest.fixture(scope="module")
def auth_headers(create_database: Callable[[], str]) -> Iterator[dict[str, str]]:
    url = seeded_database(create_database)
    runtime = Runtime.open(url, setup=False)
    APP.state.wg = Services.build(runtime, Settings())
    yield {"Authorization": "Bearer " + make_key(url, "user_42", roles=("approver",))}
    del APP.state.wg
    runtime.close()


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_api_matches_its_openapi_document(case: Any, auth_headers: dict[str, str]) -> None:
    case.call_and_validate(headers=auth_headers)
