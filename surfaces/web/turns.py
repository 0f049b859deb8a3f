"""One turn on a thread over the service: the thread's lock, what must run first, the
run itself, and its stream of events (`sse.relay`).

The route that posts a message calls `start_turn` after its HTTP work (the key, the
body); the bench calls it too, to tell the service's own cost from the HTTP stack's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from fastapi.concurrency import run_in_threadpool
from langchain_core.messages import HumanMessage
from langgraph.types import Command
from sse_starlette import ServerSentEvent

from writegate.approval.errors import NotFound
from writegate.approval.models import Identity
from writegate.surfaces.store.http_store import NO_THREAD, ThreadLock
from writegate.surfaces.store.keys import KeyHolder
from writegate.surfaces.web.runner import Preparation
from writegate.surfaces.web.schemas import ApprovalView
from writegate.surfaces.web.services import Services
from writegate.surfaces.web.sse import relay


def require_thread(svc: Services, identity: Identity, thread_id: str) -> dict[str, Any]:
    row = svc.store.get_thread(identity, thread_id)
    if row is None:
        raise NotFound(NO_THREAD, thread_id=thread_id)
    return row


async def start_turn(
    svc: Services, key: KeyHolder, thread_id: str, content: str, rid: str
) -> AsyncIterator[ServerSentEvent]:
    """Take the thread, close what is left open on it, and start the turn; the events
    stream from the returned iterator. Unauthorized, NotFound, ApprovalPending,
    InProgress before anything runs."""

    def take() -> tuple[ThreadLock, Identity, Preparation]:  # one hop to a worker thread
        wait_s = svc.settings.message_lock_wait_s
        # The key and the thread are checked as the lock is taken, and the checkpoint
        # read once it is, all in the same transaction.
        read = svc.runner.reading({"configurable": {"thread_id": thread_id}})
        lock = svc.store.lock_thread(thread_id, wait_s=wait_s, owner=key, read=read)
        try:
            identity = lock.owner
            assert identity is not None  # an owner was given: the lock says who it is
            return lock, identity, svc.runner.prepare(identity, lock.read.state)
        except BaseException:
            lock.release()
            raise

    lock, identity, prep = await run_in_threadpool(take)
    config = svc.runner.config(identity, thread_id)

    def produce() -> Iterator[tuple[str, Any]]:
        if prep.resume:
            yield from svc.runner.events(Command(resume=prep.resume), identity, config, lock)
        elif prep.recover:
            yield from svc.runner.events(None, identity, config, lock)
        asked: list[ApprovalView] = []
        message = {"messages": [HumanMessage(content)]}
        for kind, payload in svc.runner.events(message, identity, config, lock):
            if kind == "approval":
                asked.append(payload)
            yield kind, payload
        # The thread's open questions now are the ones this run asked: none was open
        # when it started (prepare closed or refused them), and a run stops at its own.
        pending = [a for a in asked if a.pending]
        status = "awaiting_approval" if pending else "done"
        yield "end", {"status": status, "pending": [a.model_dump(mode="json") for a in pending]}

    return relay(produce, lock.release, rid, streams=svc.streams, thread_id=thread_id)
