"""Agent Inbox's answer, LangGraph's `HumanResponse` list, read as a writegate event.

Agent Inbox (langchain-ai/agent-inbox) resumes an interrupt with a list of one
`{"type": ..., "args": ...}`:

- `accept`: approve the question as shown (`args` is null, or the card's own action
  request, which decides nothing: the stored proposal is what runs);
- `response`: decline, `args` the person's text, passed on as a reject's message is;
- `edit`: `args` is `{"action": <tool name>, "args": {...}}`, its form's strings;
- `ignore`: close the question without deciding (cancel).

Like LangChain's shape it names no proposal: the caller checks that its question was
shown before it came. LangChain's `decisions` list may carry these types too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from writegate.approval.errors import InvalidDecision

INBOX_TYPES = ("accept", "edit", "response", "ignore")


def is_inbox(value: Any) -> bool:
    return isinstance(value, list)


def inbox_event(item: Any, proposal_id: str, operation: str | None) -> dict[str, Any]:
    """The writegate event one `HumanResponse` stands for; refuses any other shape."""
    if not isinstance(item, dict) or item.get("type") not in INBOX_TYPES:
        kind = item.get("type") if isinstance(item, dict) else type(item).__name__
        raise InvalidDecision(
            f"unknown answer type {kind!r}; Agent Inbox's types: {', '.join(INBOX_TYPES)}",
            supported=list(INBOX_TYPES),
        )
    kind, args = item["type"], item.get("args")
    if kind == "accept":
        return {"action": "confirm", "proposal_id": proposal_id}
    if kind == "ignore":
        return {"action": "cancel", "proposal_id": proposal_id}
    if kind == "response":
        if not isinstance(args, str) or not args:
            raise InvalidDecision("a response needs the person's text in args")
        return {"action": "decline", "proposal_id": proposal_id, "reason": args}
    if not isinstance(args, Mapping) or not isinstance(args.get("args"), dict):
        raise InvalidDecision('an edit needs args: {"action": <tool>, "args": {...}}')
    if operation is not None and args.get("action", operation) != operation:
        raise InvalidDecision(
            "this edit names another action than the one asked",
            expected_action=operation,
            received_action=str(args.get("action")),
        )
    return {"action": "edit", "proposal_id": proposal_id, "args": dict(args["args"])}


def from_inbox(value: list[Any], proposal_id: str, operation: str | None) -> dict[str, Any]:
    """The event for Agent Inbox's list: exactly one answer for one question."""
    if len(value) != 1:
        raise InvalidDecision("expected exactly one answer for this approval request")
    return inbox_event(value[0], proposal_id, operation)
