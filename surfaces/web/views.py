"""Turn ledger rows, interrupt values and LangChain messages into API bodies.

Pure functions. An approval's `status` is the ledger's, except that an open one (not
yet executed or ended) at or past its expiry (server clock, right-open interval)
reads `expired`: nothing can run any more, whether or not someone has tried.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from writegate.approval.models import PENDING, Proposal, Receipt
from writegate.approval.money import CURRENCIES, format_major
from writegate.approval.wire import as_executed
from writegate.surfaces.web.schemas import (
    ApprovalView,
    ConfirmationInfo,
    MessageView,
    PreviewField,
    RefusalInfo,
    ToolCallView,
)
from writegate.surfaces.web.schemas import Receipt as ReceiptOut

# Statuses in which the requester may still have a question to answer: before their
# confirm, while a second approver decides, and after the approval until they confirm.


def _refusal(error: dict[str, Any] | None) -> RefusalInfo | None:
    if not error:
        return None
    return RefusalInfo(
        code=str(error.get("code", "invalid_decision")),
        message=str(error.get("message", "")),
        retryable=bool(error.get("retryable", False)),
        details=error.get("details"),
    )


def approval_view(
    row: dict[str, Any],
    now: datetime,
    *,
    question: dict[str, Any] | None = None,
    execution_id: str | None = None,
) -> ApprovalView:
    """A ledger proposal row (or Proposal's fields), with its open question if any."""
    preview = row["preview"]
    status = str(row["status"])
    if status in PENDING and now >= row["expires_at"]:
        status = "expired"
    return ApprovalView(
        proposal_id=row["proposal_id"],
        thread_id=row["thread_id"],
        operation=row["operation"],
        resource=row["resource"],
        status=status,
        pending=question is not None and status in PENDING,
        requested_by=row["subject"],
        title=str(preview.get("title", row["operation"])),
        target=str(preview.get("target", row["resource"])),
        fields=[field_view(f, row["resource"], preview) for f in preview.get("fields", [])],
        impact=str(preview.get("impact", "")),
        side_effect=str(preview.get("side_effect", "")),
        irreversible=bool(preview.get("irreversible", False)),
        external=bool(preview.get("external", False)),
        args_digest=row["args_digest"],
        expires_at=row["expires_at"],
        created_at=row.get("created_at"),
        decided_at=row.get("decided_at"),
        decided_by=row.get("decided_by"),
        superseded_by=row.get("superseded_by"),
        second_approver=row.get("second_approver"),
        execution_id=execution_id,
        confirmation=_confirmation(preview.get("confirmation")),
        error=_refusal(question.get("error")) if question else None,
    )


def field_view(field: dict[str, Any], resource: str, preview: dict[str, Any]) -> PreviewField:
    """One preview field for a person: its label, whether it may change, its closed set,
    and an amount's editable form in major units (converted exactly, never via float)."""
    name, value = str(field["name"]), field.get("value")
    currency = _currency_of(field, preview)
    # The id naming the target (order_id of "order:ord_1"): another id is another operation.
    names_target = bool(field.get("identifies")) or (
        isinstance(value, str) and resource.endswith(f":{value}")
    )
    return PreviewField(
        name=name,
        value=value,
        display=str(field.get("display", "")),
        label=str(field.get("label") or _label(name)),
        editable=not names_target,
        options=list(field["options"]) if field.get("options") else None,
        currency=currency,
        edit_value=format_major(value, currency) if currency and isinstance(value, int) else None,
    )


def _currency_of(field: dict[str, Any], preview: dict[str, Any]) -> str | None:
    source = field.get("money_of")
    if not source:
        return None
    for other in preview.get("fields", []):
        if other.get("name") == source and other.get("value") in CURRENCIES:
            return str(other["value"])
    return None


def _label(name: str) -> str:
    """amount_minor -> "Amount", ticket_id -> "Ticket", shipping_address -> "Shipping address"."""
    words = name.removesuffix("_minor").removesuffix("_id").replace("_", " ").strip()
    return words[:1].upper() + words[1:] if words else name


_TIER_WORDS = {"one_click": "One click confirms", "retype": "Retype to confirm"}


def _summary(block: dict[str, Any]) -> str:
    """ "Needs a second approver: amount ¥6,000.00, irreversible" (points left out)."""
    tier = str(block["tier"])
    if block.get("second_approver"):
        words = "Needs a second approver"
    else:
        words = _TIER_WORDS.get(tier, tier.replace("_", " ").capitalize())
    why = [
        str(r).rsplit(" (", 1)[0]
        for r in block.get("reasons") or []
        if not str(r).startswith("score ")
    ]
    return f"{words}: {', '.join(why)}" if why else words


def _confirmation(block: dict[str, Any] | None) -> ConfirmationInfo | None:
    if not block or "tier" not in block:
        return None
    return ConfirmationInfo(
        tier=str(block["tier"]),
        reasons=[str(r) for r in block.get("reasons") or []],
        second_approver=bool(block.get("second_approver")),
        retype_field=block.get("retype_field"),
        retype_hint=block.get("retype_hint"),
        summary=_summary(block),
    )


def proposal_row(proposal: Proposal) -> dict[str, Any]:
    return {
        "proposal_id": proposal.proposal_id,
        "thread_id": proposal.thread_id,
        "subject": proposal.subject,
        "second_approver": proposal.second_approver,
        "operation": proposal.operation,
        "resource": proposal.resource,
        "status": proposal.status.value,
        "preview": proposal.preview,
        "args_digest": proposal.args_digest,
        "expires_at": proposal.expires_at,
        "created_at": proposal.created_at,
        "decided_at": proposal.decided_at,
        "decided_by": proposal.decided_by,
        "superseded_by": proposal.superseded_by,
    }


def receipt_view(receipt: Receipt) -> ReceiptOut:
    return ReceiptOut(**receipt.to_dict())


def _role(message: BaseMessage) -> str:
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, ToolMessage):
        return "tool"
    if isinstance(message, SystemMessage):
        return "system"
    return "assistant"


def _call_view(call: Any, executed: dict[str, dict[str, Any]]) -> ToolCallView:
    args, edited = as_executed(call["args"], executed.get(str(call.get("id"))))
    return ToolCallView(id=call.get("id"), name=call["name"], args=args, edited=edited)


def message_view(
    message: BaseMessage, executed: dict[str, dict[str, Any]] | None = None
) -> MessageView:
    """One message; `executed` (graph.messages.executed_values over the thread) puts
    the values that ran, after an approver's edit, in place of the model's."""
    calls = message.tool_calls if isinstance(message, AIMessage) else []
    return MessageView(
        id=message.id,
        role=_role(message),  # type: ignore[arg-type]
        content=message.text,
        tool_calls=[_call_view(c, executed or {}) for c in calls],
        tool_call_id=message.tool_call_id if isinstance(message, ToolMessage) else None,
        name=message.name,
        status=message.status if isinstance(message, ToolMessage) else None,
    )
