"""`wg.middleware()`: writegate as a LangChain v1 `AgentMiddleware` for `create_agent`.

    agent = create_agent(model, tools=[send_email, lookup], middleware=[wg.middleware()],
                         checkpointer=wg.checkpointer)

`create_agent` runs each tool call of a turn in its own task and passes it through
`wrap_tool_call`. A write goes through the same gate as `wg.tool_node()` (propose,
`interrupt()` with the preview, execute through the ledger), so the interrupt value and
the answers it takes are the same; the handler is never called for a write, because
only writegate's executor runs the tool's function, with its request key. Reads the
Writegate knows run audited; other tools pass to the handler unless they are write
tools, which never run unapproved. Calls sharing an id, and the same write twice in one
turn, are refused by the tool node's own rule (graph/turn.py). Around each model call
the run's identity is checked (the run fails before the model runs without one) and
writes reconciled since the last turn are reported to the model once.

This module imports LangChain (the `[langchain]` extra); `writegate.graph.writegate`
imports it only when `middleware()` is called.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
)
from langchain_core.messages import AIMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config
from langgraph.types import Command

from writegate.approval.errors import Unprotected
from writegate.graph.gate import WriteGate
from writegate.graph.identity import identity_of
from writegate.graph.messages import tool_error
from writegate.graph.nodes import CallNodes
from writegate.graph.runtime import Runtime
from writegate.graph.settled import awaiting_news, settled_updates
from writegate.graph.turn import turn_refusal, turn_refusals
from writegate.tools.kit import GuardedTool

Result = ToolMessage | Command[Any]


def _told(news: list[SystemMessage], response: ModelResponse | AIMessage) -> ModelResponse:
    """The model's answer with the notes it was shown, kept ahead of it in the thread."""
    if isinstance(response, AIMessage):
        return ModelResponse(result=[*news, response])
    return ModelResponse(
        result=[*news, *response.result], structured_response=response.structured_response
    )


class WritegateMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Writes behind writegate's gate, reads audited, inside `create_agent`'s tool node."""

    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self.rt = runtime
        self.gate = WriteGate(runtime)
        self.calls = CallNodes(runtime)

    @property
    def name(self) -> str:
        return "writegate"

    # -- around each model call ---------------------------------------------------
    # In `wrap_model_call`, not `before_model`: a before-model hook is a graph node of
    # its own, a step more on every model call (two per write, with their checkpoints);
    # this runs inside the model's node. The notes reach the thread as the model node's
    # output, just ahead of the model's reply, as a hook's update would have put them.

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse]
    ) -> ModelResponse | AIMessage:
        identity = identity_of(get_config())  # no identity: fail before the model runs
        waiting = awaiting_news(request.state["messages"])
        news = settled_updates(self.rt.store, identity, waiting) if waiting else []
        if not news:
            return handler(request)
        return _told(news, handler(request.override(messages=[*request.messages, *news])))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse]],
    ) -> ModelResponse | AIMessage:
        identity = identity_of(get_config())
        waiting = awaiting_news(request.state["messages"])
        news = []
        if waiting:  # the ledger is synchronous: off the event loop
            news = await asyncio.to_thread(settled_updates, self.rt.store, identity, waiting)
        if not news:
            return await handler(request)
        return _told(news, await handler(request.override(messages=[*request.messages, *news])))

    # -- each tool call -------------------------------------------------------------

    def _is_write(self, name: str) -> bool:
        return name in self.rt.registry and self.rt.registry.get(name).requires_approval

    def _turn_refusal(self, request: ToolCallRequest) -> ToolMessage | None:
        """The tool node's rule for the whole turn (graph/turn.py): calls sharing an id,
        and the same write twice, are refused here as there."""
        call_id = request.tool_call["id"]
        messages = (request.state or {}).get("messages", [])
        for message in reversed(messages):
            if isinstance(message, AIMessage) and any(
                call["id"] == call_id for call in message.tool_calls
            ):
                why = turn_refusals(message.tool_calls, self._is_write).get(call_id)
                if why is None:
                    return None
                call: dict[str, Any] = dict(request.tool_call)
                return tool_error(call["id"], call["name"], turn_refusal(call, why))
        return None

    def _route(self, request: ToolCallRequest) -> str:
        """`gate`, `read` (writegate runs it), `handler`, or `unprotected`."""
        name, tool = request.tool_call["name"], request.tool
        if name in self.rt.registry:
            spec = self.rt.registry.get(name)
            if spec.requires_approval:
                return "gate"
            # The registered read itself is audited when it runs; any other tool of that
            # name is not, so writegate runs the registered one.
            return "handler" if getattr(tool, "spec", None) is spec else "read"
        if isinstance(tool, GuardedTool) and tool.spec.requires_approval:
            return "unprotected"  # a write tool this Writegate was not given
        return "handler"

    def _writegate(self, route: str, call: dict[str, Any], config: RunnableConfig) -> Result:
        """A call writegate answers itself; the tool's own handler is not called."""
        if route == "gate":
            return self.gate.run(call, config)
        if route == "read":
            message: ToolMessage = self.calls.read({"call": call}, config)["messages"][-1]
            return message
        return tool_error(call["id"], call["name"], Unprotected(tool=call["name"]))

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Result]
    ) -> Result:
        refused = self._turn_refusal(request)
        if refused is not None:
            return refused
        route = self._route(request)
        if route == "handler":
            return handler(request)
        return self._writegate(route, dict(request.tool_call), request.runtime.config)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[Result]],
    ) -> Result:
        refused = self._turn_refusal(request)
        if refused is not None:
            return refused
        route = self._route(request)
        if route == "handler":
            return await handler(request)
        # The ledger is synchronous: run the gate in a worker thread (with the run's
        # context, so `interrupt()` finds its task) and keep the event loop free.
        call = dict(request.tool_call)
        return await asyncio.to_thread(self._writegate, route, call, request.runtime.config)
