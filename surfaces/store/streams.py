"""The replay buffer of turn streams, in PostgreSQL so that every replica shares it.

Each event of a turn is stored under (stream id, sequence number) before it is sent;
a client that lost the connection names the last event it got (`Last-Event-ID`) and
any replica replays the ones after it, then follows the run until its last event.
Streams are kept `STREAM_KEEP_S` seconds: long enough for a reconnect, not a history
(the thread's messages and approvals are the history).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from writegate.checkpoints.pool import Pool
from writegate.surfaces.store import stream_sql as sql

STREAM_KEEP_S = 15 * 60


@dataclass(frozen=True)
class StoredEvent:
    seq: int
    event: str
    data: Any


class StreamStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    def append(self, stream_id: str, thread_id: str, seq: int, event: str, text: str) -> None:
        """Store one event, its data as JSON text; a stream's first (seq 0) also drops
        the streams older than `STREAM_KEEP_S`, in the same statement."""
        row = (stream_id, seq, thread_id, event, text)
        with self.pool.connection() as conn:
            if seq == 0:
                conn.execute(sql.INSERT_FIRST_STREAM_EVENT_SQL, (STREAM_KEEP_S, *row))
            else:
                conn.execute(sql.INSERT_STREAM_EVENT_SQL, row)

    def after(self, stream_id: str, thread_id: str, seq: int) -> list[StoredEvent]:
        """The stream's events after `seq`, in order; only if it belongs to `thread_id`."""
        with self.pool.connection() as conn:
            rows = conn.execute(sql.SELECT_STREAM_AFTER_SQL, (stream_id, thread_id, seq))
            return [StoredEvent(r["seq"], r["event"], r["data"]) for r in rows.fetchall()]

    def exists(self, stream_id: str, thread_id: str) -> bool:
        with self.pool.connection() as conn:
            row = conn.execute(sql.STREAM_EXISTS_SQL, (stream_id, thread_id)).fetchone()
            return row is not None
