"""Response bodies of the HTTP API, as pydantic models.

Together with `inputs.py` they are the OpenAPI document: every route declares its
response model and its error responses, so a client generated from `/openapi.json`
is accurate.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class OutModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- errors ---------------------------------------------------------------------------


class ErrorBody(OutModel):
    """Every error: a stable code, a message for people, whether retrying can help."""

    code: str = Field(examples=["proposal_expired"])
    message: str
    retryable: bool
    request_id: str
    details: dict[str, Any] | None = None
    state: ApprovalView | None = Field(
        default=None, description="The approval as it is now (409 and 410 answers)."
    )


# -- approvals ------------------------------------------------------------------------


class PreviewField(OutModel):
    name: str
    value: Any = Field(description="Machine value, exactly what executes.")
    display: str = Field(description="For eyes only; never feeds execution.")
    label: str = Field(default="", description="The field in words, e.g. 'Amount'.")
    editable: bool = Field(
        default=True,
        description="False for the id that names the target: changing it is another operation.",
    )
    options: list[str] | None = Field(default=None, description="The closed set it takes.")
    currency: str | None = Field(
        default=None, description="For an amount in minor units: the currency it is in."
    )
    edit_value: str | None = Field(
        default=None,
        description="The value as a person edits it: an amount in major units ('25.00'). "
        "An edit may send this form as a string; the server converts it exactly.",
    )


class RefusalInfo(OutModel):
    code: str
    message: str
    retryable: bool
    details: dict[str, Any] | None = None


class ConfirmationInfo(OutModel):
    """How hard confirming is (the policy's tier for this proposal) and why."""

    tier: str
    reasons: list[str] = []
    second_approver: bool = False
    retype_field: str | None = None
    retype_hint: str | None = None
    summary: str = Field(default="", description="The tier in words, with why.")


class ApprovalView(OutModel):
    """One proposal as a person sees it: the exact preview and where it stands."""

    proposal_id: str
    thread_id: str
    operation: str
    resource: str
    status: str = Field(
        description="awaiting_confirmation, awaiting_second_approval, confirmed, executed, "
        "declined, cancelled, expired, superseded or revoked (an open one past its expiry "
        "reads as expired)."
    )
    pending: bool = Field(description="A question for it is open in its thread.")
    requested_by: str
    title: str
    target: str
    fields: list[PreviewField]
    impact: str
    side_effect: str
    irreversible: bool
    external: bool
    args_digest: str
    expires_at: datetime
    created_at: datetime | None = None
    decided_at: datetime | None = None
    decided_by: str | None = None
    superseded_by: str | None = None
    second_approver: str | None = None
    execution_id: str | None = None
    confirmation: ConfirmationInfo | None = None
    error: RefusalInfo | None = Field(
        default=None, description="Why the last answer to its open question was refused."
    )


class ReviewResult(OutModel):
    proposal_id: str
    outcome: Literal["approved", "declined"]
    approval: ApprovalView
    receipt: Receipt | None = Field(
        default=None, description="The write the approval ran, once it succeeded."
    )
    error: dict[str, Any] | None = Field(
        default=None,
        description="Approved, but the write did not run (`state_changed`, ...) or is not "
        "settled yet (`outcome_unknown`): its error body. The approval stands.",
    )


class ApprovalList(OutModel):
    approvals: list[ApprovalView]
    now: datetime = Field(description="The server's clock, for countdowns.")
    next_cursor: str | None = Field(
        default=None, description="Pass as ?cursor= for the next page; null on the last."
    )


class Receipt(OutModel):
    execution_id: str
    request_key: str
    operation: str
    status: str
    args_digest: str
    provider_ref: str | None
    completed_at: str | None
    result: dict[str, Any]


# -- threads and messages -------------------------------------------------------------


class ToolCallView(OutModel):
    id: str | None
    name: str
    args: dict[str, Any] = Field(description="The values that ran, once a receipt says so.")
    edited: list[str] = Field(
        default=[], description="Arguments an approver's edit changed from the model's."
    )


class MessageView(OutModel):
    id: str | None
    role: Literal["user", "assistant", "tool", "system"]
    content: str
    tool_calls: list[ToolCallView] = []
    tool_call_id: str | None = None
    name: str | None = None
    status: str | None = None


class ThreadSummary(OutModel):
    thread_id: str
    created_at: datetime


class ThreadList(OutModel):
    threads: list[ThreadSummary]
    next_cursor: str | None = Field(
        default=None, description="Pass as ?cursor= for the next page; null on the last."
    )


class ThreadView(OutModel):
    thread_id: str
    created_at: datetime
    messages: list[MessageView]
    approvals: list[ApprovalView] = Field(description="Every proposal of the thread, oldest first.")
    pending: list[ApprovalView] = Field(description="Those waiting for a decision now.")
    now: datetime


# -- decisions ------------------------------------------------------------------------


class DecisionResult(OutModel):
    proposal_id: str
    action: str
    outcome: Literal[
        "executed", "declined", "cancelled", "edited", "unchanged", "awaiting_second_approval"
    ] = Field(
        description="`unchanged`: an edit whose arguments equal the current ones; the "
        "approval still waits, as it was."
    )
    replayed: bool = Field(
        description="True when the answer comes from the ledger or an earlier click, "
        "not from this request's own resume."
    )
    approval: ApprovalView
    receipt: Receipt | None = None
    next_approval: ApprovalView | None = Field(
        default=None, description="After an edit: the new proposal to decide."
    )
    messages: list[MessageView] = Field(description="What the agent said after the decision.")
    pending: list[ApprovalView]


# -- the rest -------------------------------------------------------------------------


class Me(OutModel):
    user_id: str
    tenant_id: str
    roles: list[str]
    key_id: str


class AuditRow(OutModel):
    audit_id: int
    created_at: datetime
    tenant_id: str
    user_id: str
    thread_id: str | None
    tool_name: str
    event: str
    arguments: Any
    arguments_hash: str | None
    result: Any
    status: str
    error_code: str | None
    duration_ms: int
    request_key: str | None
    proposal_id: str | None
    approver: str | None
    requested_digest: str | None
    approved_digest: str | None
    executed_digest: str | None


class AuditList(OutModel):
    rows: list[AuditRow]
    next_cursor: str | None = Field(
        default=None, description="Pass as ?cursor= for the next page; null on the last."
    )


class Health(OutModel):
    status: Literal["ok"]
    database: Literal["ok"]


ErrorBody.model_rebuild()
ReviewResult.model_rebuild()
