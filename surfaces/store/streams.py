"""The replay buffer of turn streams, in PostgreSQL so that every replica shares it.

A turn's events are stored under (stream id, sequence number): its first event before
it is sent, so that the stream exists on every replica from its start; the later ones
together, at least every `FLUSH_S` while the turn runs, and the rest in the transaction
that lets the thread go as the turn ends (`TurnStream`; on another session if the
lock's own died, `ThreadLock.release`). A client that lost the
connection names the last event it got (`Last-Event-ID`) and any replica replays the
ones after it, then follows the run until its last event: an event sent but not yet
stored reaches it at the next store, none is lost and none arrives twice.
Streams are kept `STREAM_KEEP_S` seconds: long enough for a reconnect, not a history
(the thread's messages and approvals are the history).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from writegate.checkpoints.pool import Pool
from writegate.surfaces.store import stream_sql as sql
from writegate.surfaces.store.http_store import Statement

STREAM_KEEP_S = 15 * 60
FLUSH_S = 1.0  # while a turn runs, its events reach other replicas at most this late


@dataclass(frozen=True)
class StoredEvent:
    seq: int
    event: str
    data: Any


class StreamStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    def after(self, stream_id: str, thread_id: str, seq: int) -> list[StoredEvent]:
        """The stream's events after `seq`, in order; only if it belongs to `thread_id`."""
        with self.pool.connection() as conn:
            rows = conn.execute(sql.SELECT_STREAM_AFTER_SQL, (stream_id, thread_id, seq))
            return [StoredEvent(r["seq"], r["event"], r["data"]) for r in rows.fetchall()]

    def exists(self, stream_id: str, thread_id: str) -> bool:
        with self.pool.connection() as conn:
            row = conn.execute(sql.STREAM_EXISTS_SQL, (stream_id, thread_id)).fetchone()
            return row is not None

    def store(self, statement: Statement) -> None:
        with self.pool.connection() as conn:
            conn.execute(*statement)


@dataclass
class TurnStream:
    """One turn's events on their way to the replay buffer. `add` stores the first at
    once (with the prune of old streams) and the pending ones whenever `FLUSH_S` has
    passed since the last store; `rest()` is the statement that stores what is left,
    for the caller to commit with the thread's release. A store that fails is the
    caller's to report: the live stream goes on, only a reconnect would miss it."""

    store: StreamStore
    stream_id: str
    thread_id: str
    flush_s: float = FLUSH_S
    clock: Callable[[], float] = time.monotonic
    _pending: list[tuple[int, str, str]] = field(default_factory=list)
    _stored_at: float | None = None

    def hold(self, seq: int, kind: str, text: str) -> None:
        """Keep an event for `rest()`, never stored now (the turn's last one)."""
        self._pending.append((seq, kind, text))

    def add(self, seq: int, kind: str, text: str) -> None:
        self.hold(seq, kind, text)
        now = self.clock()
        if self._stored_at is None or now - self._stored_at >= self.flush_s:
            statement = self.rest()
            self._stored_at = now
            if statement is not None:
                self.store.store(statement)

    def rest(self) -> Statement | None:
        """The statement storing the pending events (None if there are none), which
        are then no longer pending."""
        if not self._pending:
            return None
        rows, self._pending = self._pending, []
        # The events' texts are JSON already: joined into the batch as they are.
        batch = ",".join(
            f'{{"seq":{seq},"event":{json.dumps(kind)},"data":{text}}}' for seq, kind, text in rows
        )
        params: dict[str, Any] = {
            "stream": self.stream_id,
            "thread": self.thread_id,
            "batch": f"[{batch}]",
        }
        if self._stored_at is None:  # the stream's first store
            return sql.INSERT_FIRST_STREAM_EVENTS_SQL, {**params, "keep_s": STREAM_KEEP_S}
        return sql.INSERT_STREAM_EVENTS_SQL, params
