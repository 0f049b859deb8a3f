"""One place that maps a ledger state to what the caller is told.

A succeeded execution gives its receipt; every other state is an error with its own
code, so a model or client can tell "being executed" from "unknown" from "refused".
"""

from __future__ import annotations

from writegate.approval.errors import (
    Cancelled,
    Declined,
    InProgress,
    OutcomeUnknown,
    ProposalExpired,
    ProposalSuperseded,
    Revoked,
    WritegateError,
    error_for_code,
)
from writegate.approval.models import Execution, ExecutionStatus, ProposalStatus, Receipt


def receipt_of(execution: Execution) -> Receipt:
    return Receipt(
        execution_id=execution.execution_id,
        request_key=execution.request_key,
        operation=execution.operation,
        status=execution.status.value,
        args_digest=execution.args_digest,
        provider_ref=execution.provider_ref,
        completed_at=execution.completed_at,
        result=execution.result or {},
    )


def execution_outcome(execution: Execution) -> Receipt:
    """The receipt of a finished execution, or the error that describes where it is."""
    status = execution.status
    ids = {"execution_id": execution.execution_id, "request_key": execution.request_key}
    if status is ExecutionStatus.SUCCEEDED:
        return receipt_of(execution)
    if status in (ExecutionStatus.PREPARED, ExecutionStatus.RUNNING):
        raise InProgress(**ids)
    if status in (ExecutionStatus.UNKNOWN, ExecutionStatus.ESCALATED):
        raise OutcomeUnknown(state=status.value, **ids)
    raise error_for_code(execution.error_code or "execution_failed", state=status.value, **ids)


_TERMINAL_PROPOSAL_ERRORS: dict[ProposalStatus, type[WritegateError]] = {
    ProposalStatus.DECLINED: Declined,
    ProposalStatus.CANCELLED: Cancelled,
    ProposalStatus.EXPIRED: ProposalExpired,
    ProposalStatus.SUPERSEDED: ProposalSuperseded,
    ProposalStatus.REVOKED: Revoked,
}


def proposal_error(
    status: ProposalStatus, proposal_id: str, reason: str | None = None
) -> WritegateError | None:
    """The error for a proposal that ended without execution, if it did; `reason`, the
    person's own words when they declined, goes with it as `person_said`."""
    cls = _TERMINAL_PROPOSAL_ERRORS.get(status)
    if cls is None:
        return None
    said = {"person_said": reason} if reason and status is ProposalStatus.DECLINED else {}
    return cls(proposal_id=proposal_id, state=status.value, **said)
