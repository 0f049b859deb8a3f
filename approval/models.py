"""The protocol's records: identities, proposals, tokens, executions, receipts.

States are Enums kept here, in one place. Records are frozen dataclasses: a proposal
is a snapshot, and nothing downstream may edit what a person confirmed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from writegate.approval.canonical import DIGEST_SCHEME
from writegate.approval.inert import inert_preview, inert_text


class SideEffect(StrEnum):
    NONE = "none"
    REVERSIBLE = "reversible"
    IRREVERSIBLE = "irreversible"
    EXTERNAL = "external"


class ProposalStatus(StrEnum):
    AWAITING = "awaiting_confirmation"
    AWAITING_SECOND = "awaiting_second_approval"  # the requester confirmed; no token yet
    CONFIRMED = "confirmed"
    DECLINED = "declined"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    SUPERSEDED = "superseded"
    REVOKED = "revoked"
    EXECUTED = "executed"  # a token was consumed; the execution row tells the rest


class TokenStatus(StrEnum):
    ISSUED = "issued"
    CONSUMED = "consumed"
    REVOKED = "revoked"


class ExecutionStatus(StrEnum):
    PREPARED = "prepared"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED_RETRYABLE = "failed_retryable"
    FAILED_TERMINAL = "failed_terminal"
    UNKNOWN = "unknown"
    ESCALATED = "escalated"


# Each set of states is defined here, once; SQL reads the same sets (checkpoints/statuses.py).
# Waiting on a person: the requester, or a second approver.
DECIDABLE = frozenset({ProposalStatus.AWAITING, ProposalStatus.AWAITING_SECOND})
# Pending: a question still open, or confirmed and not yet executed.
PENDING = frozenset({*DECIDABLE, ProposalStatus.CONFIRMED})
# Reconciliation will finish these: the downstream may or may not have acted.
RECONCILABLE = frozenset(
    {ExecutionStatus.RUNNING, ExecutionStatus.UNKNOWN, ExecutionStatus.FAILED_RETRYABLE}
)
# Settled: a final receipt exists, and nothing will change it.
SETTLED = frozenset({ExecutionStatus.SUCCEEDED, ExecutionStatus.FAILED_TERMINAL})
# Open: not settled yet, so the same request may not be proposed again.
OPEN_EXECUTION = frozenset({*RECONCILABLE, ExecutionStatus.ESCALATED})


@dataclass(frozen=True)
class Identity:
    """Who acts. Always from the host's authenticated context, never from arguments."""

    user_id: str
    tenant_id: str
    roles: frozenset[str] = frozenset()
    trust: str | None = None  # the host's judgement of user and device (e.g. "low")


@dataclass(frozen=True)
class Preview:
    """What the person sees. Display values are for eyes only and never feed execution."""

    title: str
    operation: str
    target: str
    fields: list[dict[str, Any]]  # {"name", "value" (machine), "display"}
    impact: str
    side_effect: SideEffect
    irreversible: bool
    external: bool

    def to_dict(self) -> dict[str, Any]:
        return inert_preview(
            {
                "title": self.title,
                "operation": self.operation,
                "target": self.target,
                "fields": self.fields,
                "impact": self.impact,
                "side_effect": self.side_effect.value,
                "irreversible": self.irreversible,
                "external": self.external,
            }
        )


@dataclass(frozen=True)
class Proposal:
    proposal_id: str
    thread_id: str
    tool_call_id: str
    subject: str
    tenant_id: str
    operation: str
    resource: str
    args: dict[str, Any]
    args_digest: str
    fingerprint: str
    state_version: int
    preview: dict[str, Any]
    policy_version: str
    request_key: str
    status: ProposalStatus
    created_at: datetime
    expires_at: datetime
    superseded_by: str | None = None
    decided_at: datetime | None = None
    decided_by: str | None = None
    tier: str = "one_click"
    risk: dict[str, Any] | None = None  # the assessment: score, reasons, frozen inputs
    second_approver: str | None = None
    second_approved_at: datetime | None = None
    revoked_by: str | None = None
    revoked_at: datetime | None = None
    digest_scheme: str = DIGEST_SCHEME  # how args_digest was computed (approval/canonical.py)
    # The model message that made the call: with `thread_id` and `tool_call_id`, the key of
    # one call (providers reuse ids such as call_0 in later turns). "" for callers with no
    # message (the MCP server).
    message_id: str = ""
    decision_reason: str | None = None  # the person's own words when they declined

    def __post_init__(self) -> None:
        # What every way in shows of a proposal, inert whether it was made now or read
        # back (a preview stored by an earlier release was stored as it came).
        object.__setattr__(self, "preview", inert_preview(self.preview))
        if self.decision_reason is not None:
            object.__setattr__(self, "decision_reason", inert_text(self.decision_reason))


@dataclass(frozen=True)
class Token:
    """A confirmation's one-time token. It refers to its proposal, which holds what it is
    bound to (subject, tenant, operation, resource, arguments and their digest, request
    key, tier): the foreign key guarantees those, so they are never copied here. Its own
    fields are only what was fixed at the confirm (docs/protocol.md, "The rows")."""

    token_hash: str
    proposal_id: str
    audience: str  # the policy's audience at the confirm: a token for one service only
    policy_version: str  # the policy it was confirmed under: a later one may ask anew
    issued_at: datetime
    expires_at: datetime  # its own lifetime (the tier's), within the proposal's
    status: TokenStatus
    execution_id: str | None = None


@dataclass(frozen=True)
class Execution:
    """An execution as it is read: its own columns (the claim and its progress), and
    what it runs, `tenant_id` to `fingerprint` and `digest_scheme`, from its proposal
    (joined: the row refers to the proposal and copies none of it)."""

    execution_id: str
    request_key: str
    token_hash: str
    proposal_id: str
    tenant_id: str
    subject: str
    operation: str
    resource: str
    args: dict[str, Any]
    args_digest: str
    fingerprint: str
    status: ExecutionStatus
    created_at: datetime
    updated_at: datetime
    attempts: int = 0
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    provider_ref: str | None = None
    result: dict[str, Any] | None = None
    error_code: str | None = None
    completed_at: datetime | None = None
    digest_scheme: str = DIGEST_SCHEME


@dataclass(frozen=True)
class Receipt:
    execution_id: str
    request_key: str
    operation: str
    status: str
    args_digest: str
    provider_ref: str | None
    completed_at: datetime | None
    result: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from writegate.approval.canonical import to_rfc3339

        return {
            "execution_id": self.execution_id,
            "request_key": self.request_key,
            "operation": self.operation,
            "status": self.status,
            "args_digest": self.args_digest,
            "provider_ref": self.provider_ref,
            "completed_at": to_rfc3339(self.completed_at) if self.completed_at else None,
            "result": self.result,
        }


@dataclass(frozen=True)
class AuditRecord:
    """One row per tool call, read or write, and per ledger transition worth keeping."""

    tenant_id: str
    user_id: str
    thread_id: str | None
    tool_name: str
    event: str  # read, propose, decide, execute, reconcile
    arguments: dict[str, Any] | None
    arguments_hash: str | None
    status: str
    result: dict[str, Any] | None = None
    error_code: str | None = None
    duration_ms: int = 0
    request_key: str | None = None
    proposal_id: str | None = None
    approver: str | None = None
    requested_digest: str | None = None
    approved_digest: str | None = None
    executed_digest: str | None = None
