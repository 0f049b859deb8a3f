"""Second approval and revocation: decisions made by someone other than the requester.

A second approver is a different user of the same tenant with the `approver` role; the
database refuses a requester approving their own request even if this code did not.
Approving issues the token, still bound to the requester (the subject); the executor's
approval (`Executor.approve_as_second`) consumes it at once, claiming the write in the
approval's own transaction, and runs it for the requester. Revocation (approver, admin
or the requester) stops an approval that has not executed; once execution started it
says so instead of pretending to undo anything. Refused attempts are audited in the actor's tenant.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from writegate.approval.audit import decision_audit, refusal_audit
from writegate.approval.canonical import new_secret
from writegate.approval.errors import (
    Forbidden,
    NotFound,
    ProposalExpired,
    ProposalNotPending,
    RevokeTooLate,
    SelfApproval,
    WritegateError,
)
from writegate.approval.models import (
    PENDING,
    AuditRecord,
    Identity,
    Proposal,
    ProposalStatus,
    Token,
)
from writegate.approval.store import LedgerStore, LedgerTx
from writegate.approval.views import Page, PageArgs, proposal_after, proposal_key

MAX_QUEUE_ROWS = 1_000  # one page of a review queue, at most


class ReviewHost(Protocol):
    """What review needs from the approval service, which hands itself in.

    A protocol instead of an import keeps review below the service: the service calls
    review, and review never reaches back for the service's module.
    """

    store: LedgerStore

    def require_current_requirements(self, proposal: Proposal) -> None: ...

    def new_token(self, tx: LedgerTx, proposal: Proposal, secret: str) -> Token: ...


APPROVER_ROLE = "approver"
REVOKER_ROLES = frozenset({"approver", "admin"})


def _require_approver(identity: Identity) -> None:
    if APPROVER_ROLE not in identity.roles:
        raise Forbidden("second approval needs the approver role", user_id=identity.user_id)


def _in_tenant(tx: LedgerTx, identity: Identity, proposal_id: str, *, lock: bool) -> Proposal:
    proposal = tx.get_proposal(proposal_id, for_update=lock)
    # Another tenant's proposal looks exactly like a missing one.
    if proposal is None or proposal.tenant_id != identity.tenant_id:
        raise NotFound("no such proposal in this tenant", proposal_id=proposal_id)
    return proposal


def for_review(service: ReviewHost, identity: Identity, proposal_id: str) -> Proposal:
    """The proposal, preview included, exactly as the requester saw it, for an approver."""
    _require_approver(identity)
    with service.store.transaction() as tx:
        proposal = _in_tenant(tx, identity, proposal_id, lock=False)
    if proposal.subject == identity.user_id:  # say so before anyone reads and decides
        raise SelfApproval(proposal_id=proposal_id)
    return proposal


def awaiting_second(service: ReviewHost, identity: Identity, args: PageArgs) -> Page[Proposal]:
    """What this approver may approve: the tenant's waiting proposals, not their own,
    a page at a time (keyset on `(created_at, proposal_id)`, `args.order` first)."""
    _require_approver(identity)
    args.refuse("status")  # always awaiting_second_approval
    limit, key = args.checked("second_approval", MAX_QUEUE_ROWS)
    with service.store.transaction() as tx:
        waiting = tx.list_awaiting_second(
            identity.tenant_id, limit=limit + 1, exclude=identity.user_id,
            after=proposal_after(key), order=args.order, thread_id=args.thread_id,
            proposal_id=args.proposal_id, operation=args.tool_name,
        )  # fmt: skip
    return args.page(waiting, "second_approval", _key)


def _key(proposal: Proposal) -> list[object]:
    return proposal_key(proposal.created_at, proposal.proposal_id)


# Given the approval's transaction and the approved proposal: what the approval also
# does before it commits (the executor claims the write it completes, see below).
Then = Callable[[LedgerTx, Proposal], None]


def approve_as_second(
    service: ReviewHost,
    identity: Identity,
    proposal_id: str,
    *,
    approve: bool = True,
    then: Then | None = None,
    runs_in: str | None = None,
    reason: str | None = None,
) -> Proposal:
    """Approve (or decline) a proposal its requester confirmed; returns its new state.

    `then` runs in the approval's transaction, also for a proposal approved before
    whose write has not run: `Executor.approve_as_second` claims the write there, so
    an approval that commits has its execution claimed with it. `runs_in`: the process
    that runs it, written into the approval's audit row. `reason`: a decline's words,
    audited as `person_said` and kept as the proposal's decision reason."""
    started = time.perf_counter()
    event = "second_approval" if approve else "second_decline"
    expired: WritegateError | None = None
    try:
        _require_approver(identity)
        with service.store.transaction() as tx:
            proposal = _in_tenant(tx, identity, proposal_id, lock=True)
            if proposal.subject == identity.user_id:
                raise SelfApproval(proposal_id=proposal_id)
            if proposal.status is ProposalStatus.CONFIRMED and proposal.second_approver:
                if not approve:  # approved already: stopping it now is a revocation
                    raise ProposalNotPending(
                        "already approved; revoke it instead", state=proposal.status.value
                    )
                if then is not None:  # approved already, and not run: run it now
                    then(tx, proposal)
                return proposal
            declined = proposal.status is ProposalStatus.DECLINED
            if declined and not approve and proposal.decided_by == identity.user_id:
                return proposal
            if proposal.status is not ProposalStatus.AWAITING_SECOND:
                raise ProposalNotPending(
                    "only a proposal its requester confirmed awaits a second approval",
                    proposal_id=proposal_id,
                    state=proposal.status.value,
                )
            if tx.now() >= proposal.expires_at:
                tx.transition_proposal(
                    proposal_id, ProposalStatus.AWAITING_SECOND, ProposalStatus.EXPIRED
                )
                expired = ProposalExpired(proposal_id=proposal_id)
            elif approve:
                service.require_current_requirements(proposal)
                if not tx.approve_second(proposal_id, identity.user_id):
                    raise ProposalNotPending(proposal_id=proposal_id)
                # Bound to the requester; this secret is dropped. The requester's next
                # confirm replaces it with one that only they receive.
                tx.insert_token(service.new_token(tx, proposal, new_secret()))
                ran = {"runs_in": runs_in} if runs_in else None
                tx.insert_audit(_audit(identity, proposal, event, "confirmed", started, ran))
                approved = replace(
                    proposal,
                    status=ProposalStatus.CONFIRMED,
                    second_approver=identity.user_id,
                    second_approved_at=tx.now(),
                )
                if then is not None:
                    then(tx, approved)
                return approved
            else:
                tx.transition_proposal(
                    proposal_id,
                    ProposalStatus.AWAITING_SECOND,
                    ProposalStatus.DECLINED,
                    decided_by=identity.user_id,
                    reason=reason,
                )
                said = {"person_said": reason} if reason else None
                tx.insert_audit(_audit(identity, proposal, event, "declined", started, said))
                return replace(
                    proposal,
                    status=ProposalStatus.DECLINED,
                    decided_by=identity.user_id,
                    decision_reason=reason,
                )
        assert expired is not None
        raise expired
    except WritegateError as exc:
        _audit_refusal(service, identity, event, proposal_id, exc, started)
        raise


