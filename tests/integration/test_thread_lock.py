"""The thread lock's session (checkpoints/http_store.ThreadLock): a busy thread is
answered without touching a lock it never held, and a lock that waited leaves its
session as it found it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from tests.app_db import setup_app
from writegate.approval.errors import InProgress, Unavailable
from writegate.checkpoints.pool import open_pool
from writegate.surfaces.store.http_store import LOCK_NAMESPACE, HttpStore

LOCK_TIMEOUT_SQL = "SELECT current_setting('lock_timeout') AS v"
# Whether a session waits on an advisory lock.
WAITING_SQL = "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)"


@pytest.fixture
def store(create_database: Callable[[], str]) -> Iterator[HttpStore]:
    url = create_database()
    setup_app(url)
    pool = open_pool(url, max_size=2)
    store = HttpStore(pool, url, lock_connections=1)  # one session: every lock reuses it
    yield store
    store.close()
    pool.close()


def _notices(store: HttpStore) -> list[str]:
    """The server's notices on the lock pool's one session, from now on."""
    heard: list[str] = []
    with store.lock_pool.connection() as conn:
        conn.add_notice_handler(lambda diag: heard.append(str(diag.message_primary)))
    return heard


def test_a_busy_thread_is_refused_without_unlocking_what_it_never_held(
    store: HttpStore,
) -> None:
    heard = _notices(store)
    with psycopg.connect(store.url, autocommit=True) as other:
        key = LOCK_NAMESPACE + "th_busy"
        other.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (key,))
        for shared in (False, True):
            with pytest.raises(InProgress):
                store.lock_thread("th_busy", wait_s=0, shared=shared)
    assert heard == []  # an unlock of a lock not held draws a WARNING from the server


def test_a_lock_that_waited_leaves_its_session_with_the_default_lock_timeout(
    store: HttpStore,
) -> None:
    with store.lock_pool.connection() as conn:
        default = conn.execute(LOCK_TIMEOUT_SQL).fetchone()["v"]  # type: ignore[index]
    store.lock_thread("th_wait", wait_s=1.5).release()
    with store.lock_pool.connection() as conn:
        assert conn.execute(LOCK_TIMEOUT_SQL).fetchone()["v"] == default  # type: ignore[index]


LEASE_SQL = "SELECT generation, expires_at > now() AS live FROM writegate.thread_leases"


def test_a_run_whose_lease_was_taken_over_stops_and_frees_nothing_of_the_next(
    create_database: Callable[[], str],
) -> None:
    """The first run's lock session dies and its lease runs out while it is in a long
    step; another run takes the thread (generation 2). The first one's next step stops
    it (Unavailable), and its release leaves the second one's lease alone."""
    url = create_database()
    setup_app(url)
    pool = open_pool(url, max_size=2)
    store = HttpStore(pool, url, lock_connections=2)
    try:
        first = store.lock_thread("th_long", wait_s=0)
        assert first.lease is not None and first.lease.generation == 1
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_locks "
                "WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()"
            )
            admin.execute("UPDATE writegate.thread_leases SET expires_at = now()")
            second = store.lock_thread("th_long", wait_s=0)
            first.lease.renewed_at -= store.lease_s  # as if half its lease had gone by
            with pytest.raises(Unavailable):
                first.keep()
            first.release()
            row = admin.execute(LEASE_SQL).fetchone()
            assert row == (2, True)  # the second run's, untouched
            second.release()
            assert admin.execute(LEASE_SQL).fetchone() == (2, False)  # freed
    finally:
        store.close()
        pool.close()


def test_a_run_that_waited_for_the_thread_takes_it_when_the_holder_lets_go(
    create_database: Callable[[], str],
) -> None:
    """A second run waits on the lock while the first holds the thread; when the first
    lets go, the waiter takes the lock and the lease (generation 2), not `in_progress`:
    the lease freed after the waiter's statement began is free to it."""
    url = create_database()
    setup_app(url)
    pool = open_pool(url, max_size=2)
    store = HttpStore(pool, url, lock_connections=2)
    try:
        first = store.lock_thread("th_turns", wait_s=0)
        with ThreadPoolExecutor(max_workers=1) as runner:
            waiter = runner.submit(store.lock_thread, "th_turns", wait_s=30)
            with psycopg.connect(url, autocommit=True) as admin:
                while not admin.execute(WAITING_SQL).fetchone()[0]:  # type: ignore[index]
                    time.sleep(0.01)  # polls for the waiter to block, not a timing
            first.release()
            second = waiter.result(timeout=30)
        assert second.lease is not None and second.lease.generation == 2
        second.release()
    finally:
        store.close()
        pool.close()


