"""The HTTP stack's floor: what the three requests of an approved write cost with no
work behind them.

An app of the service's shape (FastAPI with its request-context middleware and error
handlers, the service's bearer-key dependency, the same input models, a sync
endpoint for the thread and the decision, an async one streaming through the service's
`EventStreamResponse` after one hop to a worker thread) answers each request with the
bytes the real service answered it (recorded from the bench's own HTTP writes), under
uvicorn in a thread, driven by the same minimal client. What it costs is the part of
the HTTP path that no bookkeeping change can remove.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from http.client import HTTPConnection
from typing import Annotated, Any

import uvicorn
from fastapi import Body, FastAPI, Header
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from sse_starlette import ServerSentEvent

from writegate.surfaces.web import errors
from writegate.surfaces.web.app import RequestContext
from writegate.surfaces.web.auth import CurrentKey
from writegate.surfaces.web.inputs import DecisionIn, MessageIn
from writegate.surfaces.web.sse import EventStreamResponse


@dataclass(frozen=True)
class Recorded:
    """One approved write's answers as the service gave them."""

    thread: bytes  # POST /v1/threads
    stream: bytes  # POST /v1/threads/{id}/messages, the whole event stream
    decision: bytes  # POST /v1/approvals/{id}/decision


def _events(stream: bytes) -> list[ServerSentEvent]:
    found = []
    for block in stream.decode().strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            found.append(ServerSentEvent(fields["data"], event=fields["event"], id=fields["id"]))
    return found


def floor_app(recorded: Recorded) -> FastAPI:
    app = FastAPI()
    app.add_middleware(RequestContext, holder=app)
    errors.install(app)
    events = _events(recorded.stream)

    @app.post("/v1/threads", status_code=201)
    def create_thread(key: CurrentKey) -> Response:
        return Response(recorded.thread, status_code=201, media_type="application/json")

    @app.post("/v1/threads/{thread_id}/messages")
    async def post_message(thread_id: str, message: MessageIn, key: CurrentKey) -> Any:
        await run_in_threadpool(lambda: None)

        async def stream() -> AsyncIterator[ServerSentEvent]:
            for event in events:
                yield event

        return EventStreamResponse(stream())

    @app.post("/v1/approvals/{proposal_id}/decision")
    def decide(
        proposal_id: str,
        decision: Annotated[DecisionIn, Body()],
        key: CurrentKey,
        idempotency_key: Annotated[str, Header(alias="Idempotency-Key")],
    ) -> JSONResponse:
        return JSONResponse(json.loads(recorded.decision))

    return app


def request(port: int, method: str, path: str, body: Any = None, **headers: str) -> bytes:
    """One request on a new connection, as the bench's minimal client sends it: the
    answer's bytes; RuntimeError on a status of 300 or more."""
    conn = HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(
            method, path, body=data, headers={**headers, "Content-Type": "application/json"}
        )
        reply = conn.getresponse()
        raw = reply.read()
        if reply.status >= 300:
            raise RuntimeError(f"{method} {path}: {reply.status} {raw[-500:]!r}")
        return raw
    finally:
        conn.close()


class FloorServer:
    """`floor_app` under uvicorn in a thread of this process, and its client."""

    def __init__(self, recorded: Recorded) -> None:
        config = uvicorn.Config(floor_app(recorded), host="127.0.0.1", port=0, log_level="warning")
        self.uvicorn = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.uvicorn.run, name="bench-floor", daemon=True)
        self.thread.start()
        while not self.uvicorn.started:
            time.sleep(0.01)
        self.port = self.uvicorn.servers[0].sockets[0].getsockname()[1]

    def write(self) -> None:
        """The three requests, as the bench's HTTP path sends them."""
        auth = {"Authorization": "Bearer floor"}
        request(self.port, "POST", "/v1/threads", **auth)
        body = {"content": "refund 10.00 CNY"}
        request(self.port, "POST", "/v1/threads/th_floor/messages", body, **auth)
        decision = "/v1/approvals/pr_floor/decision"
        request(
            self.port, "POST", decision, {"action": "confirm"}, **auth, **{"Idempotency-Key": "k"}
        )

    def close(self) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(timeout=30)