def revoke(service: ReviewHost, identity: Identity, proposal_id: str) -> Proposal:
    """Stop an approval that has not executed; `revoke_too_late` once execution started."""
    started = time.perf_counter()
    try:
        with service.store.transaction() as tx:
            # The proposal row first, then its token: the order decide() and the executor
            # lock in, so none of them deadlock; whichever commits first decides.
            proposal = _in_tenant(tx, identity, proposal_id, lock=True)
            if proposal.subject != identity.user_id and not (identity.roles & REVOKER_ROLES):
                raise NotFound("no such proposal in this tenant", proposal_id=proposal_id)
            if proposal.status is ProposalStatus.REVOKED:
                return proposal
            if proposal.status is ProposalStatus.EXECUTED:
                execution = tx.get_execution(proposal_id=proposal_id)
                raise RevokeTooLate(
                    proposal_id=proposal_id,
                    execution_id=execution.execution_id if execution else None,
                    request_key=proposal.request_key,
                    execution_state=execution.status.value if execution else "running",
                )
            if proposal.status not in PENDING or not tx.revoke_proposal(
                proposal_id, proposal.status, identity.user_id
            ):
                raise ProposalNotPending(proposal_id=proposal_id, state=proposal.status.value)
            tx.revoke_token(proposal_id)
            tx.insert_audit(_audit(identity, proposal, "revoke", "revoked", started))
            return replace(
                proposal,
                status=ProposalStatus.REVOKED,
                revoked_by=identity.user_id,
                revoked_at=tx.now(),
            )
    except WritegateError as exc:
        _audit_refusal(service, identity, "revoke", proposal_id, exc, started)
        raise


def _audit(
    identity: Identity,
    proposal: Proposal,
    event: str,
    status: str,
    started: float,
    result: dict[str, Any] | None = None,
) -> AuditRecord:
    return decision_audit(identity, proposal, status, started, event=event, result=result)


def _audit_refusal(
    host: ReviewHost,
    identity: Identity,
    event: str,
    proposal_id: str,
    exc: WritegateError,
    started: float,
) -> None:
    with host.store.transaction() as tx:
        tx.insert_audit(refusal_audit(identity, event, proposal_id, exc, started))
