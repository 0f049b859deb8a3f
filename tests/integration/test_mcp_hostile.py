"""Hostile text over MCP: control characters, lone surrogates and deep nesting in tool
arguments are refused as structured validation_failed results, before any row is
written, and the session goes on working afterwards. (A lone surrogate cannot travel
over MCP: the SDK refuses to encode one, and the server's transport to decode one.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anyio
import psycopg
import pytest
from psycopg.rows import dict_row

from tests.app_db import setup_app
from tests.integration.mcp_helpers import Person, accept, refunds_at_provider, stdio_session
from tests.integration.test_mcp import EXECUTE, REQUEST, execute_args, failed, ok, refund
from writegate.demo.seed import seed_demo

COUNT_PROPOSALS_SQL = "SELECT count(*) AS n FROM writegate.proposals"


@pytest.fixture(scope="module")
def mcp_db(create_database: Callable[[], str]) -> str:
    url = create_database()
    setup_app(url)
    with psycopg.connect(url) as conn:
        seed_demo(conn)
    return url


@pytest.fixture
def db(mcp_db: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(mcp_db, autocommit=True, row_factory=dict_row) as conn:
        yield conn


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def _hostile_calls() -> list[tuple[str, dict[str, Any]]]:
    return [
        (REQUEST, {**refund(), "reason": "broken\u0000"}),
        (REQUEST, {**refund(), "reason": "\u001b[1A\u001b[2Kamount: 6.00"}),
        (REQUEST, {**refund(), "reason": _nested(100)}),  # the SDK sends at most ~250
        (REQUEST, {**refund(), "client_request_id": "id\u0000"}),
        ("get_order", {"order_id": "ord_1001\u0000"}),
        (EXECUTE, {"proposal_id": "prop\u0000", "confirmation_token": "wgt_x"}),
    ]


def test_hostile_arguments_are_refused_and_the_session_goes_on(
    mcp_db: str, db: psycopg.Connection[Any]
) -> None:
    proposals_before = db.execute(COUNT_PROPOSALS_SQL).fetchone()["n"]
    refunds_before = refunds_at_provider(db)

    async def scenario() -> tuple[list[dict[str, Any]], int, dict[str, Any]]:
        async with stdio_session(mcp_db, "user_42", person=Person(accept)) as (session, _):
            refused = [failed(await session.call_tool(n, a)) for n, a in _hostile_calls()]
            between = db.execute(COUNT_PROPOSALS_SQL).fetchone()["n"]
            confirmed = ok(await session.call_tool(REQUEST, refund()))
            done = ok(await session.call_tool(EXECUTE, execute_args(confirmed)))
            return refused, between, done

    refused, between, done = anyio.run(scenario)
    assert [body["code"] for body in refused] == ["validation_failed"] * len(refused)
    assert between == proposals_before  # nothing was proposed for any of them
    assert done["status"] == "succeeded"
    assert refunds_at_provider(db) == refunds_before + 1
