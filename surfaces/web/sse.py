"""Server-Sent Events for a graph run that outlives its client, and survives a reconnect.

The run happens in a worker thread that owns the thread's lock and releases it when
the run ends, whether or not anyone is still listening: a browser that disconnects
mid-reply cannot leave a half-run turn or a held lock behind. `end` is sent only after
the lock is released, so a client that reacts to it at once never finds the thread busy.

Every event gets an id, `<stream id>:<sequence number>`, and is stored in the shared
replay buffer (`surfaces/store/streams.py`): the first before it is sent, the others
in batches, the last with the thread's release, before it is sent. A client that lost
the stream asks any replica for the rest with `Last-Event-ID`: the events after that
one are replayed from PostgreSQL, and the run is followed until its last event (`end`
or `error`), so none is lost and none arrives twice. sse-starlette writes the wire format
and a keep-alive comment every `PING_S` seconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import suppress
from typing import Any

from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel
from sse_starlette import EventSourceResponse, ServerSentEvent

from writegate.surfaces.store.streams import StreamStore, TurnStream
from writegate.surfaces.web.errors import as_error, body, error_body

log = logging.getLogger("writegate.http")

PING_S = 15.0  # a keep-alive comment this often, so proxies keep an idle stream open
FOLLOW_POLL_S = 0.1  # how often a follower looks for the run's next events
FOLLOW_IDLE_S = 300.0  # a run silent this long is given up on (its replica died)
TERMINAL = frozenset({"end", "error"})
EVENT_ID_PATTERN = r"^st_[A-Za-z0-9_-]{1,32}:[0-9]{1,9}$"

_DONE = object()


class EventStreamResponse(EventSourceResponse):
    media_type = "text/event-stream"

    def __init__(
        self,
        content: AsyncIterator[ServerSentEvent],
        ping_s: float = PING_S,
        status_code: int = 200,
    ) -> None:
        super().__init__(content, status_code=status_code, ping=ping_s, sep="\n")


def new_stream_id() -> str:
    return "st_" + secrets.token_urlsafe(12)


def event_id(stream_id: str, seq: int) -> str:
    return f"{stream_id}:{seq}"


def parse_event_id(text: str | None) -> tuple[str, int] | None:
    """`<stream id>:<seq>` from a Last-Event-ID header, or None if it is not one."""
    if not re.fullmatch(EVENT_ID_PATTERN.strip("^$"), text or ""):
        return None
    stream_id, _, seq = (text or "").rpartition(":")
    return stream_id, int(seq)


def as_data(payload: Any) -> Any:
    return payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload


def as_text(data: Any) -> str:
    return json.dumps(as_data(data), ensure_ascii=False, separators=(",", ":"), default=str)


def sse(stream_id: str, seq: int, kind: str, data: Any) -> ServerSentEvent:
    return sse_text(stream_id, seq, kind, as_text(data))


def sse_text(stream_id: str, seq: int, kind: str, text: str) -> ServerSentEvent:
    return ServerSentEvent(text, event=kind, id=event_id(stream_id, seq), sep="\n")


def relay(
    produce: Callable[[], Iterator[tuple[str, Any]]],
    release: Callable[..., bool],
    rid: str,
    *,
    streams: StreamStore,
    thread_id: str,
) -> AsyncIterator[ServerSentEvent]:
    """Start `produce` in a worker thread now; the returned iterator streams its events.
    `release(*statements)`: lets the thread go, committing the statements with it (the
    turn's events not yet stored); False if they could not be."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    stored = TurnStream(streams, new_stream_id(), thread_id)
    seq = 0

    def send(kind: str, text: str) -> None:
        nonlocal seq
        item = sse_text(stored.stream_id, seq, kind, text)
        seq += 1
        # If the server's loop is gone, drop the event: the run itself still completes.
        with suppress(RuntimeError):
            loop.call_soon_threadsafe(queue.put_nowait, item)

    def put(kind: str, payload: Any) -> None:
        text = as_text(payload)  # once: stored as it is sent
        try:
            stored.add(seq, kind, text)
        except Exception:  # the live stream goes on; only a reconnect would miss it
            log.warning("could not store stream events up to %s [%s]", seq, rid)
        send(kind, text)

    def work() -> None:
        last: tuple[str, Any] | None = None
        try:
            for kind, payload in produce():
                if kind == "end":
                    last = (kind, payload)
                else:
                    put(kind, payload)
        except Exception as exc:
            error = as_error(exc)
            if error is None:
                log.exception("graph run failed [%s]", rid)
                error_event = body("internal_error", "the run failed; quote the request id", rid)
            else:
                error_event = error_body(error, rid)
            last = ("error", error_event)
        finally:
            # The last event is stored with the release, and sent after it.
            final = None if last is None else (last[0], as_text(last[1]))
            if final is not None:
                stored.hold(seq, *final)
            rest = stored.rest()
            if not release(*([rest] if rest else [])):
                log.warning("could not store stream events up to %s [%s]", seq, rid)
            if final is not None:
                send(*final)
            with suppress(RuntimeError):
                loop.call_soon_threadsafe(queue.put_nowait, _DONE)

    threading.Thread(target=work, name=f"writegate-run-{rid}", daemon=True).start()

    async def stream() -> AsyncIterator[ServerSentEvent]:
        while (item := await queue.get()) is not _DONE:
            yield item

    return stream()


async def follow(
    streams: StreamStore, thread_id: str, stream_id: str, after: int, rid: str
) -> AsyncIterator[ServerSentEvent]:
    """The stream's events after `after`, from the replay buffer, until its last one."""
    idle = 0.0
    while True:
        rows = await run_in_threadpool(streams.after, stream_id, thread_id, after)
        for row in rows:
            yield sse(stream_id, row.seq, row.event, row.data)
            after = row.seq
            if row.event in TERMINAL:
                return
        idle = 0.0 if rows else idle + FOLLOW_POLL_S
        if idle >= FOLLOW_IDLE_S:
            gone = body(
                "unavailable", "the run stopped reporting; reload the thread", rid, retryable=True
            )
            yield sse(stream_id, after + 1, "error", gone)
            return
        await asyncio.sleep(FOLLOW_POLL_S)
