"""What the model and the person see: tool results and approval requests.

Every tool result reaches the model as a ToolMessage whose content is JSON: a result
with `"status"`, or an error `{code, message, retryable}`. The interrupt value carries
the proposal, its preview and expiry, and LangChain's `action_requests` /
`review_configs` so Agent Chat UI and LangGraph Studio can render and answer it.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import ToolMessage

from writegate.approval.canonical import to_rfc3339
from writegate.approval.errors import WritegateError
from writegate.approval.models import Proposal, Receipt

INTERRUPT_KIND = "writegate.approval"

# Told to the model alongside the code, so it does not "retry" a refusal.
_ADVICE = {
    "declined": "The user declined. Do not propose this again unless they ask.",
    "cancelled": "The user closed the request without deciding. Do not retry on your own.",
    "proposal_expired": "Nobody confirmed in time. Ask the user whether to propose again.",
    "outcome_unknown": "The outcome is being reconciled. Do not propose this again; "
    "tell the user it is being checked.",
    "state_changed": "The record changed since the preview. Read it again before proposing.",
}


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def error_content(exc: WritegateError) -> dict[str, Any]:
    body = exc.to_dict()
    if exc.code in _ADVICE:
        body["advice"] = _ADVICE[exc.code]
    return body


def tool_result(call_id: str, name: str, content: dict[str, Any]) -> ToolMessage:
    failed = "code" in content and "status" not in content
    return ToolMessage(
        content=dumps(content),
        tool_call_id=call_id,
        name=name,
        status="error" if failed else "success",
    )


def tool_error(call_id: str, name: str, exc: WritegateError) -> ToolMessage:
    return tool_result(call_id, name, error_content(exc))


def receipt_content(receipt: Receipt) -> dict[str, Any]:
    return {**receipt.to_dict(), "status": receipt.status}


def approval_request(proposal: Proposal, error: WritegateError | None = None) -> dict[str, Any]:
    """The interrupt value for one proposal: one action per interrupt."""
    preview = proposal.preview
    lines = [f"{f['name']}: {f['display']}" for f in preview.get("fields", [])]
    description = "\n".join(
        [
            preview.get("title", proposal.operation),
            *lines,
            f"Impact: {preview.get('impact', '')}",
            f"Expires: {to_rfc3339(proposal.expires_at)}",
        ]
    )
    value: dict[str, Any] = {
        "type": INTERRUPT_KIND,
        "proposal_id": proposal.proposal_id,
        "tool_call_id": proposal.tool_call_id,
        "operation": proposal.operation,
        "resource": proposal.resource,
        "args": proposal.args,
        "args_digest": proposal.args_digest,
        "preview": preview,
        "policy_version": proposal.policy_version,
        "expires_at": to_rfc3339(proposal.expires_at),
        "respond_with": {
            "confirm": {"action": "confirm", "proposal_id": proposal.proposal_id},
            "decline": {"action": "decline", "proposal_id": proposal.proposal_id},
            "cancel": {"action": "cancel", "proposal_id": proposal.proposal_id},
            "edit": {"action": "edit", "proposal_id": proposal.proposal_id, "args": proposal.args},
        },
        "action_requests": [
            {"name": proposal.operation, "args": proposal.args, "description": description}
        ],
        "review_configs": [
            {"action_name": proposal.operation, "allowed_decisions": ["approve", "edit", "reject"]}
        ],
    }
    if error is not None:
        value["error"] = error.to_dict()
    return value
