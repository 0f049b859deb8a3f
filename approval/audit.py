"""Audit rows for the protocol's steps: one per tool call, decision and execution.

Arguments are stored with their digest; a malformed argument (a float, say) is still
audited, just not hashed. Errors are stored as codes and structured bodies, never traces.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from writegate.approval.canonical import digest
from writegate.approval.models import AuditRecord, Identity, Proposal


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
    return AuditRecord(
        tenant_id=identity.tenant_id,
        user_id=identity.user_id,
        thread_id=thread_id,
        tool_name=tool_name,
        event=event,
        arguments=args,
        arguments_hash=safe_digest(args),
        status=status,
        result=result,
        error_code=error_code,
        duration_ms=elapsed_ms(started),
        request_key=proposal.request_key if proposal else None,
        proposal_id=proposal.proposal_id if proposal else None,
        **digests,
    )


def decision_audit(
    identity: Identity, proposal: Proposal, status: str, started: float
) -> AuditRecord:
    return replace(
        call_audit(
            identity,
            proposal.thread_id,
            proposal.operation,
            "decide",
            proposal.args,
            status,
            started,
            proposal=proposal,
            requested_digest=proposal.args_digest,
            approved_digest=proposal.args_digest if status == "confirmed" else None,
        ),
        approver=identity.user_id,
    )
