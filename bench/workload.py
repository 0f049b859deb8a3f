"""One write operation, three ways: the writegate graph, the baseline graph, the ledger alone.

A graph operation is: the model proposes `refund_order` on a fresh order, the graph
pauses at its interrupt, the person confirms with `Command(resume=...)`, the write
executes, and the model answers once more. Both graphs get the same scripted replies
from `ScriptedChatModel` (`writegate.testing`) (two per operation), fed just before each run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Literal

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from writegate.approval.decisions import Confirm
from writegate.approval.models import Identity, Receipt
from writegate.approval.service import Confirmation
from writegate.bench.baseline import build_baseline
from writegate.bench.db import REFUND_AMOUNT, TENANT, USER, Orders
from writegate.bench.langchain_hitl import (
    APPROVE,
    build_langchain_hitl,
    build_writegate_middleware,
)
from writegate.demo.prompt import DEMO_PROMPT
from writegate.demo.provider import ProviderClient
from writegate.demo.runtime import default_provider
from writegate.graph.build import build_graph
from writegate.graph.scripted import ScriptedChatModel
from writegate.runtime.wiring import Runtime

Kind = Literal["baseline", "writegate", "langchain_hitl", "writegate_middleware"]
Durability = Literal["sync", "async", "exit"]
IDENTITY = Identity(USER, TENANT, frozenset())


def refund_args(order_id: str) -> dict[str, Any]:
    return {
        "order_id": order_id,
        "amount_minor": REFUND_AMOUNT,
        "currency": "CNY",
        "reason": "benchmark",
    }


def run_config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "user_id": USER, "tenant_id": TENANT}}


class GraphRunner:
    """Runs write operations through one compiled graph with its own scripted model."""

    def __init__(
        self,
        kind: Kind,
        runtime: Runtime,
        orders: Orders,
        *,
        provider: ProviderClient | None = None,
        checkpointer: BaseCheckpointSaver[Any] | None = None,
        on_domain: Callable[[float], None] | None = None,
    ) -> None:
        self.kind = kind
        self.orders = orders
        self.model = ScriptedChatModel(script=[])
        self.calls = 0
        self.last_cpu = 0.0  # CPU seconds of this whole process during the last operation
        saver = checkpointer or runtime.checkpointer
        # the runtime's own provider when given, else the one `open_demo` chose for it
        provider = provider or default_provider(runtime.pool)
        self.graph: CompiledStateGraph[Any, Any, Any, Any]
        if kind == "writegate":
            self.graph = build_graph(
                runtime, model=self.model, checkpointer=saver, system_prompt=DEMO_PROMPT
            )
        elif kind == "writegate_middleware":
            self.graph = build_writegate_middleware(runtime, provider, self.model, saver)
        elif kind == "langchain_hitl":
            self.graph = build_langchain_hitl(runtime.pool, provider, self.model, saver, on_domain)
        else:
            self.graph = build_baseline(runtime.pool, provider, self.model, saver, on_domain)

    def op(self, thread_id: str, *, durability: Durability = "async", trim: bool = False) -> float:
        """One write operation; returns its wall time in seconds.

        `trim` starts the operation by clearing the thread's messages (the reducer's
        remove-all), as a host does when a long thread starts a new task.
        """
        self.calls += 1
        call_id = f"call_{self.calls}"
        call = {
            "name": "refund_order",
            "args": refund_args(self.orders.take()),
            "id": call_id,
            "type": "tool_call",
        }
        # Only this operation's two replies: a script that kept every earlier one grew
        # with the run, and LangChain's create_agent pays for its length on each call.
        self.model.feed(
            [
                AIMessage(content="", tool_calls=[call]),
                AIMessage(content="The refund went through."),
            ]
        )
        ask: list[Any] = [RemoveMessage(id=REMOVE_ALL_MESSAGES)] if trim else []
        ask.append(HumanMessage("Please refund my order."))
        config: Any = run_config(thread_id)
        started, cpu = time.perf_counter(), time.process_time()
        out = self.graph.invoke({"messages": ask}, config, durability=durability)
        out = self.graph.invoke(Command(resume=self._confirm(out)), config, durability=durability)
        elapsed = time.perf_counter() - started
        self.last_cpu = time.process_time() - cpu
        self._check(out, call_id)
        return elapsed

    def _confirm(self, out: dict[str, Any]) -> dict[str, Any]:
        (pending,) = out["__interrupt__"]
        if self.kind in ("writegate", "writegate_middleware"):
            return {"action": "confirm", "proposal_id": pending.value["proposal_id"]}
        if self.kind == "langchain_hitl":
            return dict(APPROVE)
        return {"action": "confirm"}

    @staticmethod
    def _check(out: dict[str, Any], call_id: str) -> None:
        """Every timed operation must really have refunded; a benchmark of failures is noise."""
        results = [
            m for m in out["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == call_id
        ]
        status = json.loads(str(results[-1].content)).get("status") if results else None
        if status != "succeeded":
            raise RuntimeError(f"a benchmark operation did not succeed: {results[-1:]}")


def _propose(runtime: Runtime, orders: Orders, thread_id: str) -> str:
    proposal = runtime.service.propose(
        IDENTITY,
        thread_id=thread_id,
        tool_call_id="call_1",
        tool_name="refund_order",
        raw_args=refund_args(orders.take()),
    )
    return proposal.proposal_id


def ledger_op(runtime: Runtime, orders: Orders, thread_id: str) -> float:
    """The protocol without LangGraph, as server-side code that takes the confirm runs
    it: propose; confirm and execute in one transaction; record. Returns seconds."""
    started = time.perf_counter()
    confirm = Confirm(action="confirm", proposal_id=_propose(runtime, orders, thread_id))
    receipt = runtime.executor.confirm(IDENTITY, confirm, "refund_order")
    elapsed = time.perf_counter() - started
    if not isinstance(receipt, Receipt) or receipt.status != "succeeded":
        raise RuntimeError(f"a ledger operation did not succeed: {receipt}")
    return elapsed


def token_ledger_op(runtime: Runtime, orders: Orders, thread_id: str) -> float:
    """The same with the token presented, as HTTP and MCP clients do: the confirm
    returns the secret to the client, so it commits on its own. Returns seconds."""
    started = time.perf_counter()
    proposal_id = _propose(runtime, orders, thread_id)
    decided = runtime.service.decide(IDENTITY, Confirm(action="confirm", proposal_id=proposal_id))
    assert isinstance(decided, Confirmation)
    receipt = runtime.executor.execute(
        IDENTITY, decided.token, proposal_id=proposal_id, operation="refund_order"
    )
    elapsed = time.perf_counter() - started
    if receipt.status != "succeeded":
        raise RuntimeError(f"a ledger operation did not succeed: {receipt}")
    return elapsed
