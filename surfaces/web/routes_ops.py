"""Who am I, receipts, audit rows, metrics and health."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import PlainTextResponse

from writegate.approval.errors import Unavailable
from writegate.approval.models import SETTLED
from writegate.approval.outcomes import execution_outcome, receipt_of
from writegate.approval.reconcile import owned_execution
from writegate.approval.views import audit_page
from writegate.surfaces.web.auth import CurrentIdentity, CurrentPrincipal
from writegate.surfaces.web.errors import responses
from writegate.surfaces.web.inputs import ID_PATTERN, AuditQuery
from writegate.surfaces.web.schemas import AuditList, AuditRow, Health, Me, Receipt
from writegate.surfaces.web.services import Svc
from writegate.surfaces.web.views import receipt_view

router = APIRouter()
AUDITOR_ROLE = "auditor"
_AUDIT_FIELDS = set(AuditRow.model_fields)


@router.get("/v1/me", response_model=Me, responses=responses(401), tags=["account"])
def me(who: CurrentPrincipal) -> Me:
    """The identity the API key maps to: the only identity the agent acts as."""
    ident = who.identity
    return Me(
        user_id=ident.user_id,
        tenant_id=ident.tenant_id,
        roles=sorted(ident.roles),
        key_id=who.key_id,
    )


@router.get(
    "/v1/executions/{execution_id}",
    response_model=Receipt,
    responses=responses(401, 404, 409, 422),
    tags=["approvals"],
)
def read_receipt(
    execution_id: Annotated[str, Path(pattern=ID_PATTERN)], identity: CurrentIdentity, svc: Svc
) -> Receipt:
    """An execution's receipt. The execution is looked up as the caller: another
    user's is a 404. An execution still running or unresolved is a 409 saying so."""
    execution = owned_execution(svc.runtime.store, identity, execution_id=execution_id)
    if execution.status not in SETTLED:
        execution_outcome(execution)  # raises what its state means: in_progress, unknown, ...
    return receipt_view(receipt_of(execution))


@router.get("/v1/audit", response_model=AuditList, responses=responses(401, 422), tags=["audit"])
def audit(identity: CurrentIdentity, svc: Svc, query: Annotated[AuditQuery, Query()]) -> AuditList:
    """Audit rows of the caller's tenant: every tool call, decision and execution.
    Callers with the `auditor` role see the whole tenant; others see their own rows.
    A page at a time: `next_cursor`, given back as `cursor`, is the next page."""
    own = None if AUDITOR_ROLE in identity.roles else identity.user_id
    page = audit_page(
        svc.runtime.store.audit_rows, identity.tenant_id, query.page_args(), user_id=own
    )
    return AuditList(
        rows=[AuditRow(**{k: v for k, v in row.items() if k in _AUDIT_FIELDS}) for row in page],
        next_cursor=page.next_cursor,
    )


@router.get("/metrics", response_class=PlainTextResponse, tags=["ops"])
def metrics(svc: Svc) -> PlainTextResponse:
    """Prometheus text exposition."""
    return PlainTextResponse(
        svc.metrics.render(svc.runtime.pool), media_type="text/plain; version=0.0.4"
    )


@router.get("/healthz", response_model=Health, responses=responses(503), tags=["ops"])
def healthz(svc: Svc) -> Health:
    """Up, and the database answers."""
    try:
        svc.runtime.views.now()
    except Exception as exc:
        raise Unavailable("the database does not answer") from exc
    return Health(status="ok", database="ok")
