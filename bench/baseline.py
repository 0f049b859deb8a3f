"""The baseline: the approval graph a user would write without writegate.

    START -> agent -(tool calls?)-> approve (interrupt) -> tools (ToolNode) -> agent -> END

`refund_order` does the same domain write as writegate's refund (reserve the amount on
the order and record a pending refund row, in one transaction; then the provider call
under an idempotency key) with no ledger: no proposal, no token, no execution record,
no audit. The approval is whatever the resume value says.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from writegate.checkpoints.pool import Pool
from writegate.demo.provider import ProviderClient
from writegate.demo.refunds import INSERT_REFUND_SQL

# writegate's reservation minus the version guard: the naive tool has no proposal-time
# version to compare with.
RESERVE_SQL = """
UPDATE orders SET refunded_minor = refunded_minor + %s, version = version + 1
WHERE order_id = %s AND tenant_id = %s AND user_id = %s AND currency = %s
  AND refunded_minor + %s <= payable_minor
RETURNING order_id
"""


def refund_tool(
    pool: Pool, provider: ProviderClient, on_domain: Callable[[float], None] | None = None
) -> BaseTool:
    @tool
    def refund_order(
        order_id: str, amount_minor: int, currency: str, reason: str, config: RunnableConfig
    ) -> str:
        """Refund all or part of one of the user's orders to the original payment method."""
        conf = config.get("configurable") or {}
        tenant, user = conf["tenant_id"], conf["user_id"]
        key = f"naive:{uuid.uuid4().hex}"
        started = time.perf_counter()
        with pool.connection() as conn, conn.transaction():
            params = (amount_minor, order_id, tenant, user, currency, amount_minor)
            if conn.execute(RESERVE_SQL, params).fetchone() is None:
                return json.dumps({"status": "error", "message": "not refundable"})
            refund_id = "rfd_" + key[-24:]
            conn.execute(
                INSERT_REFUND_SQL,
                (refund_id, order_id, tenant, amount_minor, currency, reason, key),
            )
        if on_domain is not None:
            on_domain(time.perf_counter() - started)
        answer = provider.refund(
            idempotency_key=key, order_id=order_id, amount_minor=amount_minor, currency=currency
        )
        return json.dumps({"status": "succeeded", "provider_ref": answer["provider_ref"]})

    return refund_order


def build_baseline(
    pool: Pool,
    provider: ProviderClient,
    model: Runnable[Any, Any],
    checkpointer: BaseCheckpointSaver[Any],
    on_domain: Callable[[float], None] | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    def agent(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"], config)]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "approve" if isinstance(last, AIMessage) and last.tool_calls else END

    def approve(state: MessagesState) -> Command[str]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        answer = interrupt({"tool_calls": last.tool_calls})
        if isinstance(answer, dict) and answer.get("action") == "confirm":
            return Command(goto="tools")
        declined = [
            ToolMessage("declined by the user", tool_call_id=call["id"] or "")
            for call in last.tool_calls
        ]
        return Command(goto="agent", update={"messages": declined})

    builder: Any = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("approve", approve, destinations=("tools", "agent"))
    builder.add_node("tools", ToolNode([refund_tool(pool, provider, on_domain)]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["approve", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer, name="baseline")
