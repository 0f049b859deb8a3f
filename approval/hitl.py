"""LangChain's human-in-the-loop answer, translated into a writegate decision event.

Agent Chat UI and LangGraph Studio answer an interrupt with
`{"decisions": [{"type": "approve" | "edit" | "reject", ...}]}`, the decision types of
LangChain's `HumanInTheLoopMiddleware`. Such an answer usually names no proposal, so
the caller must know it answers a question its sender could have read
(`HitlAnswer.named` says whether it named one). Naming any proposal other than the
one asked is refused.

The UI's edit form sends every field as a string (`"amount_minor": "1000"`). On this
path only, a string is read as the field's value when it is exactly that value's
canonical text: a plain decimal integer, `true` / `false`, an enum member. Strict
validation then runs on the converted arguments, as for any edit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from writegate.approval.errors import InvalidDecision
from writegate.approval.inbox import INBOX_TYPES, from_inbox, inbox_event

SUPPORTED_TYPES = ("approve", "edit", "reject")
# Agent Inbox's types, taken inside `decisions` as LangChain's own middleware takes them.
_INBOX_ONLY = tuple(t for t in INBOX_TYPES if t != "edit")
# No sign but a minus, no spaces, no leading zeros: the one way to write each integer.
_PLAIN_INTEGER = re.compile(r"0|-?[1-9][0-9]*")
_BOOLEANS = {"true": True, "false": False}


@dataclass(frozen=True)
class HitlAnswer:
    event: dict[str, Any]  # the writegate decision event it stands for
    named: bool  # whether the answer named the proposal it decides


def is_hitl(value: Mapping[str, Any]) -> bool:
    return "decisions" in value and "action" not in value


def _named_proposal(value: Mapping[str, Any], item: Mapping[str, Any], asked: str) -> bool:
    named = {v for v in (value.get("proposal_id"), item.get("proposal_id")) if v is not None}
    if named - {asked}:
        raise InvalidDecision(
            "this decision names a different proposal than the one awaiting an answer",
            expected_proposal_id=asked,
            received_proposal_id=sorted(map(str, named - {asked}))[0],
        )
    return bool(named)


def from_inbox_list(
    value: list[Any],
    asked_proposal_id: str,
    arg_schema: Callable[[], Mapping[str, Any]] | None = None,
    operation: str | None = None,
) -> HitlAnswer:
    """Agent Inbox's `HumanResponse` list (approval/inbox.py); it names no proposal."""
    return HitlAnswer(
        _with_form_args(from_inbox(value, asked_proposal_id, operation), arg_schema), False
    )


def _with_form_args(
    event: dict[str, Any], arg_schema: Callable[[], Mapping[str, Any]] | None
) -> dict[str, Any]:
    if event["action"] == "edit" and isinstance(event.get("args"), dict) and arg_schema:
        return {**event, "args": form_args(event["args"], arg_schema())}
    return event


def from_hitl(
    value: Mapping[str, Any],
    asked_proposal_id: str,
    arg_schema: Callable[[], Mapping[str, Any]] | None = None,
    operation: str | None = None,
) -> HitlAnswer:
    decisions = value.get("decisions")
    if not isinstance(decisions, list) or len(decisions) != 1:
        raise InvalidDecision("expected exactly one decision for this approval request")
    item = decisions[0]
    if not isinstance(item, dict):
        raise InvalidDecision("a decision must be an object")
    named = _named_proposal(value, item, asked_proposal_id)
    kind, pid = item.get("type"), asked_proposal_id
    if kind == "approve":
        confirm = {"action": "confirm", "proposal_id": pid}
        event = {**confirm, "retyped": item["retyped"]} if "retyped" in item else confirm
    elif kind == "reject":
        event = {"action": "decline", "proposal_id": pid, "reason": item.get("message")}
    elif kind in _INBOX_ONLY or (kind == "edit" and "edited_action" not in item):
        event = _with_form_args(inbox_event(item, pid, operation), arg_schema)
    elif kind == "edit":
        edited = item.get("edited_action") or {}
        args = edited.get("args") if isinstance(edited, dict) else None
        if isinstance(args, dict) and arg_schema is not None:
            args = form_args(args, arg_schema())
        event = {"action": "edit", "proposal_id": pid, "args": args}
    else:
        raise InvalidDecision(
            f"unknown decision type {kind!r}; supported: {', '.join(SUPPORTED_TYPES)} "
            f"(and Agent Inbox's {', '.join(INBOX_TYPES)})",
            supported=[*SUPPORTED_TYPES, *_INBOX_ONLY],
        )
    return HitlAnswer(event, named)


def form_args(args: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """Edited arguments with each canonical string read as its field's value."""
    fields = schema.get("properties") or {}
    return {k: form_value(v, fields.get(k) or {}) for k, v in args.items()}


def form_value(value: Any, field: Mapping[str, Any]) -> Any:
    """`value` converted when it is the exact canonical text of the field's type, else as is."""
    if not isinstance(value, str):
        return value
    for option in field.get("anyOf") or [field]:
        converted = _from_text(value, option)
        if converted is not value:
            return converted
    return value


def _from_text(text: str, field: Mapping[str, Any]) -> Any:
    for member in field.get("enum") or []:
        if not isinstance(member, str) and json.dumps(member) == text:
            return member
    kind = field.get("type")
    if kind == "integer" and _PLAIN_INTEGER.fullmatch(text):
        return int(text)
    if kind == "boolean" and text in _BOOLEANS:
        return _BOOLEANS[text]
    return text
