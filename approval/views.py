"""What a library user reads back from the ledger: typed, frozen snapshots.

`AuditRow` is one row of the audit trail (`Writegate.audit`); `ProposalView` is one
proposal as its requester or an approver sees it (`Writegate.awaiting_second_approval`,
`approve_as_second`, `decline_as_second`, `revoke`). Both are copies: changing one
changes nothing in the ledger. The ledger's own records (`approval/models.py`) stay
internal, so their shape may change without breaking a user.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Self

from writegate.approval.contract import PreviewView
from writegate.approval.errors import ValidationFailed
from writegate.approval.models import Proposal

MAX_AUDIT_ROWS = 10_000


@dataclass(frozen=True)
class AuditRow:
    """One audit row: a tool call, a person's decision, an execution or a reconciler's
    step. Arguments and results are stored as they were, errors as codes."""

    audit_id: int
    """Ascending in the order rows were written."""
    created_at: datetime
    """When it was written, on the database's clock."""
    tenant_id: str
    user_id: str
    """Who acted: the requester, an approver, or a reconciler's name."""
    thread_id: str | None
    """The conversation it came from, when there was one."""
    tool_name: str
    """The tool (`approval` for a refused second approval or revocation)."""
    event: str
    """`read`, `propose`, `decide`, `execute`, `reconcile`, `second_approval`, ..."""
    status: str
    """What came of it: `succeeded`, `confirmed`, `rejected`, `duplicate`, ..."""
    error_code: str | None
    """The refusal's stable code, when it was refused."""
    request_key: str | None
    """The operation's idempotency key, passed downstream."""
    proposal_id: str | None
    approver: str | None
    """Who decided, for a decision or an execution."""
    arguments: dict[str, Any] | None
    arguments_hash: str | None
    requested_digest: str | None
    """The digest of the arguments the model asked for."""
    approved_digest: str | None
    """The digest of the arguments the person confirmed."""
    executed_digest: str | None
    """The digest of the arguments that ran; all three are equal, or nothing ran."""
    result: dict[str, Any] | None
    """The result, or the refusal's structured body."""
    duration_ms: int

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Self:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})


def audit_filters(tenant_id: Any, limit: Any, *ids: Any) -> tuple[str, int]:
    """The tenant (required: rows never cross tenants) and the row limit, checked; `ids`
    (a thread's, a proposal's) are text or None."""
    if not isinstance(tenant_id, str) or not tenant_id.strip():
        raise ValidationFailed("tenant_id is required: the audit is read one tenant at a time")
    if type(limit) is not int or not 1 <= limit <= MAX_AUDIT_ROWS:
        raise ValidationFailed(f"limit must be a whole number from 1 to {MAX_AUDIT_ROWS}")
    if any(given is not None and not isinstance(given, str) for given in ids):
        raise ValidationFailed("thread_id and proposal_id are text, or None for any")
    return tenant_id, limit


@dataclass(frozen=True)
class ProposalView:
    """One proposal: the exact preview a person decides on, and where it stands."""

    proposal_id: str
    status: str
    """`awaiting_confirmation`, `awaiting_second_approval`, `confirmed`, `executed`,
    `declined`, `cancelled`, `expired`, `superseded` or `revoked`."""
    tenant_id: str
    requested_by: str
    """The user who asked; the token, once issued, is theirs alone."""
    thread_id: str
    operation: str
    resource: str
    args: dict[str, Any]
    """The canonical arguments that run, exactly."""
    args_digest: str
    preview: PreviewView
    """What the requester saw, with its `confirmation` block (tier and reasons)."""
    tier: str
    policy_version: str
    created_at: datetime
    expires_at: datetime
    """When the question lapses (database clock; at this instant it has)."""
    decided_by: str | None
    """Who made the last decision (the requester's confirm, a decline)."""
    second_approver: str | None
    """The approver who approved it, once one has."""
    revoked_by: str | None
    outcome: dict[str, Any] | None = None
    """After a second approval, the write it ran: its receipt (`status` "succeeded"),
    or the error body saying why it did not run or is not settled yet
    (`state_changed`, `outcome_unknown`, ...). None everywhere else."""

    @classmethod
    def of(cls, proposal: Proposal, outcome: dict[str, Any] | None = None) -> Self:
        preview: PreviewView = proposal.preview  # type: ignore[assignment]  # stored as shown
        return cls(
            proposal_id=proposal.proposal_id,
            status=proposal.status.value,
            tenant_id=proposal.tenant_id,
            requested_by=proposal.subject,
            thread_id=proposal.thread_id,
            operation=proposal.operation,
            resource=proposal.resource,
            args=proposal.args,
            args_digest=proposal.args_digest,
            preview=preview,
            tier=proposal.tier,
            policy_version=proposal.policy_version,
            created_at=proposal.created_at,
            expires_at=proposal.expires_at,
            decided_by=proposal.decided_by,
            second_approver=proposal.second_approver,
            revoked_by=proposal.revoked_by,
            outcome=outcome,
        )
