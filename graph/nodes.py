"""The parent graph's nodes: agent, router, read, refuse.

A write tool call is a request, never a fact: the router sends each one to its own
`write` branch (propose -> approval -> execute, in `graph/write_branch.py`); read calls
run at once and are audited; the model runs again once every branch has finished.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.graph import END
from langgraph.types import Send

from writegate.approval.errors import ValidationFailed, WritegateError
from writegate.graph.identity import MissingIdentity, identity_of, thread_of
from writegate.graph.messages import tool_error, tool_result
from writegate.graph.runtime import Runtime
from writegate.graph.settled import settled_updates

__all__ = ["MissingIdentity", "Nodes", "identity_of", "thread_of"]

SYSTEM_PROMPT = (
    "You are a support assistant with tools. Read tools answer at once. Write tools "
    "(refund_order, create_ticket, update_ticket, close_tickets) only PROPOSE a change: a "
    "person sees an "
    "exact preview and decides. A write's result tells you what really happened: a "
    "receipt with status 'succeeded', or an error code such as declined, cancelled, "
    "revoked, proposal_expired or outcome_unknown. Never claim a write happened without a "
    "receipt, and never re-propose something the user declined, an approver revoked, or "
    "that is being reconciled; policy_changed or scope_changed mean: propose it again. "
    "Amounts are integers in minor units with an explicit currency; if the currency is "
    "unclear, ask."
)


def _request_of(call: Mapping[str, Any]) -> str:
    """A write call's name and arguments as one comparable string (key order aside)."""
    return json.dumps([call["name"], call["args"]], sort_keys=True, default=str)


class Nodes:
    def __init__(self, runtime: Runtime, model: Runnable[Any, Any]) -> None:
        self.rt = runtime
        self.model = model

    # -- agent and routing ------------------------------------------------------------

    def agent(self, state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        identity = identity_of(config)  # fail before the model runs if identity is missing
        # Writes that were unknown and have been reconciled since: tell the model once.
        news = settled_updates(self.rt.store, identity, state["messages"])
        messages: list[AnyMessage] = [SystemMessage(SYSTEM_PROMPT), *state["messages"], *news]
        reply = self.model.invoke(messages, config)
        return {"messages": [*news, reply]}

    def route(self, state: dict[str, Any]) -> list[Send] | str:
        last = state["messages"][-1]
        if not isinstance(last, AIMessage) or not last.tool_calls:
            return END
        counts = Counter(call["id"] for call in last.tool_calls)
        writes: dict[str, str | None] = {}  # (name, arguments) -> the first call that asked for it
        sends = []
        for call in last.tool_calls:
            name = call["name"]
            if counts[call["id"]] > 1:
                sends.append(Send("refuse", {"call": call}))
            elif name in self.rt.registry and not self.rt.registry.get(name).requires_approval:
                sends.append(Send("read", {"call": call}))
            elif (same := writes.setdefault(_request_of(call), call["id"])) != call["id"]:
                # The same write twice in one turn: the parallel branches would race for
                # one proposal. Only the first is proposed; the twin is told why not.
                sends.append(Send("refuse", {"call": call, "twin_of": same}))
            else:  # writes, and unknown names (propose refuses them with a clear error)
                sends.append(Send("write", {"call": call}))
        return sends

    def refuse(self, branch: dict[str, Any]) -> dict[str, Any]:
        """Two calls sharing one id would share one approval: refuse them both.

        A second call asking for exactly the same write as an earlier one of its turn is
        refused too; the earlier one carries the request.
        """
        call, twin = branch["call"], branch.get("twin_of")
        if twin:
            exc = ValidationFailed(
                f"the same write was already requested in this turn by call {twin}; "
                "nothing was proposed for this duplicate",
                tool_call_id=call["id"],
                duplicate_of=twin,
            )
        else:
            exc = ValidationFailed(
                "two tool calls in one turn share this id; nothing was proposed for either",
                tool_call_id=call["id"],
            )
        return {"messages": [tool_error(call["id"], call["name"], exc)]}

    def read(self, branch: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        call = branch["call"]
        try:
            result = self.rt.service.read(
                identity_of(config), call["name"], call["args"], thread_id=thread_of(config)
            )
            content = result if "status" in result else {"status": "ok", **result}
            message = tool_result(call["id"], call["name"], content)
        except WritegateError as exc:
            message = tool_error(call["id"], call["name"], exc)
        return {"messages": [message]}
