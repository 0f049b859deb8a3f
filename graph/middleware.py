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

This module imports LangChain (the `[langchain]` extra); `writegate.runtime.writegate`
imports it only when `middleware()` is called.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
)
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.messages import AIMessage, AnyMessage, RemoveMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.config import get_config
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.types import Command

from writegate.approval.errors import Unprotected
from writegate.graph.gate import ToolCallGate
from writegate.graph.identity import identity_of
from writegate.graph.messages import tool_error
from writegate.graph.nodes import CallNodes
from writegate.graph.resolve import ends_turn
from writegate.graph.settled import awaiting_news, settled_updates
from writegate.graph.turn import turn_refusal, turn_refusals
from writegate.graph.unanswered import Unanswered, with_answers
from writegate.runtime.wiring import Runtime
from writegate.tools.kit import GuardedTool
from writegate.tools.registry import openai_function

Result = ToolMessage | Command[Any]


def _told(news: list[SystemMessage], response: ModelResponse | AIMessage) -> ModelResponse:
    """The model's answer with the notes it was shown, kept ahead of it in the thread."""
    if isinstance(response, AIMessage):
        return ModelResponse(result=[*news, response])
    return ModelResponse(
        result=[*news, *response.result], structured_response=response.structured_response
    )


# "Mark as Resolved" answered the questions (graph/resolve.py): the turn ends, no model.
_END_TURN = ExtendedModelResponse(
    model_response=ModelResponse(result=[]), command=Command(update={"jump_to": "end"})
)


@dataclass(frozen=True)
class _Turn:
    """What goes around one model call: the history with unanswered calls answered (if
    any were), and the notes on writes reconciled since."""

    answered: list[AnyMessage] | None  # the whole history, rewritten; None: unchanged
    news: list[SystemMessage]

    def request(self, request: ModelRequest[Any], answers: Any) -> ModelRequest[Any]:
        messages = with_answers(request.messages, answers) if answers else request.messages
        if messages is request.messages and not self.news:
            return request
        return request.override(messages=[*messages, *self.news])

    def response(self, response: ModelResponse | AIMessage) -> Any:
        told = _told(self.news, response)
        if self.answered is None:
            return told
        # The tool messages belong right after their call: the history goes in whole.
        history = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *self.answered, *told.result]
        return ExtendedModelResponse(
            model_response=told, command=Command(update={"messages": history})
        )


class WritegateMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Writes behind writegate's gate, reads audited, inside `create_agent`'s tool node."""

    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self.rt = runtime
        self.gate = ToolCallGate(runtime)
        self.calls = CallNodes(runtime)
        self.unanswered = Unanswered(runtime)

    @property
    def name(self) -> str:
        return "writegate"

    # -- around each model call ---------------------------------------------------
    # In `wrap_model_call`, not `before_model`: a before-model hook is a graph node of
    # its own, a step more on every model call (two per write, with their checkpoints);
    # this runs inside the model's node. The notes reach the thread as the model node's
    # output, just ahead of the model's reply, as a hook's update would have put them.

    def _needs_ledger(self, messages: list[AnyMessage]) -> bool:
        """Whether this model call has anything to look up: no I/O for the answer."""
        return bool(self.unanswered.needed(messages) or awaiting_news(messages))

    def _turn(self, messages: list[AnyMessage], config: RunnableConfig) -> tuple[_Turn, Any]:
        answers = self.unanswered.answers(messages, config)
        history = with_answers(messages, answers) if answers else messages
        waiting = awaiting_news(history)
        identity = identity_of(config, self.rt.server_user)
        news = settled_updates(self.rt.store, identity, waiting) if waiting else []
        return _Turn(history if answers else None, news), answers

    def _strict(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        """The request with each of writegate's tools as its strict function spec (closed
        object, every field required), as `wg.build_agent()` binds them, so the model is
        held to the schema writegate checks; any other tool as it was given."""
        registry = self.rt.registry
        tools = [
            openai_function(registry.get(t.name))
            if isinstance(t, BaseTool) and t.name in registry
            else t
            for t in request.tools
        ]
        return request.override(tools=tools)

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse]
    ) -> Any:
        config = get_config()
        # No identity, or one the run may not claim: fail before the model runs.
        identity_of(config, self.rt.server_user)
        request = self._strict(request)
        messages = request.state["messages"]
        if ends_turn(messages):
            return _END_TURN
        if not self._needs_ledger(messages):
            return handler(request)
        turn, answers = self._turn(messages, config)
        return turn.response(handler(turn.request(request, answers)))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse]],
    ) -> Any:
        config = get_config()
        identity_of(config, self.rt.server_user)
        request = self._strict(request)
        messages = request.state["messages"]
        if ends_turn(messages):
            return _END_TURN
        if not self._needs_ledger(messages):
            return await handler(request)
        # The ledger is synchronous: off the event loop.
        turn, answers = await asyncio.to_thread(self._turn, messages, config)
        return turn.response(await handler(turn.request(request, answers)))

    # -- each tool call -------------------------------------------------------------

    def _is_write(self, name: str) -> bool:
        return name in self.rt.registry and self.rt.registry.get(name).requires_approval

    @staticmethod
    def _asked_by(request: ToolCallRequest) -> AIMessage | None:
        """The model message that made this call: the latest one holding its id."""
        call_id = request.tool_call["id"]
        messages = (request.state or {}).get("messages", [])
        for message in reversed(messages):
            if isinstance(message, AIMessage) and any(
                call["id"] == call_id for call in message.tool_calls
            ):
                return message
        return None

    def _turn_refusal(
        self, request: ToolCallRequest, asked: AIMessage | None
    ) -> ToolMessage | None:
        """The tool node's rule for the whole turn (graph/turn.py): calls sharing an id,
        and the same write twice, are refused here as there."""
        if asked is None:
            return None
        why = turn_refusals(asked.tool_calls, self._is_write).get(request.tool_call["id"])
        if why is None:
            return None
        call: dict[str, Any] = dict(request.tool_call)
        return tool_error(call["id"], call["name"], turn_refusal(call, why))

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

    def _writegate(
        self, route: str, call: dict[str, Any], config: RunnableConfig, message_id: str | None
    ) -> Result:
        """A call writegate answers itself; the tool's own handler is not called."""
        if route == "gate":
            return self.gate.run(call, config, message_id)
        if route == "read":
            message: ToolMessage = self.calls.read({"call": call}, config)["messages"][-1]
            return message
        return tool_error(call["id"], call["name"], Unprotected(tool=call["name"]))

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Result]
    ) -> Result:
        asked = self._asked_by(request)
        refused = self._turn_refusal(request, asked)
        if refused is not None:
            return refused
        route = self._route(request)
        if route == "handler":
            return handler(request)
        call, config = dict(request.tool_call), request.runtime.config
        return self._writegate(route, call, config, asked.id if asked else None)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[Result]],
    ) -> Result:
        asked = self._asked_by(request)
        refused = self._turn_refusal(request, asked)
        if refused is not None:
            return refused
        route = self._route(request)
        if route == "handler":
            return await handler(request)
        # The ledger is synchronous: run the gate in a worker thread (with the run's
        # context, so `interrupt()` finds its task) and keep the event loop free.
        call, config = dict(request.tool_call), request.runtime.config
        message_id = asked.id if asked else None
        return await asyncio.to_thread(self._writegate, route, call, config, message_id)