# Whether this session holds the thread's advisory lock.
HOLDS_SQL = """
SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
               AND pid = pg_backend_pid()) AS locked"""


def test_a_read_given_to_the_take_is_made_in_its_transaction_once_the_lock_is_held(
    store: HttpStore,
) -> None:
    """`read` runs on the lock's session after the grant, inside the transaction that
    took the lock (no commit of its own), for every way of taking it; a refused take
    reads nothing."""
    seen: list[tuple[bool, psycopg.pq.TransactionStatus]] = []

    def read(conn: psycopg.Connection) -> str:
        row = conn.execute(HOLDS_SQL).fetchone()
        seen.append((row["locked"], conn.info.transaction_status))  # type: ignore[index]
        return "state"

    for wait_s, shared in ((0, False), (1.0, False), (1.0, True)):
        lock = store.lock_thread("th_read", wait_s=wait_s, shared=shared, read=read)
        assert lock.read == "state"
        lock.release()
    assert seen == [(True, psycopg.pq.TransactionStatus.INTRANS)] * 3
    with store.lock_pool.connection() as conn:  # and that transaction was committed
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with psycopg.connect(store.url, autocommit=True) as other:
        key = LOCK_NAMESPACE + "th_read"
        other.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (key,))
        with pytest.raises(InProgress):
            store.lock_thread("th_read", wait_s=0, read=read)
    assert len(seen) == 3


def test_a_read_that_fails_leaves_the_thread_free(store: HttpStore) -> None:
    """The take's transaction is rolled back, and the lock it took (a session lock,
    which a rollback keeps) is let go: the next request takes the thread at once."""

    def read(conn: psycopg.Connection) -> None:
        conn.execute("SELECT 1 / 0")

    for shared in (False, True):
        with pytest.raises(psycopg.errors.DivisionByZero):
            store.lock_thread("th_failed", wait_s=1.0, shared=shared, read=read)
        store.lock_thread("th_failed", wait_s=0).release()
    with store.lock_pool.connection() as conn:
        assert conn.execute(HOLDS_SQL).fetchone()["locked"] is False  # type: ignore[index]


LEASED_SQL = "SELECT expires_at > now() AS held FROM writegate.thread_leases WHERE thread_id = %s"


def test_a_finish_reads_in_the_release_and_goes_elsewhere_while_the_lease_holds(
    store: HttpStore,
) -> None:
    """`finish` reads on the lock's session inside the release's transaction, the
    thread still held; when that session is gone, on another session, the lease still
    held, and the statements it gives are committed; the lease is freed after."""
    seen: list[tuple[int, bool, psycopg.pq.TransactionStatus]] = []

    def finish(conn: psycopg.Connection) -> tuple[tuple[str, dict[str, object]], ...]:
        pid = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]  # type: ignore[index]
        held = conn.execute(LEASED_SQL, ("th_finish",)).fetchone()["held"]  # type: ignore[index]
        seen.append((pid, held, conn.info.transaction_status))
        return (("SELECT set_config('writegate.test', %(v)s, true)", {"v": "x"}),)

    lock = store.lock_thread("th_finish", wait_s=0)
    own = _holder(store)
    assert lock.release(finish=finish) is True
    assert seen == [(own, True, psycopg.pq.TransactionStatus.INTRANS)]

    seen.clear()
    lock = store.lock_thread("th_finish", wait_s=0)
    own = _holder(store)
    with psycopg.connect(store.url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (own,))
    assert lock.release(finish=finish) is True
    assert [(held, status) for _, held, status in seen] == [
        (True, psycopg.pq.TransactionStatus.INTRANS)
    ]
    assert seen[0][0] != own  # made on another session, while the lease held the thread
    store.lock_thread("th_finish", wait_s=0).release()  # and then it was let go


def _holder(store: HttpStore) -> int:
    """The backend of the session holding the (one) advisory lock."""
    with psycopg.connect(store.url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
        ).fetchone()
    assert row is not None
    return int(row[0])
