"""Errors over HTTP: one body shape, and a status code that means something.

Every error is `{code, message, retryable, request_id}` (plus `details`, and `state`
where the current state of an approval helps). 404 hides what is not yours, 409 is
"already decided / consumed / in progress", 410 is "expired", 422 is bad input,
and a stack trace never leaves the process.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from writegate.approval.errors import WritegateError
from writegate.surfaces.web.schemas import ApprovalView, ErrorBody

log = logging.getLogger("writegate.http")

REQUEST_ID_KEY = "writegate.request_id"


class Unauthorized(WritegateError):
    code = "unauthorized"
    default_message = "send a valid API key as 'Authorization: Bearer <key>'"


class ApprovalPending(WritegateError):
    code = "approval_pending"
    default_message = "this thread waits for a decision on a pending approval; decide it first"


class NotResumable(WritegateError):
    code = "not_resumable"
    default_message = "this proposal waits in no thread this service can resume"


class Refused(Exception):
    """A protocol error answered with the approval's current state beside it."""

    def __init__(self, error: WritegateError, state: ApprovalView | None) -> None:
        super().__init__(error.message)
        self.error = error
        self.state = state


_STATUS: dict[str, int] = {
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "proposal_expired": 410,
    "token_expired": 410,
    "validation_failed": 422,
    "invalid_decision": 422,
    "invalid_transition": 422,
    "clarification_needed": 422,
    "retype_mismatch": 422,
    "self_approval": 403,
    "upstream_timeout": 503,
    "temporarily_unavailable": 503,
    "rate_limited": 503,
    "unavailable": 503,
    "internal_error": 500,
}
# Everything else a decision can meet is about the state of the approval: 409.
CONFLICT = 409


def status_for(code: str) -> int:
    return _STATUS.get(code, CONFLICT)


def request_id(request: Request) -> str:
    rid = request.scope.get(REQUEST_ID_KEY)
    if not isinstance(rid, str):
        rid = "req_" + uuid.uuid4().hex[:16]
        request.scope[REQUEST_ID_KEY] = rid
    return rid


def body(
    code: str,
    message: str,
    rid: str,
    *,
    retryable: bool = False,
    details: dict[str, Any] | None = None,
    state: ApprovalView | None = None,
) -> dict[str, Any]:
    error = ErrorBody(
        code=code,
        message=message,
        retryable=retryable,
        request_id=rid,
        details=jsonable_encoder(details) if details else None,
        state=state,
    )
    return error.model_dump(mode="json", exclude_none=True)


def error_body(exc: WritegateError, rid: str, state: ApprovalView | None = None) -> dict[str, Any]:
    return body(
        exc.code, exc.message, rid, retryable=exc.retryable, details=exc.details, state=state
    )


def error_response(
    exc: WritegateError, rid: str, state: ApprovalView | None = None
) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.code == "unauthorized" else None
    return JSONResponse(error_body(exc, rid, state), status_for(exc.code), headers=headers)


def install(app: FastAPI) -> None:
    """Render every failure, including FastAPI's own, as the error body."""

    @app.exception_handler(WritegateError)
    async def _writegate(request: Request, exc: WritegateError) -> JSONResponse:
        return error_response(exc, request_id(request))

    @app.exception_handler(Refused)
    async def _refused(request: Request, exc: Refused) -> JSONResponse:
        return error_response(exc.error, request_id(request), exc.state)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [
            {"loc": [str(part) for part in err.get("loc", ())], "msg": str(err.get("msg", ""))}
            for err in exc.errors()
        ]
        summary = "; ".join(f"{'.'.join(p['loc'])}: {p['msg']}" for p in problems[:5])
        message = summary or "the request is not valid"
        details = {"errors": problems}
        return JSONResponse(
            body("validation_failed", message, request_id(request), details=details), 422
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        status = exc.status_code
        if status == 400:  # a body that cannot even be parsed is bad input like any other
            status, code = 422, "validation_failed"
        else:
            code = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}.get(
                status, "http_error"
            )
        content = body(code, str(exc.detail), request_id(request))
        return JSONResponse(content, status, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        rid = request_id(request)
        log.exception("unhandled error in %s %s [%s]", request.method, request.url.path, rid)
        return error_response(WritegateError("internal error; quote the request id"), rid)


_DESCRIPTIONS = {
    401: "No valid API key.",
    403: "The key's roles do not allow this (e.g. approving one's own request).",
    404: "No such resource for this user (someone else's looks the same).",
    409: "Already decided, already consumed, or in progress; `state` shows where it stands.",
    410: "Expired.",
    422: "Bad input; nothing changed.",
    503: "The database or a downstream is unavailable; retry.",
}


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI error responses for a route: each one is an ErrorBody."""
    return {code: {"model": ErrorBody, "description": _DESCRIPTIONS[code]} for code in codes}


def json_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The same, spelled out as JSON for a route whose success is not JSON (SSE):
    with `model`, FastAPI would document them in the route's own media type."""
    schema = {"$ref": "#/components/schemas/ErrorBody"}
    return {
        code: {
            "description": _DESCRIPTIONS[code],
            "content": {"application/json": {"schema": schema}},
        }
        for code in codes
    }
