"""Threads: open one, list them, read one, and talk to the agent in it (SSE).

A thread belongs to the user who opened it; another user's thread is a 404.
Posting a message streams the agent's turn as Server-Sent Events until the turn ends
or stops at an approval; the last event is `end` with the pending approvals.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.concurrency import run_in_threadpool

from writegate.approval.errors import NotFound, ValidationFailed
from writegate.surfaces.web.auth import CurrentIdentity, CurrentKey
from writegate.surfaces.web.errors import json_responses, request_id, responses
from writegate.surfaces.web.events import STREAM_RESPONSE
from writegate.surfaces.web.inputs import ID_PATTERN, MessageIn, ThreadQuery
from writegate.surfaces.web.runner import questions_in
from writegate.surfaces.web.schemas import ThreadList, ThreadSummary, ThreadView
from writegate.surfaces.web.services import Svc
from writegate.surfaces.web.sse import (
    EVENT_ID_PATTERN,
    EventStreamResponse,
    follow,
    parse_event_id,
)
from writegate.surfaces.web.turns import require_thread, start_turn

router = APIRouter(prefix="/v1/threads", tags=["threads"])
ThreadId = Annotated[
    str, Path(pattern=ID_PATTERN, description="A thread id from POST /v1/threads.")
]


@router.post("", status_code=201, response_model=ThreadSummary, responses=responses(401))
def create_thread(key: CurrentKey, svc: Svc) -> ThreadSummary:
    """Open a new conversation owned by the caller."""
    row = svc.store.create_thread(key)
    return ThreadSummary(thread_id=row["thread_id"], created_at=row["created_at"])


@router.get("", response_model=ThreadList, responses=responses(401, 422))
def list_threads(
    identity: CurrentIdentity, svc: Svc, query: Annotated[ThreadQuery, Query()]
) -> ThreadList:
    """The caller's threads, newest first unless `order=oldest`, a page at a time:
    `next_cursor`, given back as `cursor`, is the next page."""
    page = svc.store.list_threads(identity, query.page_args())
    return ThreadList(
        threads=[ThreadSummary(thread_id=r["thread_id"], created_at=r["created_at"]) for r in page],
        next_cursor=page.next_cursor,
    )


@router.get("/{thread_id}", response_model=ThreadView, responses=responses(401, 404, 422))
def read_thread(thread_id: ThreadId, identity: CurrentIdentity, svc: Svc) -> ThreadView:
    """Messages, every approval of the thread (history), and the pending ones."""
    row = require_thread(svc, identity, thread_id)
    state = svc.runner.state(svc.runner.config(identity, thread_id))  # read once
    now = svc.runtime.views.now()
    approvals = svc.runner.thread_approvals(
        identity, thread_id, questions=questions_in(state), now=now
    )
    return ThreadView(
        thread_id=thread_id,
        created_at=row["created_at"],
        messages=svc.runner.messages(state),
        approvals=approvals,
        pending=[a for a in approvals if a.pending],
        now=now,
    )


@router.post(
    "/{thread_id}/messages",
    response_class=EventStreamResponse,
    responses={**STREAM_RESPONSE, **json_responses(401, 404, 409, 422)},
)
async def post_message(
    thread_id: ThreadId, message: MessageIn, key: CurrentKey, svc: Svc, request: Request
) -> EventStreamResponse:
    """Send a message; the agent's turn streams back until it ends or asks for approval.

    409 `approval_pending` while an approval of this thread waits for a decision
    (expired ones are closed first), 409 `in_progress` while another run holds it.
    """
    events = await start_turn(svc, key, thread_id, message.content, request_id(request))
    return EventStreamResponse(events, ping_s=svc.settings.stream_ping_s)


@router.get(
    "/{thread_id}/events",
    response_class=EventStreamResponse,
    responses={**STREAM_RESPONSE, **json_responses(401, 404, 422)},
)
async def resume_events(
    thread_id: ThreadId,
    identity: CurrentIdentity,
    svc: Svc,
    request: Request,
    last_event_id: Annotated[
        str,
        Header(
            alias="Last-Event-ID",
            pattern=EVENT_ID_PATTERN,
            description="The id of the last event received from a turn's stream.",
        ),
    ],
) -> EventStreamResponse:
    """The rest of a turn's stream after a lost connection, from any replica.

    The events after `Last-Event-ID` are sent (none twice), then the turn is followed
    until its last event (`end` or `error`). A stream is kept for 15 minutes; an
    unknown or older one is a 404.
    """
    await run_in_threadpool(require_thread, svc, identity, thread_id)
    parsed = parse_event_id(last_event_id)
    if parsed is None:
        raise ValidationFailed("Last-Event-ID is not an event id of this service")
    stream_id, after = parsed
    if not await run_in_threadpool(svc.streams.exists, stream_id, thread_id):
        raise NotFound("no such stream in this thread (or it is too old)", thread_id=thread_id)
    rid = request_id(request)
    events = follow(svc.streams, thread_id, stream_id, after, rid)
    return EventStreamResponse(events, ping_s=svc.settings.stream_ping_s)
