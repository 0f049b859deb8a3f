"""The MCP server with real SDK clients, over stdio and streamable HTTP, on a real PostgreSQL.

One fresh database (seeded demo) for the module and one HTTP server process; each
stdio test spawns its own `writegate mcp` process. Refunds are small and carry a
unique reason, so every test has its own proposals; the provider's own table
(`provider.refunds`) counts what really left the building.
"""

from __future__ import annotations

import secrets
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import mcp_types as types
import psycopg
import pytest
from mcp import Client
from psycopg.rows import dict_row

from tests.app_db import setup_app
from tests.demo_registry import default_registry
from tests.integration.mcp_helpers import (
    Person,
    accept,
    cancel,
    cli_confirm,
    decline,
    free_port,
    http_session,
    http_transport,
    refunds_at_provider,
    start_http_server,
    stdio_session,
)
from writegate.demo.seed import seed_demo
from writegate.surfaces.store.keys import create_key, revoke_key

REQUEST = "request_refund_order_confirmation"
EXECUTE = "execute_confirmed_refund_order"
WRITES = ("refund_order", "create_ticket", "update_ticket", "close_tickets")
READS = ("get_order", "list_orders", "get_ticket", "list_tickets")
ERROR_KEYS = {"code", "message", "retryable", "request_id"}


@pytest.fixture(scope="module")
def mcp_db(create_database: Callable[[], str]) -> str:
    url = create_database()
    setup_app(url)
    with psycopg.connect(url) as conn:
        seed_demo(conn)
    return url


