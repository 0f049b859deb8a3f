"""The wire format every way in shows, free of any framework: tool results and
approval requests as plain JSON values.

Every tool result reaches the model (as a LangChain ToolMessage, built in
`graph/messages.py`; as an MCP result; as an HTTP body) as JSON: a result with
`"status"`, or an error `{code, message, retryable}`. The interrupt value carries
the proposal, its preview and expiry, and LangChain's `action_requests` /
`review_configs` so Agent Chat UI and LangGraph Studio can render and answer it.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, Literal, cast

from writegate.approval.canonical import to_rfc3339
from writegate.approval.contract import ApprovalRequest, ErrorBody, PreviewView
from writegate.approval.errors import UNSETTLED_CODES, WritegateError
from writegate.approval.inert import inert_json
from writegate.approval.models import Proposal, ProposalStatus, Receipt

INTERRUPT_KIND: Literal["writegate.approval"] = "writegate.approval"

# Told to the model alongside the code, so it does not "retry" a refusal.
_ADVICE = {
    "declined": "The user declined. Do not propose this again unless they ask.",
    "cancelled": "The user closed the request without deciding. Do not retry on your own.",
    "proposal_expired": "Nobody confirmed in time. Ask the user whether to propose again.",
    "state_changed": "The record changed since the preview. Read it again before proposing.",
    "retype_unavailable": (
        "writegate's policy cannot ask for the confirmation this write needs, so it was not "
        "proposed. Tell the user; do not propose it again until an operator fixes the policy."
    ),
}


def dumps(value: Any) -> str:
    """JSON for the model and for any client that prints it: the values exactly, with
    the characters a terminal would obey escaped (`inert_json`)."""
    return inert_json(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))


# A confirmed write that is not over yet (a 503, a 429, a timeout, unknown): `retryable`
# means the system retries it with its own request key, not that the model should.
_UNSETTLED_ADVICE = (
    "This confirmed write is not finished yet; it is being completed or checked with its "
    "own request key. Do not propose it again: a new proposal is refused until it settles. "
    "Tell the user it is being checked, and do not say it happened or failed."
)


# A decline with the person's reason: their words go to the model as theirs, apart
# from writegate's own message, the way LangChain's reject passes its message on.
_PERSON_SAID_ADVICE = (
    "The user declined and said why, in person_said (their own words, not an instruction "
    "from the system). Do not propose this again as it was; answer what they said."
)


def error_content(exc: WritegateError) -> dict[str, Any]:
    body = exc.to_dict()
    said = exc.details.get("person_said")
    if said:
        body["details"] = {k: v for k, v in exc.details.items() if k != "person_said"}
        body["person_said"] = said
        body["advice"] = _PERSON_SAID_ADVICE
    elif exc.code in UNSETTLED_CODES and "execution_id" in exc.details:
        body["advice"] = _UNSETTLED_ADVICE
    elif exc.code in _ADVICE:
        body["advice"] = _ADVICE[exc.code]
    return body


def receipt_content(receipt: Receipt) -> dict[str, Any]:
    return {**receipt.to_dict(), "status": receipt.status}


_UNITS = (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))


def duration_text(span: timedelta) -> str:
    """A lifetime as a person reads it: "15 minutes", "1 day 2 hours"."""
    left, parts = max(0, round(span.total_seconds())), []
    for unit, size in _UNITS:
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count} {unit}{'' if count == 1 else 's'}")
    return " ".join(parts) or "0 seconds"


# After a refused answer, the last field of the card Agent Chat UI draws from
# `action_requests[0].args`, right above its Approve button: it shows a request's name
# and args up front, its description only behind a button, and after an answer it keeps
# to the card's bottom, where a first field is scrolled out of sight. Not an argument:
# an edit sent back from that card carries it, and `without_refusal_field` drops it
# before the edit is read.
REFUSAL_FIELD = "your_answer_was_refused"


def card_args(proposal: Proposal) -> dict[str, Any]:
    """The proposal's args in the order its preview shows them, then any others by name.

    The same order on every question: a proposal read back from the database has its
    args in JSONB's key order, its preview's fields in their list's order.
    """
    shown = [
        f["name"] for f in proposal.preview.get("fields", []) if f.get("name") in proposal.args
    ]
    rest = sorted(set(proposal.args) - set(shown))
    return {name: proposal.args[name] for name in [*dict.fromkeys(shown), *rest]}


def refusal_notice(proposal: Proposal, error: WritegateError) -> str:
    """Why the answer was refused, and what approving now would run instead."""
    preview = proposal.preview
    shown = [f"{f.get('label') or f['name']} {f['display']}" for f in preview.get("fields", [])]
    runs = preview.get("title", proposal.operation) + (f" ({', '.join(shown)})" if shown else "")
    return (
        f"{error.message} ({error.code}). Nothing was changed: the fields above are the "
        f"proposal as it stands, and Approve runs exactly this: {runs}."
    )


def approval_request(proposal: Proposal, error: WritegateError | None = None) -> ApprovalRequest:
    """The interrupt value for one proposal: one action per interrupt. `expires_at` is
    the instant; `expires_after` the proposal's lifetime in words ("15 minutes"), which
    stays true however late the question is shown again."""
    waits = duration_text(proposal.expires_at - proposal.created_at)
    preview = proposal.preview
    lines = [f"{f['name']}: {f['display']}" for f in preview.get("fields", [])]
    # A UI may show only this text: a refused answer's reason comes first. Blank lines
    # keep markdown from running the lines into one paragraph.
    refused = [f"Refused ({error.code}): {error.message}"] if error is not None else []
    description = "\n\n".join(
        [
            *refused,
            preview.get("title", proposal.operation),
            *lines,
            f"Impact: {preview.get('impact', '')}",
            f"Expires: {to_rfc3339(proposal.expires_at)} ({waits} after it was proposed)",
        ]
    )
    args = card_args(proposal)
    card = dict(args)
    if error is not None and REFUSAL_FIELD not in args:
        card = {**args, REFUSAL_FIELD: refusal_notice(proposal, error)}
    value: ApprovalRequest = {
        "type": INTERRUPT_KIND,
        "proposal_id": proposal.proposal_id,
        "tool_call_id": proposal.tool_call_id,
        "operation": proposal.operation,
        "resource": proposal.resource,
        "args": args,
        "args_digest": proposal.args_digest,
        "preview": cast(PreviewView, preview),
        "policy_version": proposal.policy_version,
        "expires_at": to_rfc3339(proposal.expires_at),
        "expires_after": waits,
        "respond_with": {
            "confirm": {"action": "confirm", "proposal_id": proposal.proposal_id},
            "decline": {"action": "decline", "proposal_id": proposal.proposal_id},
            "cancel": {"action": "cancel", "proposal_id": proposal.proposal_id},
            "edit": {"action": "edit", "proposal_id": proposal.proposal_id, "args": args},
        },
        # Both keys: LangChain reads `args`, Agent Inbox `arguments`.
        "action_requests": [
            {
                "name": proposal.operation,
                "args": card,
                "arguments": card,
                "description": description,
            }
        ],
        "review_configs": [
            {"action_name": proposal.operation, "allowed_decisions": _allowed(proposal)}
        ],
    }
    if error is not None:
        value["error"] = cast(ErrorBody, error.to_dict())
    return value


def _allowed(proposal: Proposal) -> list[Literal["approve", "edit", "reject"]]:
    """What a card offers: once the requester confirmed, what is left is a second
    approver's approve or reject (the request no longer changes); else also edit."""
    if proposal.status is ProposalStatus.AWAITING_SECOND:
        return ["approve", "reject"]
    return ["approve", "edit", "reject"]


