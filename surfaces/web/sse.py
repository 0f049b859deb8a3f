"""Server-Sent Events for a graph run that outlives its client.

The run happens in a worker thread that owns the thread's lock and releases it when
the run ends, whether or not anyone is still listening: a browser that disconnects
mid-reply cannot leave a half-run turn or a held lock behind. The events travel to
the response through an asyncio queue. `end` is sent only after the lock is released,
so a client that reacts to it at once never finds the thread busy.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import suppress
from typing import Any

from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from writegate.approval.errors import WritegateError
from writegate.surfaces.web.errors import body, error_body

log = logging.getLogger("writegate.http")

_DONE = object()


class EventStreamResponse(StreamingResponse):
    media_type = "text/event-stream"


def format_event(kind: str, payload: Any) -> bytes:
    data = payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"event: {kind}\ndata: {text}\n\n".encode()


def relay(
    produce: Callable[[], Iterator[tuple[str, Any]]], release: Callable[[], None], rid: str
) -> AsyncIterator[bytes]:
    """Start `produce` in a worker thread now; the returned iterator streams its events."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def put(item: Any) -> None:
        # If the server's loop is gone, drop the event: the run itself still completes.
        with suppress(RuntimeError):
            loop.call_soon_threadsafe(queue.put_nowait, item)

    def work() -> None:
        last: tuple[str, Any] | None = None
        try:
            for kind, payload in produce():
                if kind == "end":
                    last = (kind, payload)
                else:
                    put(format_event(kind, payload))
        except WritegateError as exc:
            last = ("error", error_body(exc, rid))
        except Exception:
            log.exception("graph run failed [%s]", rid)
            last = ("error", body("internal_error", "the run failed; quote the request id", rid))
        finally:
            release()
            if last is not None:
                put(format_event(*last))
            put(_DONE)

    threading.Thread(target=work, name=f"writegate-run-{rid}", daemon=True).start()

    async def stream() -> AsyncIterator[bytes]:
        while (item := await queue.get()) is not _DONE:
            yield item

    return stream()
