"""Second approvals: what waits for an approver of my tenant, and the approver's answer.

A high tier asks a second person to approve a proposal its requester confirmed. Only
keys with the `approver` role review, never their own requests (403 `self_approval`).
The last approval runs the write, here, once, for the requester; then the service
resumes the requester's thread itself, so their page shows the receipt and the model's
answer without a click of theirs.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Query

from writegate.approval.models import Receipt
from writegate.surfaces.web.auth import CurrentIdentity
from writegate.surfaces.web.errors import responses
from writegate.surfaces.web.inputs import ID_PATTERN, ReviewIn, ReviewQuery
from writegate.surfaces.web.schemas import ApprovalList, ReviewResult
from writegate.surfaces.web.services import Svc
from writegate.surfaces.web.views import approval_view, proposal_row, receipt_view

router = APIRouter(prefix="/v1/reviews", tags=["reviews"])


@router.get("", response_model=ApprovalList, responses=responses(401, 403, 422))
def list_reviews(
    identity: CurrentIdentity, svc: Svc, query: Annotated[ReviewQuery, Query()]
) -> ApprovalList:
    """Other users' proposals in the caller's tenant that wait for a second approver,
    a page at a time: `next_cursor`, given back as `cursor`, is the next page."""
    waiting = svc.runtime.service.awaiting_second_approval(identity, query.page_args())
    now = svc.runtime.views.now()
    views = [approval_view(proposal_row(p), now) for p in waiting]
    return ApprovalList(approvals=views, now=now, next_cursor=waiting.next_cursor)


@router.post(
    "/{proposal_id}",
    response_model=ReviewResult,
    responses=responses(401, 403, 404, 409, 410, 422),
)
def review(
    proposal_id: Annotated[str, Path(pattern=ID_PATTERN)],
    answer: Annotated[ReviewIn, Body()],
    identity: CurrentIdentity,
    svc: Svc,
) -> ReviewResult:
    """Approve (which runs the write) or decline, as the second approver. Answering the
    same way twice is safe."""
    if answer.action == "decline":
        proposal = svc.runtime.service.decline_as_second(identity, proposal_id)
        svc.decisions.resume_requester(proposal)  # their question ends: declined
        return ReviewResult(
            proposal_id=proposal_id,
            outcome="declined",
            approval=approval_view(proposal_row(proposal), svc.runtime.views.now()),
        )
    approved = svc.runtime.executor.approve_as_second(identity, proposal_id)
    svc.decisions.resume_requester(approved.proposal)
    outcome = approved.outcome
    return ReviewResult(
        proposal_id=proposal_id,
        outcome="approved",
        approval=approval_view(proposal_row(approved.proposal), svc.runtime.views.now()),
        receipt=receipt_view(outcome) if isinstance(outcome, Receipt) else None,
        error=None if isinstance(outcome, Receipt) else outcome.to_dict(),
    )
