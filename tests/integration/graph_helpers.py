"""Shared helpers for the graph scenario tests (resume, parallel, restart, ChatOpenAI).

One database per test module: `open_graph_runtime` makes it, applies the schema, seeds
the demo data and opens a `Runtime` on it. Tests that count effects insert their own
order (`new_order`) and use their own thread ids, so they never see each other's rows.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Interrupt

from tests.app_db import setup_app
from writegate.demo.provider import SimulatedProvider
from writegate.demo.runtime import open_demo
from writegate.demo.seed import DEMO_TENANT, seed_demo
from writegate.graph.build import build_graph
from writegate.graph.scripted import ScriptedChatModel
from writegate.runtime.wiring import Runtime

INSERT_ORDER_SQL = """
INSERT INTO orders (order_id, tenant_id, user_id, currency, payable_minor, shipping_address)
VALUES (%s, %s, %s, %s, %s, '')
"""
DB_NOW_SQL = "SELECT now() AS now"
SELECT_ORDER_SQL = "SELECT refunded_minor, version FROM orders WHERE order_id = %s"
SELECT_PROPOSALS_SQL = """
SELECT proposal_id, status, args, superseded_by, expires_at FROM writegate.proposals
WHERE thread_id = %s ORDER BY created_at, proposal_id
"""
COUNT_TOKENS_SQL = """
SELECT count(*) AS n FROM writegate.tokens t JOIN writegate.proposals p USING (proposal_id)
WHERE p.thread_id = %s
"""
COUNT_TICKETS_SQL = "SELECT count(*) AS n FROM tickets WHERE tenant_id = %s AND title = %s"
SELECT_PROVIDER_AMOUNTS_SQL = """
SELECT amount_minor FROM provider.refunds WHERE order_id = %s ORDER BY created_at
"""

OWNER = "user_42"


@contextmanager
def open_graph_runtime(create_database: Callable[[], str], **options: Any) -> Iterator[Runtime]:
    """A fresh database with schema and demo data, and a Runtime on it."""
    url = create_database()
    setup_app(url)
    runtime = open_demo(url, setup=False, **options).runtime
    try:
        with runtime.pool.connection() as conn:
            seed_demo(conn)
        yield runtime
    finally:
        runtime.close()


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(5)}"


def config(thread_id: str, user_id: str = OWNER, tenant_id: str = DEMO_TENANT) -> RunnableConfig:
    """The host's run config: identity comes from here, never from the model or a resume."""
    return {"configurable": {"thread_id": thread_id, "user_id": user_id, "tenant_id": tenant_id}}


def new_order(
    runtime: Runtime, user_id: str = OWNER, payable_minor: int = 19900, currency: str = "CNY"
) -> str:
    """An order of this test's own, so effect counts and balances are this test's alone."""
    order_id = new_id("ord")
    with runtime.pool.connection() as conn:
        conn.execute(INSERT_ORDER_SQL, (order_id, DEMO_TENANT, user_id, currency, payable_minor))
    return order_id


def refund_call(
    order_id: str, amount_minor: int = 19900, call_id: str | None = None, **extra: Any
) -> dict[str, Any]:
    args = {"order_id": order_id, "amount_minor": amount_minor, "currency": "CNY"}
    return {
        "name": "refund_order",
        "args": {**args, "reason": "arrived broken", **extra},
        "id": call_id or new_id("call"),
        "type": "tool_call",
    }


def ticket_call(title: str, call_id: str | None = None) -> dict[str, Any]:
    args = {"title": title, "description": "opened by the graph tests"}
    return {"name": "create_ticket", "args": args, "id": call_id or new_id("call")}


def scripted(*turns: list[dict[str, Any]] | str) -> ScriptedChatModel:
    """A model that answers with these turns in order: a list of tool calls, or text."""
    replies = [
        AIMessage(content=turn) if isinstance(turn, str) else AIMessage("", tool_calls=turn)
        for turn in turns
    ]
    return ScriptedChatModel(script=replies)


def scripted_graph(runtime: Runtime, *turns: list[dict[str, Any]] | str) -> Any:
    """The real graph, with the Postgres checkpointer, driven by a scripted model."""
    return build_graph(runtime, model=scripted(*turns), checkpointer=runtime.checkpointer)


def interrupts(out: dict[str, Any]) -> list[Interrupt]:
    return list(out.get("__interrupt__", []))


def only_interrupt(out: dict[str, Any]) -> Interrupt:
    pending = interrupts(out)
    assert len(pending) == 1, f"expected one pending approval, got {len(pending)}"
    return pending[0]


def confirm(proposal_id: str) -> dict[str, Any]:
    return {"action": "confirm", "proposal_id": proposal_id}


def tool_messages(out: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in out["messages"] if isinstance(m, ToolMessage)]


def tool_content(message: ToolMessage) -> dict[str, Any]:
    """A tool result's JSON content: a result with "status" or an error with "code"."""
    body = json.loads(str(message.content))
    assert isinstance(body, dict)
    return body


def refunds_at_provider(runtime: Runtime, order_id: str) -> int:
    """How many refunds for this order reached the payment provider."""
    return SimulatedProvider(pool=runtime.pool).count_refunds(order_id)


def provider_amounts(runtime: Runtime, order_id: str) -> list[int]:
    with runtime.pool.connection() as conn:
        rows = conn.execute(SELECT_PROVIDER_AMOUNTS_SQL, (order_id,)).fetchall()
    return [row["amount_minor"] for row in rows]


def tickets_titled(runtime: Runtime, title: str) -> int:
    """How many tickets with this title exist: the ticket tool's effect, counted."""
    with runtime.pool.connection() as conn:
        row = conn.execute(COUNT_TICKETS_SQL, (DEMO_TENANT, title)).fetchone()
    return int(row["n"]) if row else 0


def db_now(runtime: Runtime) -> datetime:
    """The database server's clock, which judges every expiry."""
    with runtime.pool.connection() as conn:
        row = conn.execute(DB_NOW_SQL).fetchone()
    assert row is not None
    return row["now"]


def refunded_minor(runtime: Runtime, order_id: str) -> int:
    with runtime.pool.connection() as conn:
        row = conn.execute(SELECT_ORDER_SQL, (order_id,)).fetchone()
    assert row is not None
    return int(row["refunded_minor"])


def proposals(runtime: Runtime, thread_id: str) -> list[dict[str, Any]]:
    """The ledger's proposals for a thread, oldest first."""
    with runtime.pool.connection() as conn:
        return list(conn.execute(SELECT_PROPOSALS_SQL, (thread_id,)).fetchall())


def statuses(runtime: Runtime, thread_id: str) -> list[str]:
    return [row["status"] for row in proposals(runtime, thread_id)]


def tokens_issued(runtime: Runtime, thread_id: str) -> int:
    with runtime.pool.connection() as conn:
        row = conn.execute(COUNT_TOKENS_SQL, (thread_id,)).fetchone()
    return int(row["n"]) if row else 0


def start_refund(
    runtime: Runtime, thread_id: str, order_id: str, amount_minor: int = 19900
) -> tuple[Any, Interrupt]:
    """Run one refund request up to its approval; the model then answers "done"."""
    graph = scripted_graph(runtime, [refund_call(order_id, amount_minor)], "done")
    out = graph.invoke({"messages": [HumanMessage(f"refund {order_id}")]}, config(thread_id))
    return graph, only_interrupt(out)
