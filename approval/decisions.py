"""A person's decision on one proposal, as a typed value.

Only structured events count. Free text ("ok", "好的") is not a decision: parsing it
fails with `invalid_decision`, and nothing is confirmed. LangChain's human-in-the-loop
shape (`{"decisions": [{"type": "approve" | "reject" | "edit", ...}]}`, see
`approval/hitl.py`) and Agent Inbox's list (`approval/inbox.py`) are accepted too, so
existing LangGraph UIs can answer; such an answer is bound to the proposal being asked
about, and only when its sender could have read the question.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from writegate.approval.errors import InvalidDecision
from writegate.approval.hitl import HitlAnswer, from_hitl, from_inbox_list, is_hitl
from writegate.approval.inbox import is_inbox


class _Decision(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    proposal_id: str = Field(min_length=1, max_length=200)


class Confirm(_Decision):
    """Confirm the proposal exactly as previewed; it runs once every approval it needs is in."""

    action: Literal["confirm"]
    retyped: str | None = Field(default=None, max_length=200)
    """The key field typed again by the person, when the proposal's tier asks for it."""


class Decline(_Decision):
    """Refuse the proposal: nothing runs; the model is told `declined`."""

    action: Literal["decline"]
    reason: str | None = Field(default=None, max_length=2000)
    """The person's reason: told to the model as theirs (`person_said`) and audited."""


class Cancel(_Decision):
    """Close the question without deciding: nothing runs; the model is told `cancelled`."""

    action: Literal["cancel"]


class Edit(_Decision):
    """Change the arguments: they become a new proposal, asked again with its own preview."""

    action: Literal["edit"]
    args: dict[str, Any]
    """The whole argument set, as edited."""


Decision = Annotated[Confirm | Decline | Cancel | Edit, Field(discriminator="action")]
_ADAPTER: TypeAdapter[Confirm | Decline | Cancel | Edit] = TypeAdapter(Decision)


def accepted_shapes(proposal_id: str) -> str:
    """The answers a question takes, with one short example of each, for an error."""
    return (
        "answer with writegate's event, e.g. "
        f'{{"action": "confirm", "proposal_id": "{proposal_id}"}} '
        '(action "confirm", "decline" with an optional "reason", "cancel", or "edit" with '
        '"args"), or with LangChain\'s decisions, e.g. {"decisions": [{"type": "approve"}]} '
        '(type "approve", "reject" with an optional "message", or "edit" with '
        '"edited_action": {"name": ..., "args": {...}}), or with Agent Inbox\'s list, e.g. '
        '[{"type": "accept", "args": null}] (type "accept", "response" with the text in '
        '"args", "edit" with "args": {"action": ..., "args": {...}}, or "ignore")'
    )


def _unnamed(answer: HitlAnswer, asked_proposal_id: str, presented: Callable[[], bool]) -> Any:
    """The event of an answer in a UI's shape: one naming no proposal counts only for a
    question its sender could have read."""
    if not answer.named and not presented():
        raise InvalidDecision(
            "this answer names no proposal and came before its question was shown to "
            "anyone; read the question shown now and answer it",
            reason="not_presented",
            asked_proposal_id=asked_proposal_id,
        )
    return answer.event


def parse_decision(
    value: Any,
    *,
    asked_proposal_id: str,
    presented: Callable[[], bool],
    arg_schema: Callable[[], Mapping[str, Any]] | None = None,
    operation: str | None = None,
) -> Confirm | Decline | Cancel | Edit:
    """Parse a resume value for the proposal that was asked about.

    A decision naming another proposal is refused: a stale or misrouted resume must
    never answer a different pending question. A decision naming no proposal (the
    LangChain shape) counts only if `presented()` says its question reached a client
    before the answer came; `arg_schema` gives the tool's JSON schema (called only for
    an edit in that shape), which reads its form strings; `operation`, the tool asked
    about, which an Agent Inbox edit names.
    """
    if is_inbox(value):
        try:
            answer = from_inbox_list(value, asked_proposal_id, arg_schema, operation)
        except InvalidDecision as exc:
            raise InvalidDecision(
                f"{exc.message}: " + accepted_shapes(asked_proposal_id), **exc.details
            ) from exc
        value = _unnamed(answer, asked_proposal_id, presented)
    elif isinstance(value, dict) and is_hitl(value):
        value = _unnamed(
            from_hitl(value, asked_proposal_id, arg_schema, operation), asked_proposal_id, presented
        )
    if not isinstance(value, dict):
        raise InvalidDecision(
            "free text confirms nothing: " + accepted_shapes(asked_proposal_id),
            received_type=type(value).__name__,
        )
    try:
        decision = _ADAPTER.validate_python(value)
    except ValidationError as exc:
        problems = [f"{'.'.join(map(str, e['loc'])) or 'event'}: {e['msg']}" for e in exc.errors()]
        raise InvalidDecision(
            "not an answer writegate accepts: " + accepted_shapes(asked_proposal_id),
            problems=problems,
        ) from exc
    if decision.proposal_id != asked_proposal_id:
        raise InvalidDecision(
            "this decision names a different proposal than the one awaiting an answer",
            expected_proposal_id=asked_proposal_id,
            received_proposal_id=decision.proposal_id,
        )
    return decision
