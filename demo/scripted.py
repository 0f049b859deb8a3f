"""The scripted demo model, the demo agent's when no OpenAI model is configured
(`demo.model`).

It is not a language model. It follows a few fixed rules over the
conversation so the propose → confirm → execute loop can be demonstrated and tested
offline; every plain-text answer starts with "[scripted demo model] " so nobody
mistakes it for a real model. Given ``script=[AIMessage, ...]`` it replays that
instead, as `writegate.testing.ScriptedChatModel` does.

Rules. The last HumanMessage is "the request"; the messages after it are "this turn".

0. This turn opens with a note that an earlier write's outcome became final (the agent
   adds one, marked ``SETTLED``): report it and stop, so a request repeated only
   because nobody said it went through does not become a second write.
1. No tool call yet this turn: plan from the request text, first match wins:
   "create ticket: TITLE [description: TEXT]" → ``create_ticket(title, description)``;
   an order id (``ord_…``) and "refund"/"退款" → ``get_order(order_id)`` per order;
   a ticket id (``tkt_…``) and one of open/in_progress/resolved/closed →
   ``update_ticket(ticket_id, status)``; "list orders"/"my orders" → ``list_orders()``;
   "list tickets" → ``list_tickets()``; "refund" without an order id → a question;
   otherwise a short help text. Rules live in ``demo.scripted_rules``.
2. The last calls were ``get_order`` for a refund request: call
   ``refund_order(order_id, amount_minor, currency, reason)`` for the refundable amount
   (``payable_minor - refunded_minor``) or the amount the person wrote ("50.00",
   "199 CNY": major units × 100). Reason is the text after "because"/"reason:",
   else "customer request". If amount or currency is ambiguous, ask instead.
3. Otherwise: summarise the last batch of tool results in plain text and stop.
   A write is proposed at most once per turn, so a declined, cancelled, expired or
   unknown-outcome write is never retried by this model.

Tool-call ids are ``call_<number of input messages>_<index>``, as the scripted model's.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.tool import tool_call

from writegate.demo import scripted_rules as rules
from writegate.testing import ScriptedChatModel

PREFIX = "[scripted demo model] "
# The key the agent marks its note on a settled outcome with (additional_kwargs).
SETTLED = "writegate_settled"


class DemoChatModel(ScriptedChatModel):
    """The scripted demo model: the fixed rules above, or an explicit list of replies."""

    @property
    def _llm_type(self) -> str:
        return "writegate-scripted-demo"

    def _unscripted(self, messages: Sequence[BaseMessage]) -> AIMessage:
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
    """Apply the module's rules to the conversation so far."""
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
