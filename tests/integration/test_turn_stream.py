"""A turn's stream in the replay buffer (surfaces/store/streams.TurnStream): the first
event is stored at once, the later ones together at most `flush_s` late, the rest with
the thread's release, in the same commit; every event is stored once, in order."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg
import pytest

from tests.app_db import setup_app
from writegate.checkpoints.pool import open_pool
from writegate.surfaces.store.http_store import HttpStore, ThreadLock
from writegate.surfaces.store.streams import StreamStore, TurnStream

THREAD = "th_stream"
HELD_SQL = "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND granted"
LEASE_SQL = "SELECT expires_at <= now() AS free FROM writegate.thread_leases WHERE thread_id = %s"


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def url(create_database: Callable[[], str]) -> str:
    url = create_database()
    setup_app(url)
    return url


@pytest.fixture
def store(url: str) -> Iterator[HttpStore]:
    pool = open_pool(url, max_size=2)
    store = HttpStore(pool, url, lock_connections=1)
    yield store
    store.close()
    pool.close()


@pytest.fixture
def replica(url: str) -> Iterator[StreamStore]:
    """The buffer as another replica reads it: a pool of its own."""
    pool = open_pool(url, max_size=1)
    yield StreamStore(pool)
    pool.close()


def _assert_let_go(url: str) -> None:
    """No advisory lock is held any more and the thread's lease is free."""
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute(HELD_SQL).fetchone() == (0,)
        assert conn.execute(LEASE_SQL, (THREAD,)).fetchone() == (True,)


def _seqs(replica: StreamStore, stream_id: str) -> list[int]:
    return [row.seq for row in replica.after(stream_id, THREAD, -1)]


def _end_and_let_go(turn: TurnStream, lock: ThreadLock, replica: StreamStore, url: str) -> None:
    """The turn's `end` (seq 1, after its one event) is committed with the release: the
    replay buffer holds both, and the thread is let go."""
    turn.hold(1, "end", '{"status": "done"}')
    rest = turn.rest()
    assert rest is not None
    assert lock.release(rest) is True
    assert _seqs(replica, turn.stream_id) == [0, 1]
    _assert_let_go(url)


def test_the_first_event_at_once_the_next_ones_together_when_due(
    store: HttpStore, replica: StreamStore
) -> None:
    clock = Clock()
    streams = StreamStore(store.pool)
    turn = TurnStream(streams, "st_a", THREAD, flush_s=1.0, clock=clock)
    turn.add(0, "message", '{"n": 0}')
    assert _seqs(replica, "st_a") == [0]
    clock.now += 0.5
    turn.add(1, "token", '{"n": 1}')
    assert _seqs(replica, "st_a") == [0]  # not due yet
    clock.now += 0.5
    turn.add(2, "token", '{"n": 2}')
    assert _seqs(replica, "st_a") == [0, 1, 2]
    turn.hold(3, "end", '{"status": "done"}')  # the last: only with the release
    clock.now += 5
    assert _seqs(replica, "st_a") == [0, 1, 2]
    rest = turn.rest()
    assert rest is not None and turn.rest() is None  # handed out once
    streams.store(rest)
    rows = replica.after("st_a", THREAD, -1)
    assert [(r.seq, r.event, r.data) for r in rows] == [
        (0, "message", {"n": 0}),
        (1, "token", {"n": 1}),
        (2, "token", {"n": 2}),
        (3, "end", {"status": "done"}),
    ]


def test_the_rest_commits_with_the_release_and_the_thread_is_free(
    store: HttpStore, replica: StreamStore, url: str
) -> None:
    turn = TurnStream(StreamStore(store.pool), "st_b", THREAD, clock=Clock())
    lock = store.lock_thread(THREAD, wait_s=1.0)
    turn.add(0, "message", "{}")
    _end_and_let_go(turn, lock, replica, url)
    store.lock_thread(THREAD, wait_s=0).release()  # the next run takes it at once


def test_a_release_whose_statements_fail_still_lets_the_thread_go(
    store: HttpStore, url: str
) -> None:
    lock = store.lock_thread(THREAD, wait_s=1.0)
    broken = ("INSERT INTO writegate.no_such_table VALUES (%(x)s)", {"x": 1})
    assert lock.release(broken) is False
    _assert_let_go(url)
    store.lock_thread(THREAD, wait_s=0).release()


HOLDER_SQL = "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"


def test_a_turn_whose_lock_session_died_still_stores_its_last_events(
    store: HttpStore, replica: StreamStore, url: str
) -> None:
    """A failover or a cut connection ends the lock's session mid-turn: the turn's last
    events (its `end`) still reach the buffer, on another session, so a client that
    reconnects elsewhere gets them; and the thread is let go."""
    turn = TurnStream(StreamStore(store.pool), "st_c", THREAD, clock=Clock())
    lock = store.lock_thread(THREAD, wait_s=1.0)
    turn.add(0, "message", "{}")
    with psycopg.connect(url, autocommit=True) as admin:
        (pid,) = admin.execute(HOLDER_SQL).fetchone()  # type: ignore[misc]
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    _end_and_let_go(turn, lock, replica, url)
