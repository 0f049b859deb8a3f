"""Approvals: list mine, read one, decide one.

Deciding re-reads the caller's identity from its key, checks that the proposal is
theirs (404 otherwise, the same answer as for a proposal that does not exist), and
resumes the graph with a structured decision. A client-chosen `Idempotency-Key`
names the click: sending it again returns the first answer.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Header, Path, Query, Request
from fastapi.responses import JSONResponse

from writegate.approval.errors import NotFound
from writegate.approval.models import PENDING
from writegate.surfaces.web.auth import CurrentIdentity
from writegate.surfaces.web.errors import request_id, responses
from writegate.surfaces.web.inputs import (
    ID_PATTERN,
    IDEMPOTENCY_KEY_PATTERN,
    ApprovalQuery,
    DecisionIn,
)
from writegate.surfaces.web.schemas import ApprovalList, ApprovalView, DecisionResult
from writegate.surfaces.web.services import Svc
from writegate.surfaces.web.views import approval_view, proposal_row

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])
ProposalId = Annotated[str, Path(pattern=ID_PATTERN, description="The proposal's id.")]


@router.get("", response_model=ApprovalList, responses=responses(401, 422))
def list_approvals(
    identity: CurrentIdentity, svc: Svc, query: Annotated[ApprovalQuery, Query()]
) -> ApprovalList:
    """The caller's approvals, a page at a time: `next_cursor`, given back as `cursor`,
    is the next page. `pending` (oldest first): awaiting a decision, not expired, with a
    question open in its thread; `all` (newest first): any status (history), or only
    those of the `status` given."""
    now, status = svc.runtime.views.now(), query.status
    page = svc.runtime.views.my_proposals(identity, query.page_args(), pending=status == "pending")
    rows = list(page)
    questions: dict[str, dict] = {}
    for thread_id in dict.fromkeys(r["thread_id"] for r in rows if r["status"] in PENDING):
        config = svc.runner.config(identity, thread_id)
        questions.update({pid: v for pid, (_, v) in svc.runner.questions(config).items()})
    executions = svc.runtime.views.execution_ids([r["proposal_id"] for r in rows])
    views = [
        approval_view(
            r,
            now,
            question=questions.get(r["proposal_id"]),
            execution_id=executions.get(r["proposal_id"]),
        )
        for r in rows
    ]
    if status == "pending":  # and a question open in its thread
        views = [v for v in views if v.pending]
    return ApprovalList(approvals=views, now=now, next_cursor=page.next_cursor)


@router.get("/{proposal_id}", response_model=ApprovalView, responses=responses(401, 404, 422))
def read_approval(proposal_id: ProposalId, identity: CurrentIdentity, svc: Svc) -> ApprovalView:
    """One approval with its preview and where it stands."""
    proposal = svc.runtime.service.get_proposal(identity, proposal_id)
    for view in svc.runner.thread_approvals(identity, proposal.thread_id):
        if view.proposal_id == proposal_id:
            return view
    raise NotFound("no such proposal for this user", proposal_id=proposal_id)


@router.post(
    "/{proposal_id}/decision",
    response_model=DecisionResult,
    responses=responses(401, 404, 409, 410, 422, 503),
)
def decide(
    proposal_id: ProposalId,
    decision: Annotated[DecisionIn, Body()],
    identity: CurrentIdentity,
    svc: Svc,
    request: Request,
    idempotency_key: Annotated[
        str,
        Header(
            alias="Idempotency-Key",
            pattern=IDEMPOTENCY_KEY_PATTERN,
            description="Chosen by the client once per click (a UUID); a retry sends it again.",
        ),
    ],
) -> JSONResponse:
    """Confirm, decline, cancel or edit. Confirm answers with the execution's receipt;
    a second confirm (another click, another replica) answers with the same receipt."""
    status, body = svc.decisions.decide(
        identity, proposal_id, decision, idempotency_key, request_id(request)
    )
    svc.metrics.decisions.labels(decision.action, str(status)).inc()
    return JSONResponse(body, status_code=status)


@router.post(
    "/{proposal_id}/revoke",
    response_model=ApprovalView,
    responses=responses(401, 403, 404, 409, 422),
)
def revoke(proposal_id: ProposalId, identity: CurrentIdentity, svc: Svc) -> ApprovalView:
    """Stop a confirmed approval that has not executed (the requester, or an approver or
    admin of the tenant). Once execution started it cannot be undone: 409
    `revoke_too_late` with the execution's state."""
    proposal = svc.runtime.service.revoke(identity, proposal_id)
    return approval_view(proposal_row(proposal), svc.runtime.views.now())
