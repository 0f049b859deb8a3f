"""The FastAPI app: routes, auth, errors, request ids, metrics and the approval page.

`create_app()` opens one Runtime for the process when the app starts (DATABASE_URL,
WRITEGATE_PROPOSAL_TTL_SECONDS); tests and embedders pass their own runtime. The
process holds no state of its own, so any number of replicas can share one database.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from fastapi import Depends, FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from writegate.checkpoints.database import resolve_database_url
from writegate.runtime.wiring import Runtime
from writegate.surfaces.served import Application, open_served
from writegate.surfaces.store import setup_service
from writegate.surfaces.web import errors
from writegate.surfaces.web.events import add_event_schemas
from writegate.surfaces.web.inputs import refuse_unknown_query
from writegate.surfaces.web.routes_approvals import router as approvals_router
from writegate.surfaces.web.routes_ops import router as ops_router
from writegate.surfaces.web.routes_reviews import router as reviews_router
from writegate.surfaces.web.routes_threads import router as threads_router
from writegate.surfaces.web.services import Services, Settings

STATIC_DIR = Path(__file__).parent / "static"
# The approval page loads only its own script, style and API: no inline script or
# style, no framing (clickjacking a Confirm button), no plugins, no foreign forms.
PAGE_HEADERS = {
    "Content-Security-Policy": "; ".join(
        (
            "default-src 'self'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data:",
            "connect-src 'self'",
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        )
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
# The API, as served under the paths its routers declare.
API_ROUTERS = (threads_router, approvals_router, reviews_router, ops_router)

DESCRIPTION = """\
A chat agent whose write tools only *propose*: a person sees the exact preview and
decides; a confirmed operation executes at most once and leaves a receipt.

Authenticate every `/v1` request with `Authorization: Bearer <key>` (make a key with
`writegate keys create --user U --tenant T`). Errors are always
`{code, message, retryable, request_id}`.
"""


def _repeated_query_keys(raw: bytes) -> list[str]:
    keys = [key for key, _ in parse_qsl(raw.decode("latin-1"), keep_blank_values=True)]
    return sorted({key for key in keys if keys.count(key) > 1})


class RequestContext:
    """Give each request an id (echoed as X-Request-ID), mark every response nosniff,
    and count it by route template."""

    def __init__(self, app: ASGIApp, holder: FastAPI) -> None:
        self.app = app
        self.holder = holder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = "req_" + uuid.uuid4().hex[:16]
        scope[errors.REQUEST_ID_KEY] = rid
        started, status = time.perf_counter(), 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = MutableHeaders(scope=message)
                headers.append("X-Request-ID", rid)
                headers["X-Content-Type-Options"] = "nosniff"  # a file is what it says
            await send(message)

        try:
            repeated = _repeated_query_keys(scope.get("query_string", b""))
            if repeated:
                # Every query parameter here is single-valued; a repeated one would be
                # read as its last copy and slip past validation of the others.
                message = f"query parameters may appear once: {', '.join(repeated)}"
                content = errors.body("validation_failed", message, rid)
                await JSONResponse(content, 422)(scope, receive, send_with_id)
            else:
                await self.app(scope, receive, send_with_id)
        finally:
            svc: Services | None = getattr(self.holder.state, "wg", None)
            if svc is not None:
                route = getattr(scope.get("route"), "path", "unmatched")
                svc.metrics.observe(scope["method"], route, status, time.perf_counter() - started)


def create_app(
    runtime: Runtime | None = None,
    *,
    settings: Settings | None = None,
    model: Any = None,
    application: Application | None = None,
) -> FastAPI:
    """The app. Without a runtime, one is opened at startup and closed at shutdown,
    over the tools served on the database (`open_served`, with `application`)."""
    settings = settings or Settings.from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        given: Services | None = getattr(app.state, "wg", None)
        if given is not None:
            try:
                yield
            finally:
                given.close()
            return
        url = settings.database_url or resolve_database_url()
        opened = await run_in_threadpool(
            partial(open_served, url, application=application, policy=settings.tune)
        )
        await run_in_threadpool(setup_service, opened.url)
        app.state.wg = Services.build(opened, settings, model)
        try:
            yield
        finally:
            app.state.wg.close()
            opened.close()

    app = FastAPI(title="writegate", version="0.1.0", description=DESCRIPTION, lifespan=lifespan)
    if runtime is not None:
        app.state.wg = Services.build(runtime, settings, model)
    app.add_middleware(RequestContext, holder=app)
    errors.install(app)
    # Every API route refuses a query parameter it does not declare (422).
    for router in API_ROUTERS:
        app.include_router(
            router, dependencies=[Depends(refuse_unknown_query)], responses=errors.responses(422)
        )
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    _document_events(app)

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", headers=PAGE_HEADERS)

    return app


def _document_events(app: FastAPI) -> None:
    """Generate the OpenAPI document once, with the stream's event schemas in it."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            add_event_schemas(generate())
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]
