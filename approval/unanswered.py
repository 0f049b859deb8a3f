"""Close a tool call that a new message left unanswered.

A person may write a new message while a write waits for their answer. Their new
message supersedes the question: the call's proposal is cancelled (audited, with why),
so it cannot run later and does not wait until it expires, and the caller learns what
became of the call, to tell the model in the call's own tool message. A call whose
write already ran keeps its receipt; one that ended some other way says how.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Protocol

from writegate.approval.audit import decision_audit
from writegate.approval.errors import Cancelled, ForeignCall, WritegateError
from writegate.approval.models import DECIDABLE, Identity, Proposal, ProposalStatus, Receipt
from writegate.approval.outcomes import execution_outcome, proposal_error
from writegate.approval.store import LedgerStore, LedgerTx

# What the cancellation's audit row and tool message say about why.
SUPERSEDED = {"reason": "new_message", "why": "a new message came instead of an answer"}
# A pending question, or confirmed and not run yet: nothing will run it now.
_CLOSABLE = (*DECIDABLE, ProposalStatus.CONFIRMED)


class Host(Protocol):
    store: LedgerStore


def closed(proposal_id: str | None, *, write: bool = True) -> Cancelled:
    """What an unanswered call is told: cancelled, or for a read, not kept."""
    if not write:
        return Cancelled(
            "the person wrote a new message before this call's result was kept; call it "
            "again if their new message still needs it.",
            reason=SUPERSEDED["reason"],
        )
    return Cancelled(
        "the person wrote a new message instead of answering; this call was cancelled and "
        "nothing ran. Do not retry it on your own: answer their new message.",
        proposal_id=proposal_id,
        state=ProposalStatus.CANCELLED.value,
        reason=SUPERSEDED["reason"],
    )


def close_unanswered(
    host: Host, identity: Identity, thread_id: str, message_id: str, tool_call_id: str
) -> Receipt:
    """The receipt of the call's write if it ran; else raises what became of it, after
    cancelling it (committed) if it was still waiting. A call with no proposal ran
    nothing."""
    started = time.perf_counter()
    execution = None
    with host.store.transaction() as tx:
        proposal = tx.get_call_proposal(thread_id, message_id, tool_call_id)
        while proposal is not None and proposal.superseded_by:  # edited: the latest one
            proposal = tx.get_proposal(proposal.superseded_by)
        if proposal is None:
            raise closed(None)
        if (proposal.subject, proposal.tenant_id) != (identity.user_id, identity.tenant_id):
            raise ForeignCall()
        proposal = tx.get_proposal(proposal.proposal_id, for_update=True) or proposal
        if proposal.status in _CLOSABLE:
            _cancel(tx, identity, proposal, started)
        elif proposal.status is ProposalStatus.EXECUTED:
            execution = tx.get_execution(proposal_id=proposal.proposal_id)
    if execution is not None:
        return execution_outcome(execution)
    if proposal.status in _CLOSABLE:
        raise closed(proposal.proposal_id)
    ended: WritegateError | None = proposal_error(
        proposal.status, proposal.proposal_id, proposal.decision_reason
    )
    raise ended or closed(proposal.proposal_id)


def _cancel(tx: LedgerTx, identity: Identity, proposal: Proposal, started: float) -> None:
    """Cancel the locked proposal in `tx`; a confirmed one's token is revoked with it."""
    moved = tx.transition_proposal(
        proposal.proposal_id,
        proposal.status,
        ProposalStatus.CANCELLED,
        decided_by=identity.user_id,
    )
    assert moved  # locked by this transaction and seen in that status
    if proposal.status is ProposalStatus.CONFIRMED:
        tx.revoke_token(proposal.proposal_id)
    cancelled = replace(proposal, status=ProposalStatus.CANCELLED)
    tx.insert_audit(
        decision_audit(identity, cancelled, "cancelled", started, result=dict(SUPERSEDED))
    )
