"""Over MCP, the last approval finishes the write too: a ¥6,000 refund (the shipped
policy's second-approver tier) is proposed and confirmed, the amount re-typed, in the
requester's MCP session; a second approver (user_7, `writegate approve`, its own
process) approves it, and that approval runs the refund, once, counted at the
provider's own table. The requester's session, asking again, reads the receipt; asking
once more runs nothing. A declined or an expired second approval runs nothing, and the
requester's session is told which.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import mcp_types as types
import psycopg
import pytest
from psycopg.rows import dict_row

from tests.integration.http_fixtures import seeded_database
from tests.integration.mcp_helpers import REPO, Person, refunds_at_provider, server_env
from tests.integration.mcp_helpers import stdio_session as requester_session
from writegate.demo.seed import create_demo_order

REQUEST = "request_refund_order_confirmation"
AMOUNT = 600_000  # ¥6,000.00
SHOWN = "¥6,000.00"
EXPIRE_SQL = """
UPDATE writegate.proposals SET expires_at = now() - interval '1 second'
WHERE proposal_id = %s"""
EXECUTIONS_SQL = "SELECT count(*) AS n FROM writegate.executions WHERE proposal_id = %s"


@pytest.fixture(scope="module")
def mcp_db(create_database: Callable[[], str]) -> str:
    return seeded_database(create_database)


@pytest.fixture
def db(mcp_db: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(mcp_db, autocommit=True, row_factory=dict_row) as conn:
        yield conn


def retype(_: types.ElicitRequestParams) -> types.ElicitResult:
    """The requester ticks the box and re-types the amount as the preview shows it."""
    return types.ElicitResult(action="accept", content={"confirm": True, "retyped": SHOWN})


def big_refund(db: psycopg.Connection[Any]) -> dict[str, Any]:
    order_id = create_demo_order(db, "user_42", "CNY", AMOUNT)
    reason = f"lost parcel {secrets.token_hex(4)}"
    return {"order_id": order_id, "amount_minor": AMOUNT, "currency": "CNY", "reason": reason}


def second_approver(url: str, proposal_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """`writegate approve` as user_7, an approver of the same tenant, in its own process."""
    cmd = [sys.executable, "-m", "writegate", "approve", proposal_id]
    cmd += ["--user", "user_7", "--tenant", "tenant_hz", "--yes", *extra]
    env = {**os.environ, **server_env(url)}
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def body(result: types.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict), result.content
    return {**result.structured_content, "is_error": result.is_error}


def requester_then_approver(
    url: str, args: dict[str, Any], approver: Callable[[str], Any]
) -> tuple[dict[str, Any], Any, dict[str, Any], dict[str, Any], Person]:
    """In one MCP session: propose and confirm; then the approver acts (outside the
    session); then the session asks twice more with the same arguments."""
    person = Person(retype)

    async def scenario() -> tuple[dict[str, Any], Any, dict[str, Any], dict[str, Any]]:
        async with requester_session(url, "user_42", person=person) as (session, _):
            waiting = body(await session.call_tool(REQUEST, args))
            decided = approver(waiting["proposal_id"])
            then = body(await session.call_tool(REQUEST, args))
            again = body(await session.call_tool(REQUEST, args))
            return waiting, decided, then, again

    return (*anyio.run(scenario), person)


def ran_nothing_and_told(
    db: psycopg.Connection[Any],
    args: dict[str, Any],
    waiting: dict[str, Any],
    answers: list[dict[str, Any]],
    code: str,
) -> None:
    """Nothing ran, and each later call in the requester's session says how it ended."""
    assert waiting["status"] == "awaiting_second_approval"
    for answer in answers:
        assert answer["is_error"] and answer["code"] == code, answer
        assert answer["retryable"] is False
        assert answer["details"]["proposal_id"] == waiting["proposal_id"]
    assert refunds_at_provider(db, args["order_id"]) == 0
    executions = db.execute(EXECUTIONS_SQL, (waiting["proposal_id"],)).fetchone()
    assert executions is not None and executions["n"] == 0


def test_the_second_approval_runs_the_write_once_and_the_mcp_side_reads_the_receipt(
    mcp_db: str, db: psycopg.Connection[Any]
) -> None:
    args = big_refund(db)

    def approve(proposal_id: str) -> subprocess.CompletedProcess[str]:
        assert refunds_at_provider(db, args["order_id"]) == 0  # confirming ran nothing
        return second_approver(mcp_db, proposal_id)

    waiting, approved, then, again, person = requester_then_approver(mcp_db, args, approve)
    assert waiting["status"] == "awaiting_second_approval" and not waiting["is_error"]
    assert "confirmation_token" not in waiting
    assert len(person.shown) == 1 and SHOWN in person.shown[0]
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert "executed" in approved.stdout
    assert refunds_at_provider(db, args["order_id"]) == 1  # the approval ran it, once
    assert then["status"] == "executed" and not then["is_error"]
    assert then["proposal_id"] == waiting["proposal_id"]
    assert then["receipt"]["status"] == "succeeded"
    assert then["receipt"]["result"]["amount_minor"] == AMOUNT
    assert again["receipt"] == then["receipt"]  # asking again reads the same receipt
    assert len(person.shown) == 1  # nobody is asked again
    assert refunds_at_provider(db, args["order_id"]) == 1
    executions = db.execute(EXECUTIONS_SQL, (waiting["proposal_id"],)).fetchone()
    assert executions is not None and executions["n"] == 1


def test_a_declined_second_approval_runs_nothing_and_the_mcp_side_is_told(
    mcp_db: str, db: psycopg.Connection[Any]
) -> None:
    args = big_refund(db)

    def decline(proposal_id: str) -> subprocess.CompletedProcess[str]:
        return second_approver(mcp_db, proposal_id, "--decline")

    waiting, declined, then, again, _ = requester_then_approver(mcp_db, args, decline)
    assert declined.returncode == 0, declined.stdout + declined.stderr
    ran_nothing_and_told(db, args, waiting, [then, again], "declined")


def test_an_expired_second_approval_runs_nothing_and_the_mcp_side_is_told(
    mcp_db: str, db: psycopg.Connection[Any]
) -> None:
    args = big_refund(db)

    def too_late(proposal_id: str) -> subprocess.CompletedProcess[str]:
        db.execute(EXPIRE_SQL, (proposal_id,))  # its time for a second approval is up
        return second_approver(mcp_db, proposal_id)

    waiting, refused, then, again, _ = requester_then_approver(mcp_db, args, too_late)
    assert refused.returncode == 1 and "proposal_expired" in refused.stdout
    ran_nothing_and_told(db, args, waiting, [then, again], "proposal_expired")