@pytest.fixture(scope="module")
def http_url(mcp_db: str) -> Iterator[str]:
    port = free_port()
    proc = start_http_server(mcp_db, port)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def db(mcp_db: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(mcp_db, autocommit=True, row_factory=dict_row) as conn:
        yield conn


def refund(amount: int = 100) -> dict[str, Any]:
    reason = f"damaged in transit {secrets.token_hex(4)}"
    return {"order_id": "ord_1001", "amount_minor": amount, "currency": "CNY", "reason": reason}


def ok(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.structured_content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def failed(result: types.CallToolResult) -> dict[str, Any]:
    assert result.is_error, result.structured_content
    body = result.structured_content
    assert isinstance(body, dict) and set(body) >= ERROR_KEYS
    text = result.content[0].text if isinstance(result.content[0], types.TextContent) else ""
    assert "Traceback" not in text
    return body


def execute_args(confirmed: dict[str, Any]) -> dict[str, Any]:
    return {
        "proposal_id": confirmed["proposal_id"],
        "confirmation_token": confirmed["confirmation_token"],
    }


def test_lists_read_tools_and_a_confirmation_pair_per_write(mcp_db: str) -> None:
    async def scenario() -> list[types.Tool]:
        async with stdio_session(mcp_db, "user_42") as (session, _):
            return (await session.list_tools()).tools

    tools = {tool.name: tool for tool in anyio.run(scenario)}
    registry = default_registry(None)  # type: ignore[arg-type]  # schemas only
    pairs = {f"request_{w}_confirmation" for w in WRITES} | {
        f"execute_confirmed_{w}" for w in WRITES
    }
    assert set(tools) == set(READS) | pairs
    for name in READS:
        assert tools[name].annotations and tools[name].annotations.read_only_hint is True
        assert tools[name].input_schema == registry.get(name).json_schema()
    for name in WRITES:
        asked, run = tools[f"request_{name}_confirmation"], tools[f"execute_confirmed_{name}"]
        assert asked.annotations and asked.annotations.read_only_hint is False
        assert "does NOT execute" in (asked.description or "")
        assert set(registry.get(name).json_schema()["properties"]) < set(
            asked.input_schema["properties"]
        )
        assert run.input_schema["required"] == ["proposal_id", "confirmation_token"]
        assert run.input_schema["additionalProperties"] is False
        assert run.annotations and run.annotations.read_only_hint is False
        assert run.annotations.idempotent_hint is True
    refund_hints = tools[EXECUTE].annotations
    ticket_hints = tools["execute_confirmed_create_ticket"].annotations
    assert refund_hints and refund_hints.destructive_hint and refund_hints.open_world_hint
    assert ticket_hints and not ticket_hints.destructive_hint and not ticket_hints.open_world_hint
    for tool in tools.values():  # identity is never an argument
        assert not {"user_id", "tenant_id", "user", "tenant"} & set(tool.input_schema["properties"])


def test_stdio_request_confirm_execute_and_read_the_receipt(
    mcp_db: str, db: psycopg.Connection[Any]
) -> None:
    person, args = Person(accept), refund(100)
    before = refunds_at_provider(db)

    async def scenario() -> tuple[dict[str, Any], ...]:
        async with stdio_session(mcp_db, "user_42", person=person) as (session, _):
            order = ok(await session.call_tool("get_order", {"order_id": "ord_1001"}))
            confirmed = ok(await session.call_tool(REQUEST, args))
            done = ok(await session.call_tool(EXECUTE, execute_args(confirmed)))
            after = ok(await session.call_tool("get_order", {"order_id": "ord_1001"}))
            return order, confirmed, done, after

    order, confirmed, done, after = anyio.run(scenario)
    assert confirmed["status"] == "confirmed" and confirmed["confirmation_token"].startswith("wgt_")
    assert confirmed["args"] == args and confirmed["preview"]["operation"] == "refund_order"
    assert len(person.shown) == 1 and "¥1.00" in person.shown[0]
    assert confirmed["proposal_id"] in person.shown[0]
    assert done["status"] == "succeeded" and done["replayed"] is False
    receipt = done["receipt"]
    assert receipt["execution_id"] == done["execution_id"] and receipt["provider_ref"]
    assert after["refunded_minor"] == order["refunded_minor"] + 100
    assert refunds_at_provider(db) == before + 1
    row = db.execute(
        "SELECT idempotency_key FROM provider.refunds WHERE idempotency_key = %s",
        (receipt["request_key"],),
    ).fetchall()
    assert len(row) == 1


def test_http_request_confirm_execute_and_read_the_receipt(
    http_url: str, db: psycopg.Connection[Any]
) -> None:
    for key in (None, "not-a-key"):
        request = urllib.request.Request(http_url, data=b"{}")
        if key:
            request.add_header("Authorization", f"Bearer {key}")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 401
    person, args = Person(accept), refund(150)
    before = refunds_at_provider(db)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with http_session(http_url, "key-42", person) as (session, _):
            tools = {tool.name for tool in (await session.list_tools()).tools}
            assert {REQUEST, EXECUTE} <= tools
            confirmed = ok(await session.call_tool(REQUEST, args))
            return confirmed, ok(await session.call_tool(EXECUTE, execute_args(confirmed)))

    confirmed, done = anyio.run(scenario)
    assert len(person.shown) == 1 and "¥1.50" in person.shown[0]
    assert done["status"] == "succeeded" and done["receipt"]["result"]["amount_minor"] == 150
    assert done["receipt"]["request_key"].endswith(confirmed["proposal_id"])
    assert refunds_at_provider(db) == before + 1


def test_tokens_are_bound_to_user_arguments_and_session(
    http_url: str, db: psycopg.Connection[Any]
) -> None:
    first, second = refund(110), refund(120)
    before = refunds_at_provider(db)

    async def scenario() -> dict[str, Any]:
        async with http_session(http_url, "key-42", Person(accept)) as (mine, _):
            a = ok(await mine.call_tool(REQUEST, first))
            b = ok(await mine.call_tool(REQUEST, second))
            async with http_session(http_url, "key-7", Person(accept)) as (theirs, _):
                other_user = failed(await theirs.call_tool(EXECUTE, execute_args(a)))
            other_args = failed(
                await mine.call_tool(
                    EXECUTE,
                    {
                        "proposal_id": b["proposal_id"],
                        "confirmation_token": a["confirmation_token"],
                    },
                )
            )
            async with http_session(http_url, "key-42") as (elsewhere, _):
                other_session = failed(await elsewhere.call_tool(EXECUTE, execute_args(a)))
            mid = refunds_at_provider(db)
            done = ok(await mine.call_tool(EXECUTE, execute_args(a)))
            return {
                "other_user": other_user,
                "other_args": other_args,
                "other_session": other_session,
                "mid": mid,
                "done": done,
            }

    seen = anyio.run(scenario)
    assert seen["other_user"]["code"] == "subject_mismatch"
    assert seen["other_args"]["code"] == "args_mismatch"
    assert seen["other_session"]["code"] == "session_mismatch"
    assert seen["mid"] == before  # nothing ran for any refused attempt
    assert seen["done"]["status"] == "succeeded"  # and none of them used the token up
    assert refunds_at_provider(db) == before + 1


def test_retries_with_new_jsonrpc_ids_get_the_same_proposal_and_execution(
    mcp_db: str, db: psycopg.Connection[Any]
) -> None:
    person, args = Person(accept), refund(130)
    before = refunds_at_provider(db)

    async def scenario() -> tuple[list[dict[str, Any]], list[Any]]:
        async with stdio_session(mcp_db, "user_42", person=person) as (session, writer):
            first = ok(await session.call_tool(REQUEST, args))
            retried = ok(await session.call_tool(REQUEST, args))  # response "lost": ask again
            stale = failed(await session.call_tool(EXECUTE, execute_args(first)))
            done = ok(await session.call_tool(EXECUTE, execute_args(retried)))
            again = ok(await session.call_tool(EXECUTE, execute_args(retried)))
            later = ok(await session.call_tool(REQUEST, args))
            return [first, retried, stale, done, again, later], writer.call_ids

    (first, retried, stale, done, again, later), call_ids = anyio.run(scenario)
    assert len(call_ids) == 6 and len(set(call_ids)) == 6  # every retry had its own id
    assert retried["proposal_id"] == first["proposal_id"]  # ...and still the same request
    assert stale["code"] == "token_replaced"  # a re-confirmation replaces the lost token
    assert again["replayed"] is True and again["receipt"] == done["receipt"]
    assert again["execution_id"] == done["execution_id"]
    assert later["status"] == "executed" and later["proposal_id"] == first["proposal_id"]
    assert later["receipt"] == done["receipt"]
    assert len(person.shown) == 2  # nobody is asked about an executed proposal
    assert refunds_at_provider(db) == before + 1


def test_decline_and_cancel_through_elicitation_are_distinct_and_final(
    mcp_db: str, db: psycopg.Connection[Any]
) -> None:
    person = Person(decline)
    declined_args, cancelled_args = refund(140), refund(160)
    before = refunds_at_provider(db)

    async def scenario() -> list[dict[str, Any]]:
        async with stdio_session(mcp_db, "user_42", person=person) as (session, _):
            declined = failed(await session.call_tool(REQUEST, declined_args))
            declined_again = failed(await session.call_tool(REQUEST, declined_args))
            rethought = {**declined_args, "client_request_id": "second thoughts"}
            declined_anew = failed(await session.call_tool(REQUEST, rethought))
            person.answer = cancel
            cancelled = failed(await session.call_tool(REQUEST, cancelled_args))
            unticked = Person(lambda _: types.ElicitResult(action="accept", content={}))
            person.answer = unticked.answer
            not_ticked = failed(await session.call_tool(REQUEST, refund(170)))
            return [declined, declined_again, declined_anew, cancelled, not_ticked]

    declined, declined_again, declined_anew, cancelled, not_ticked = anyio.run(scenario)
    assert declined["code"] == "declined" and declined["retryable"] is False
    assert "advice" in declined
    assert declined_again["code"] == "declined"
    assert declined_again["details"]["proposal_id"] == declined["details"]["proposal_id"]
    # A new client_request_id is a new request: a new proposal, and the person is asked.
    assert declined_anew["code"] == "declined"
    assert declined_anew["details"]["proposal_id"] != declined["details"]["proposal_id"]
    assert cancelled["code"] == "cancelled" and cancelled["retryable"] is False
    assert not_ticked["code"] == "declined"  # accepting the form without the tick confirms nothing
    assert len(person.shown) == 4  # the same declined request was not asked again
    assert refunds_at_provider(db) == before


def test_a_client_without_elicitation_gets_the_token_from_the_cli(
    mcp_db: str, db: psycopg.Connection[Any]
) -> None:
    args = refund(180)
    before = refunds_at_provider(db)

    async def request_it() -> dict[str, Any]:
        async with stdio_session(mcp_db, "user_42") as (session, _):
            waiting = ok(await session.call_tool(REQUEST, args))
            piped = cli_confirm(mcp_db, waiting["proposal_id"], "user_42", "yes", tty=False)
            assert piped.returncode == 2 and "wgt_" not in piped.stdout
            typed = cli_confirm(mcp_db, waiting["proposal_id"], "user_42", "yes")
            assert typed.returncode == 0, typed.stderr
            assert "¥1.80" in typed.stdout
            token = next(w for w in typed.stdout.split() if w.startswith("wgt_"))
            run = {"proposal_id": waiting["proposal_id"], "confirmation_token": token}
            return {"waiting": waiting, "done": ok(await session.call_tool(EXECUTE, run))}

    seen = anyio.run(request_it)
    waiting = seen["waiting"]
    assert waiting["status"] == "awaiting_confirmation" and "confirmation_token" not in waiting
    assert waiting["confirm_with"].startswith(f"writegate confirm {waiting['proposal_id']}")
    assert seen["done"]["status"] == "succeeded"
    assert refunds_at_provider(db) == before + 1


def test_a_2026_client_confirms_through_input_required_and_retries(
    http_url: str, db: psycopg.Connection[Any]
) -> None:
    person, args = Person(accept), refund(190)
    before = refunds_at_provider(db)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with Client(http_transport(http_url, "key-42"), elicitation_callback=person) as c:
            assert c.protocol_version >= "2026"
            forged = await c.session.call_tool(
                REQUEST,
                refund(200),
                input_responses={
                    "writegate_confirm": types.ElicitResult(
                        action="accept", content={"confirm": True}
                    )
                },
                request_state="forged.state",
                allow_input_required=True,
            )
            assert isinstance(forged, types.CallToolResult)
            confirmed = ok(await c.call_tool(REQUEST, args))
            return (
                failed(forged),
                confirmed,
                ok(await c.call_tool(EXECUTE, execute_args(confirmed))),
            )

    forged, confirmed, done = anyio.run(scenario)
    assert forged["code"] == "invalid_decision"
    assert confirmed["status"] == "confirmed" and len(person.shown) == 1
    assert done["status"] == "succeeded"
    assert refunds_at_provider(db) == before + 1


def test_errors_are_structured_tool_results(mcp_db: str) -> None:
    async def scenario() -> list[dict[str, Any]]:
        async with stdio_session(mcp_db, "user_42", person=Person(accept)) as (session, _):
            return [
                failed(await session.call_tool("drop_tables", {})),
                failed(
                    await session.call_tool("get_order", {"order_id": "ord_1001", "user_id": "x"})
                ),
                failed(await session.call_tool(REQUEST, {**refund(), "tenant_id": "tenant_hz"})),
                failed(await session.call_tool("get_order", {"order_id": "ord_2002"})),
                failed(
                    await session.call_tool(
                        EXECUTE, {"proposal_id": "p", "confirmation_token": "t"}
                    )
                ),
                failed(await session.call_tool(EXECUTE, {"proposal_id": "p"})),
            ]

    codes = [body["code"] for body in anyio.run(scenario)]
    assert codes == [
        "validation_failed",
        "validation_failed",
        "validation_failed",
        "not_found",  # user_7's order looks missing to user_42
        "token_unknown",
        "validation_failed",
    ]


def test_an_api_key_from_the_key_table_authenticates_and_a_revoked_one_does_not(
    http_url: str, db: psycopg.Connection[Any]
) -> None:
    made = create_key(db, "user_7", "tenant_hz")
    revoked = create_key(db, "user_7", "tenant_hz")
    revoke_key(db, revoked.key_id)

    async def whoami() -> dict[str, Any]:
        async with http_session(http_url, made.secret, Person(accept)) as (session, _):
            return ok(await session.call_tool("list_orders", {}))

    orders = anyio.run(whoami)["orders"]
    assert [o["order_id"] for o in orders] == ["ord_2002"]  # user_7's, from the key alone
    request = urllib.request.Request(http_url, data=b"{}")
    request.add_header("Authorization", f"Bearer {revoked.secret}")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401
