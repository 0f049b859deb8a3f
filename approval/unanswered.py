"""Close a tool call that a new message left unanswered.

A person may write a new message while a write waits for their answer. Their new
message supersedes the question: the call's proposal is cancelled (audited, with why),
so it cannot run later and does not wait until it expires, and the caller learns what
became of the call, to tell the model in the call's own tool message. A call whose
write already ran keeps its receipt; one that ended some other way says how.

A client may also write a tool message of its own for the waiting call (Agent Chat UI
does, "Successfully handled tool call.", before every new message). It answers nothing:
the proposal is cancelled all the same, and the caller replaces the client's words.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Protocol

from writegate.approval.audit import decision_audit
from writegate.approval.errors import Cancelled, ForeignCall, WritegateError
from writegate.approval.models import DECIDABLE, Identity, Proposal, ProposalStatus, Receipt
from writegate.approval.outcomes import execution_outcome, proposal_error
from writegate.approval.store import LedgerReads, LedgerStore, LedgerTx

# What the cancellation's audit row and tool message say about why.
SUPERSEDED = {"reason": "new_message", "why": "a new message came instead of an answer"}
# The same, when the client also wrote a tool message for the call (Agent Chat UI does).
CLIENT_ANSWERED = {**SUPERSEDED, "client_answer": "ignored: a client's tool message is no answer"}
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


def _latest_seen(
    reads: LedgerReads, thread_id: str, message_id: str, tool_call_id: str
) -> Proposal | None:
    """The call's proposal, the latest of its edits; None if it has none."""
    proposal = reads.get_call_proposal(thread_id, message_id, tool_call_id)
    while proposal is not None and proposal.superseded_by:  # edited: the latest one
        proposal = reads.get_proposal(proposal.superseded_by)
    return proposal


def _latest(
    tx: LedgerTx, identity: Identity, thread_id: str, message_id: str, tool_call_id: str
) -> Proposal | None:
    """The call's proposal (the latest of its edits), locked; None if it has none."""
    proposal = _latest_seen(tx, thread_id, message_id, tool_call_id)
    if proposal is None:
        return None
    if (proposal.subject, proposal.tenant_id) != (identity.user_id, identity.tenant_id):
        raise ForeignCall()
    return tx.get_proposal(proposal.proposal_id, for_update=True) or proposal


def close_client_answered(
    host: Host, identity: Identity, thread_id: str, message_id: str, tool_call_id: str
) -> Cancelled | None:
    """A tool message answers the call: writegate's own once the write ended, but one a
    client wrote if the proposal still waits. Then it is cancelled (committed, audited)
    as a new message cancels it, and the cancellation returned; else None."""
    started = time.perf_counter()
    # Nearly always writegate's own answer to a write that ended: one read, no lock.
    with host.store.reading() as reads:
        seen = _latest_seen(reads, thread_id, message_id, tool_call_id)
    if seen is None or seen.status not in _CLOSABLE:
        return None
    with host.store.transaction() as tx:
        proposal = _latest(tx, identity, thread_id, message_id, tool_call_id)
        if proposal is None or proposal.status not in _CLOSABLE:
            return None
        cancel_locked(tx, identity, proposal, started, CLIENT_ANSWERED)
    return closed(proposal.proposal_id)


def close_unanswered(
    host: Host, identity: Identity, thread_id: str, message_id: str, tool_call_id: str
) -> Receipt:
    """The receipt of the call's write if it ran; else raises what became of it, after
    cancelling it (committed) if it was still waiting. A call with no proposal ran
    nothing."""
    started = time.perf_counter()
    execution = None
    with host.store.transaction() as tx:
        proposal = _latest(tx, identity, thread_id, message_id, tool_call_id)
        if proposal is None:
            raise closed(None)
        if proposal.status in _CLOSABLE:
            cancel_locked(tx, identity, proposal, started)
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


def cancel_locked(
    tx: LedgerTx,
    identity: Identity,
    proposal: Proposal,
    started: float,
    why: dict[str, Any] = SUPERSEDED,
) -> None:
    """Cancel the proposal locked in `tx` (audited with `why`); a confirmed one's token
    is revoked with it."""
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
    tx.insert_audit(decision_audit(identity, cancelled, "cancelled", started, result=dict(why)))
