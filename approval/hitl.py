"""LangChain's human-in-the-loop answer, translated into a writegate decision event.

Agent Chat UI and LangGraph Studio answer an interrupt with
`{"decisions": [{"type": "approve" | "edit" | "reject", ...}]}`, the decision types of
LangChain's `HumanInTheLoopMiddleware`. Such an answer usually names no proposal, so
the caller must know it answers a question its sender could have read
(`HitlAnswer.named` says whether it named one). Naming any proposal other than the
one asked is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from approval.errors import InvalidDecision

SUPPORTED_TYPES = ("approve", "edit", "reject")


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


def from_hitl(
    value: Mapping[str, Any], asked_proposal_id: str, arg_schema: Mapping[str, Any] | None = None
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
    elif kind == "edit":
        edited = item.get("edited_action") or {}
        args = edited.get("args") if isinstance(edited, dict) else None
        event = {"action": "edit", "proposal_id": pid, "args": args}
    else:
        raise InvalidDecision(
            f"unknown decision type {kind!r}; supported: {', '.join(SUPPORTED_TYPES)}",
            supported=list(SUPPORTED_TYPES),
        )
    return HitlAnswer(event, named)
