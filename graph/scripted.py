"""A deterministic scripted chat model, used when no real model is configured.

This is not a language model. It follows a few fixed rules over the conversation
so the propose → confirm → execute loop can be demonstrated and tested offline;
every plain-text answer starts with "[scripted demo model] " so nobody mistakes it
for a real model. Tests can instead pass ``script=[AIMessage, ...]`` to get exactly
those replies in order.

Rules. The last HumanMessage is "the request"; the messages after it are "this turn".

0. This turn opens with a note that an earlier write's outcome became final (see
   ``graph.settled``): report it and stop, so a request repeated only because nobody
   said it went through does not become a second write.
1. No tool call yet this turn: plan from the request text, first match wins:
   "create ticket: TITLE [description: TEXT]" → ``create_ticket(title, description)``;
   an order id (``ord_…``) and "refund"/"退款" → ``get_order(order_id)`` per order;
   a ticket id (``tkt_…``) and one of open/in_progress/resolved/closed →
   ``update_ticket(ticket_id, status)``; "list orders"/"my orders" → ``list_orders()``;
   "list tickets" → ``list_tickets()``; "refund" without an order id → a question;
   otherwise a short help text. Rules live in ``graph.scripted_rules``.
2. The last calls were ``get_order`` for a refund request: call
   ``refund_order(order_id, amount_minor, currency, reason)`` for the refundable amount
   (``payable_minor - refunded_minor``) or the amount the person wrote ("50.00",
   "199 CNY": major units × 100). Reason is the text after "because"/"reason:",
   else "customer request". If amount or currency is ambiguous, ask instead.
3. Otherwise: summarise the last batch of tool results in plain text and stop.
   A write is proposed at most once per turn, so a declined, cancelled, expired or
   unknown-outcome write is never retried by this model.

Tool-call ids are ``call_<number of input messages>_<index>``: deterministic for a
conversation and unique within a thread, because the history only grows.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.tool import tool_call
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import PrivateAttr

from writegate.graph import scripted_rules as rules
from writegate.graph.settled import MARK as SETTLED

PREFIX = "[scripted demo model] "


CALL_LOG_SIZE = 100


@dataclass
class _SharedState:
    """Mutable state shared between a model and its ``bind_tools`` copies.

    Shared on purpose: a test holds the unbound model while the graph calls the
    bound copy, and both must see the same script position and call log.
    """

    cursor: int = 0
    # Bounded: a long-running server on the demo model must not grow with every turn.
    calls: deque[list[BaseMessage]] = field(default_factory=lambda: deque(maxlen=CALL_LOG_SIZE))
    lock: threading.Lock = field(default_factory=threading.Lock)


class ScriptedChatModel(BaseChatModel):
    """Scripted demo chat model: fixed rules, or an explicit list of replies."""

    script: list[AIMessage] | None = None
    """Replies to return in order instead of following the rules (for tests)."""
    tool_names: tuple[str, ...] | None = None
    """Tools bound with ``bind_tools``; None means no restriction."""

    _state: _SharedState = PrivateAttr(default_factory=_SharedState)

    @property
    def _llm_type(self) -> str:
        return "writegate-scripted-demo"

    @property
    def calls(self) -> list[list[BaseMessage]]:
        """The message lists this model (or a bound copy) was invoked with."""
        with self._state.lock:
            return [list(c) for c in self._state.calls]

    def feed(self, replies: Sequence[AIMessage]) -> None:
        """Drop the replies already given and queue these next (a long-running caller,
        such as the bench, would otherwise carry every reply it ever scripted)."""
        with self._state.lock:
            assert self.script is not None
            del self.script[: self._state.cursor]
            self._state.cursor = 0
            self.script.extend(replies)

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        names = tuple(convert_to_openai_tool(t)["function"]["name"] for t in tools)
        return self.model_copy(update={"tool_names": names})

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        with self._state.lock:
            self._state.calls.append(list(messages))
            if self.script is not None:
                message = self._next_scripted(len(messages))
            else:
                message = self._follow_rules(messages)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _next_scripted(self, n_messages: int) -> AIMessage:
        assert self.script is not None
        index = self._state.cursor
        if index >= len(self.script):
            raise RuntimeError(f"scripted model ran out of replies after {index} call(s)")
        self._state.cursor += 1
        reply = self.script[index]
        calls = [
            tool_call(name=c["name"], args=c["args"], id=c.get("id") or f"call_{n_messages}_{i}")
            for i, c in enumerate(reply.tool_calls)
        ]
        return reply.model_copy(update={"tool_calls": calls}, deep=True)

    def _follow_rules(self, messages: Sequence[BaseMessage]) -> AIMessage:
        plan = _plan(messages)
        if isinstance(plan, str):
            return AIMessage(content=PREFIX + plan)
        # Only call tools the graph actually bound, as a real model would.
        bound = self.tool_names
        missing = [name for name, _ in plan if bound is not None and name not in bound]
        if missing:
            return AIMessage(
                content=PREFIX + f"The tool {missing[0]} is not available here, so I did nothing."
            )
        calls = [
            tool_call(name=name, args=args, id=f"call_{len(messages)}_{i}")
            for i, (name, args) in enumerate(plan)
        ]
        return AIMessage(content="", tool_calls=calls)


def _plan(messages: Sequence[BaseMessage]) -> rules.Plan:
    """Apply the module's three rules to the conversation so far."""
    start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
    request = str(messages[start].text) if start >= 0 else ""
    turn = messages[start + 1 :]
    results = {m.tool_call_id: m for m in turn if isinstance(m, ToolMessage)}
    batches = [m.tool_calls for m in turn if isinstance(m, AIMessage) and m.tool_calls]
    notes = [
        str(m.text) for m in turn if isinstance(m, SystemMessage) and SETTLED in m.additional_kwargs
    ]
    if notes and not batches:
        return rules.report_settled(notes)
    if not batches:
        return rules.plan_request(request)
    last_batch = batches[-1]
    looked_up = all(c["name"] == "get_order" for c in last_batch)
    refunded = any(c["name"] == "refund_order" for batch in batches for c in batch)
    if looked_up and rules.is_refund_request(request) and not refunded:
        return rules.plan_refund(request, [(c, results.get(c["id"] or "")) for c in last_batch])
    return rules.summarise(last_batch, results)