def without_refusal_field(answer: Any, args: dict[str, Any]) -> Any:
    """`answer` without the refusal field an edit sent back from the card (LangChain's
    decisions, or Agent Inbox's list)."""
    if REFUSAL_FIELD in args:
        return answer
    if isinstance(answer, list):
        return [_without_field(item, "args") for item in answer]
    decisions = answer.get("decisions") if isinstance(answer, dict) else None
    if not isinstance(decisions, list):
        return answer
    return {**answer, "decisions": [_without_field(item) for item in decisions]}


def _without_field(item: Any, key: str = "edited_action") -> Any:
    edited = item.get(key) if isinstance(item, dict) else None
    if not isinstance(edited, dict) or not isinstance(edited.get("args"), dict):
        return item
    sent = {k: v for k, v in edited["args"].items() if k != REFUSAL_FIELD}
    return {**item, key: {**edited, "args": sent}}


def as_executed(
    args: dict[str, Any], executed: dict[str, Any] | None
) -> tuple[dict[str, Any], list[str]]:
    """A call's arguments with the values that ran in place of the model's, and which
    of them an approver's edit changed."""
    if not executed:
        return dict(args), []
    edited = [k for k, v in args.items() if k in executed and executed[k] != v]
    return {k: executed[k] if k in edited else v for k, v in args.items()}, edited
