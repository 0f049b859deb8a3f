"""Audit rows for the protocol's steps: one per tool call, decision and execution.

Arguments are stored with their digest; a malformed argument (a float, say) is still
audited, just not hashed. Errors are stored as codes and structured bodies, never traces.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from writegate.approval.canonical import DIGEST_SCHEME, digest
from writegate.approval.errors import WritegateError
from writegate.approval.models import AuditRecord, Execution, Identity, Proposal

# Who the reconciler's rows name: its settlements, and its checks after a promotion.
RECONCILER = "system:reconciler"


def elapsed_ms(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)


def safe_digest(args: dict[str, Any] | None) -> str | None:
    if args is None:
        return None
    try:
        return digest(args)
    except ValueError:  # a malformed argument (e.g. a float) is audited, not hashed
        return None


def call_audit(
    identity: Identity,
    thread_id: str | None,
    tool_name: str,
    event: str,
    args: dict[str, Any] | None,
    status: str,
    started: float,
    *,
    result: dict[str, Any] | None = None,
    error_code: str | None = None,
    proposal: Proposal | None = None,
    **digests: str | None,
) -> AuditRecord:
    """One call's audit row. A proposal's own arguments are hashed already: a
    proposal's digest under the current scheme is theirs, and is not computed again."""
    if proposal is not None and args is proposal.args and proposal.digest_scheme == DIGEST_SCHEME:
        arguments_hash: str | None = proposal.args_digest
    else:
        arguments_hash = safe_digest(args)
    return AuditRecord(
        tenant_id=identity.tenant_id,
        user_id=identity.user_id,
        thread_id=thread_id,
        tool_name=tool_name,
        event=event,
        arguments=args,
        arguments_hash=arguments_hash,
        status=status,
        result=result,
        error_code=error_code,
        duration_ms=elapsed_ms(started),
        request_key=proposal.request_key if proposal else None,
        proposal_id=proposal.proposal_id if proposal else None,
        **digests,
    )


def decision_audit(
    identity: Identity,
    proposal: Proposal,
    status: str,
    started: float,
    *,
    event: str = "decide",
    result: dict[str, Any] | None = None,
) -> AuditRecord:
    """A person's decision on a proposal: the requester's, or an approver's (`event`);
    `result`: what they said with it (a decline's reason)."""
    return replace(
        call_audit(
            identity,
            proposal.thread_id,
            proposal.operation,
            event,
            proposal.args,
            status,
            started,
            result=result,
            proposal=proposal,
            requested_digest=proposal.args_digest,
            approved_digest=proposal.args_digest if status == "confirmed" else None,
        ),
        approver=identity.user_id,
    )


def refusal_audit(
    identity: Identity, event: str, proposal_id: str, exc: WritegateError, started: float
) -> AuditRecord:
    """A refused approval step (second approval, revocation): who tried what, and why not."""
    return AuditRecord(
        tenant_id=identity.tenant_id,
        user_id=identity.user_id,
        thread_id=None,
        tool_name="approval",
        event=event,
        arguments={"proposal_id": proposal_id},
        arguments_hash=None,
        status="rejected",
        result=exc.to_dict(),
        error_code=exc.code,
        duration_ms=elapsed_ms(started),
        proposal_id=proposal_id,
        approver=identity.user_id,
    )


def execution_audit(
    identity: Identity, proposal: Proposal | None, execution: Execution, started: float
) -> AuditRecord:
    """An execution's row: requested, approved and executed digests side by side."""
    return AuditRecord(
        tenant_id=execution.tenant_id,
        user_id=identity.user_id,
        thread_id=proposal.thread_id if proposal else None,
        tool_name=execution.operation,
        event="execute",
        arguments=execution.args,
        arguments_hash=execution.args_digest,
        status=execution.status.value,
        result=execution.result,
        error_code=execution.error_code,
        duration_ms=elapsed_ms(started),
        request_key=execution.request_key,
        proposal_id=execution.proposal_id,
        # The last approval's person: the second approver where the tier asked for one.
        approver=(proposal.second_approver or proposal.decided_by) if proposal else None,
        requested_digest=proposal.args_digest if proposal else None,
        approved_digest=execution.args_digest,
        executed_digest=execution.args_digest,
    )


def duplicate_audit(
    identity: Identity, proposal: Proposal, execution: Execution, started: float
) -> AuditRecord:
    """A second request for an operation that already has its execution, in the thread
    of the proposal it names."""
    return AuditRecord(
        tenant_id=execution.tenant_id,
        user_id=identity.user_id,
        thread_id=proposal.thread_id,
        tool_name=execution.operation,
        event="execute",
        arguments=None,
        arguments_hash=execution.args_digest,
        status="duplicate",
        result={"execution_status": execution.status.value},
        error_code="already_consumed",
        duration_ms=elapsed_ms(started),
        request_key=execution.request_key,
        proposal_id=execution.proposal_id,
    )


def execution_refusal_audit(
    identity: Identity,
    proposal_id: str | None,
    operation: str | None,
    exc: WritegateError,
    started: float,
) -> AuditRecord:
    """A refused execution (a forged, replayed or mismatched confirmation): why not."""
    return AuditRecord(
        tenant_id=identity.tenant_id,
        user_id=identity.user_id,
        thread_id=None,
        tool_name=operation or "?",
        event="execute",
        arguments=None,
        arguments_hash=None,
        status="refused",
        result=exc.to_dict(),
        error_code=exc.code,
        duration_ms=elapsed_ms(started),
        proposal_id=proposal_id,
    )


def reconcile_audit(execution: Execution, actor: str, detail: dict[str, Any]) -> AuditRecord:
    """A reconciler's step on an execution (claimed, found, retried, escalated...)."""
    return AuditRecord(
        tenant_id=execution.tenant_id,
        user_id=actor,
        thread_id=None,
        tool_name=execution.operation,
        event="reconcile",
        arguments=None,
        arguments_hash=execution.args_digest,
        status=execution.status.value,
        result=detail,
        error_code=execution.error_code,
        request_key=execution.request_key,
        proposal_id=execution.proposal_id,
        executed_digest=execution.args_digest,
    )


def failover_audit(
    tenant_id: str,
    operation: str,
    request_key: str,
    proposal: Proposal | None,
    detail: dict[str, Any],
) -> AuditRecord:
    """A reconciler's finding after a promotion that no execution row carries
    (approval/failover.py): escalated, with why; `proposal` None if the ledger lost it."""
    return AuditRecord(
        tenant_id=tenant_id,
        user_id=RECONCILER,
        thread_id=proposal.thread_id if proposal else None,
        tool_name=operation,
        event="reconcile",
        arguments=proposal.args if proposal else None,
        arguments_hash=proposal.args_digest if proposal else None,
        status="escalated",
        result=detail,
        request_key=request_key,
        proposal_id=proposal.proposal_id if proposal else None,
    )
