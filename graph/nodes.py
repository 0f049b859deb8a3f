"""The parent graph's nodes: agent, router, read, refuse.

A write tool call is a request, never a fact: the router sends each one to its own
`write` task (propose -> approval -> execute, in `graph/gate.py`); read calls
run at once and are audited; the model runs again once every branch has finished.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.graph import END
from langgraph.types import Send

from writegate.approval.canonical import CanonicalizationError, check_input
from writegate.approval.errors import ValidationFailed, WritegateError
from writegate.graph.identity import MissingIdentity, identity_of, thread_of
from writegate.graph.messages import tool_error, tool_result
from writegate.graph.resolve import ends_turn
from writegate.graph.settled import awaiting_news, settled_updates
from writegate.graph.turn import SHARED_ID, turn_refusal, turn_refusals
from writegate.graph.unanswered import Unanswered
from writegate.runtime.wiring import Runtime

__all__ = ["CallNodes", "MissingIdentity", "Nodes", "identity_of", "thread_of"]

# The rules of a write's outcome, for anyone's tools (the demo has its own prompt).
LIBRARY_PROMPT = (
    "You are an assistant with tools. Read tools answer at once. Write tools only PROPOSE "
    "a change: a person sees an exact preview and decides. A write's result tells you what "
    "really happened: a receipt with status 'succeeded', or an error code such as "
    "declined, cancelled, revoked, proposal_expired or outcome_unknown. Never claim a "
    "write happened without a receipt, and never re-propose something the user declined, "
    "an approver revoked, or that is being reconciled."
)


REFUSED_CALLS = "writegate_refused_calls"


def _without_unstorable_args(reply: Any) -> Any:
    """The reply, with every tool call whose arguments have no canonical form emptied.

    A NUL, a lone surrogate or nesting past the bound cannot be checkpointed faithfully
    (or at all), so such arguments never enter the state: the call keeps its id and
    name, its arguments become {}, and the reason is kept for the router to refuse it.
    """
    if not isinstance(reply, AIMessage) or not reply.tool_calls:
        return reply
    refused: dict[str, str] = {}
    calls = []
    for call in reply.tool_calls:
        try:
            check_input(call["args"])
        except CanonicalizationError as bad:
            refused[call["id"] or ""] = bad.message
            call = {**call, "args": {}}
        calls.append(call)
    if not refused:
        return reply
    extra = {**reply.additional_kwargs, REFUSED_CALLS: refused}
    return reply.model_copy(update={"tool_calls": calls, "additional_kwargs": extra})


class CallNodes:
    """Routing and running one model turn's tool calls; the tool node is made of these."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime

    def route(self, state: dict[str, Any]) -> list[Send] | str:
        last = state["messages"][-1]
        if not isinstance(last, AIMessage) or not last.tool_calls:
            return END
        refused = last.additional_kwargs.get(REFUSED_CALLS, {})
        # Unknown names count as writes: propose refuses them with a clear error.
        by_turn = turn_refusals(last.tool_calls, lambda name: not self._is_read(name))
        sends = []
        for call in last.tool_calls:
            if call["id"] in refused:
                sends.append(Send("refuse", {"call": call, "invalid": refused[call["id"]]}))
            elif (why := by_turn.get(call["id"])) == SHARED_ID:
                sends.append(Send("refuse", {"call": call}))
            elif why is not None:
                sends.append(Send("refuse", {"call": call, "twin_of": why}))
            elif self._is_read(call["name"]):
                sends.append(Send("read", {"call": call}))
            else:
                sends.append(Send("write", {"call": call, "message_id": last.id}))
        return sends

    def _is_read(self, name: str) -> bool:
        return name in self.rt.registry and not self.rt.registry.get(name).requires_approval

    def refuse(self, branch: dict[str, Any]) -> dict[str, Any]:
        """Arguments without a canonical form (control characters, lone surrogates,
        nesting too deep) are refused as they are, with the reason; calls sharing an id
        and twin writes as `graph/turn.py` rules."""
        call = branch["call"]
        if branch.get("invalid"):
            exc = ValidationFailed(
                f"invalid arguments for {call['name']}: {branch['invalid']}",
                tool_call_id=call["id"],
            )
        else:
            exc = turn_refusal(call, branch.get("twin_of") or SHARED_ID)
        return {"messages": [tool_error(call["id"], call["name"], exc)]}

    def read(self, branch: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        call = branch["call"]
        identity = identity_of(config, self.rt.server_user)  # none: the run fails, unread
        try:
            result = self.rt.service.read(
                identity,
                call["name"],
                call["args"],
                thread_id=thread_of(config),
            )
            content = result if "status" in result else {"status": "ok", **result}
            message = tool_result(call["id"], call["name"], content)
        except WritegateError as exc:
            message = tool_error(call["id"], call["name"], exc)
        return {"messages": [message]}


class Nodes(CallNodes):
    """The agent graph's nodes: the model, plus the tool calls it makes."""

    def __init__(
        self, runtime: Runtime, model: Runnable[Any, Any], system_prompt: str = LIBRARY_PROMPT
    ) -> None:
        super().__init__(runtime)
        self.model = model
        self.system_prompt = system_prompt
        self.unanswered = Unanswered(runtime)

    def agent(self, state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        # No identity, or one the run may not claim: fail before the model runs.
        identity = identity_of(config, self.rt.server_user)
        if ends_turn(state["messages"]):
            return {}  # marked resolved: the model reads it with the thread's next message
        # Calls a new message left unanswered are answered first (graph/unanswered.py).
        answered = self.unanswered.update(state["messages"], config)
        history = answered[1:] or state["messages"]
        # Writes that were unknown and have been reconciled since: tell the model once.
        news = settled_updates(self.rt.store, identity, awaiting_news(history))
        messages: list[AnyMessage] = [SystemMessage(self.system_prompt), *history, *news]
        reply = self.model.invoke(messages, config)
        return {"messages": [*answered, *news, _without_unstorable_args(reply)]}
