"""A person's decision on one proposal, as a typed value.

Only structured events count. Free text ("ok", "好的") is not a decision: parsing it
fails with `invalid_decision`, and nothing is confirmed. LangChain's human-in-the-loop
shape (`{"decisions": [{"type": "approve" | "reject" | "edit", ...}]}`) is accepted too,
so existing LangGraph UIs can answer; it is bound to the proposal being asked about.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from writegate.approval.errors import InvalidDecision


class _Decision(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    proposal_id: str = Field(min_length=1, max_length=200)


class Confirm(_Decision):
    action: Literal["confirm"]
    # The key field typed again by the person, when the proposal's tier asks for it.
    retyped: str | None = Field(default=None, max_length=200)


class Decline(_Decision):
    action: Literal["decline"]
    reason: str | None = Field(default=None, max_length=2000)


class Cancel(_Decision):
    action: Literal["cancel"]


class Edit(_Decision):
    action: Literal["edit"]
    args: dict[str, Any]


Decision = Annotated[Confirm | Decline | Cancel | Edit, Field(discriminator="action")]
_ADAPTER: TypeAdapter[Confirm | Decline | Cancel | Edit] = TypeAdapter(Decision)


def _from_hitl(value: dict[str, Any], proposal_id: str) -> dict[str, Any]:
    decisions = value.get("decisions")
    if not isinstance(decisions, list) or len(decisions) != 1:
        raise InvalidDecision("expected exactly one decision for this approval request")
    item = decisions[0]
    if not isinstance(item, dict):
        raise InvalidDecision("a decision must be an object")
    kind = item.get("type")
    if kind == "approve":
        confirm = {"action": "confirm", "proposal_id": proposal_id}
        return {**confirm, "retyped": item["retyped"]} if "retyped" in item else confirm
    if kind == "reject":
        return {"action": "decline", "proposal_id": proposal_id, "reason": item.get("message")}
    if kind == "edit":
        edited = item.get("edited_action") or {}
        return {"action": "edit", "proposal_id": proposal_id, "args": edited.get("args")}
    raise InvalidDecision(f"unknown decision type {kind!r}; use approve, reject or edit")


def parse_decision(value: Any, *, asked_proposal_id: str) -> Confirm | Decline | Cancel | Edit:
    """Parse a resume value for the proposal that was asked about.

    A decision naming another proposal is refused: a stale or misrouted resume must
    never answer a different pending question.
    """
    if not isinstance(value, dict):
        raise InvalidDecision(
            "a decision must be a structured event such as "
            '{"action": "confirm", "proposal_id": "..."}; free text confirms nothing',
            received_type=type(value).__name__,
        )
    if "decisions" in value and "action" not in value:
        value = _from_hitl(value, asked_proposal_id)
    try:
        decision = _ADAPTER.validate_python(value)
    except ValidationError as exc:
        problems = [f"{'.'.join(map(str, e['loc'])) or 'event'}: {e['msg']}" for e in exc.errors()]
        raise InvalidDecision("; ".join(problems)) from exc
    if decision.proposal_id != asked_proposal_id:
        raise InvalidDecision(
            "this decision names a different proposal than the one awaiting an answer",
            expected_proposal_id=asked_proposal_id,
            received_proposal_id=decision.proposal_id,
        )
    return decision
