"""A storm of concurrent clicks on one approval, over a real socket: the server's
connection count stays within the app's pools, no answer is a 500, and exactly one
refund leaves.

Each thread-lock is taken on a connection of a bounded pool of its own; when that pool
is exhausted a click is answered at once with a retryable 503 instead of opening yet
another server connection.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import httpx
import psycopg
from fastapi.testclient import TestClient

from tests.integration.http_fixtures import (
    ThreadServer,
    make_key,
    new_order,
    provider_refunds,
    seeded_database,
    sse_events,
)
from writegate.demo.runtime import open_demo
from writegate.surfaces.web import Settings, create_app

CLICKS = 64
RUNTIME_CONNECTIONS = 10
LOCK_CONNECTIONS = 4
# Every other server process on this database: the client backends are connections; an
# autovacuum worker visiting the database is not one of the app's.
BACKENDS_SQL = """
SELECT backend_type, state, left(query, 60) AS query FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
"""


class ConnectionPeak:
    """Samples the server's connections to this database until stopped; `seen` is what
    the server showed at the peak."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.peak = 0
        self.seen: list[tuple[str, str, str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stop.is_set():
                rows = conn.execute(BACKENDS_SQL).fetchall()
                connections = sum(1 for row in rows if row[0] == "client backend")
                if connections > self.peak:
                    self.peak, self.seen = connections, rows

    def __enter__(self) -> ConnectionPeak:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def _propose_refund(http: httpx.Client, url: str, alice: dict[str, str]) -> tuple[str, str, str]:
    """A fresh order, a thread, and the refund proposal the scripted model makes there."""
    order = new_order(url)
    thread = http.post("/v1/threads", headers=alice).json()["thread_id"]
    text = f"refund 3.00 CNY of {order} because it is scratched"
    http.post(f"/v1/threads/{thread}/messages", headers=alice, json={"content": text})
    pending = http.get("/v1/approvals", headers=alice).json()["approvals"]
    return order, thread, next(a["proposal_id"] for a in pending if a["thread_id"] == thread)


def test_a_click_storm_stays_within_the_pools_and_refunds_once(
    create_database: Callable[[], str],
) -> None:
    url = seeded_database(create_database)
    alice = {"Authorization": "Bearer " + make_key(url, "user_42")}
    runtime = open_demo(url, setup=False, max_connections=RUNTIME_CONNECTIONS).runtime
    settings = Settings(decision_lock_wait_s=5.0, lock_connections=LOCK_CONNECTIONS)
    app = create_app(runtime, settings=settings)
    try:
        with ThreadServer(app) as server, httpx.Client(base_url=server.url, timeout=60) as http:
            order, _, pid = _propose_refund(http, url, alice)

            start = threading.Barrier(CLICKS)
            answers: list[tuple[int, str, bool]] = []

            def click(n: int) -> None:
                start.wait(timeout=30)
                r = http.post(
                    f"/v1/approvals/{pid}/decision",
                    headers={**alice, "Idempotency-Key": f"storm-{n}"},
                    json={"action": "confirm"},
                )
                body = r.json()
                code, retryable = body.get("code", "ok"), body.get("retryable", False)
                answers.append((r.status_code, code, retryable))

            with ConnectionPeak(url) as watch:
                clickers = [threading.Thread(target=click, args=(n,)) for n in range(CLICKS)]
                for t in clickers:
                    t.start()
                for t in clickers:
                    t.join(timeout=120)
            assert len(answers) == CLICKS
            statuses = Counter(status for status, _, _ in answers)
            assert 500 not in statuses, answers
            assert statuses[200] >= 1
            # Anything but the receipt is "busy, retry": in_progress (409) or unavailable (503).
            for status, code, retryable in answers:
                assert status == 200 or (status in (409, 503) and retryable), (status, code)
            assert watch.peak <= RUNTIME_CONNECTIONS + LOCK_CONNECTIONS, watch.seen
            assert provider_refunds(url, order) == 1
    finally:
        runtime.close()


def test_with_every_lock_session_taken_a_request_is_told_to_retry_not_500(
    create_database: Callable[[], str],
) -> None:
    url = seeded_database(create_database)
    alice = {"Authorization": "Bearer " + make_key(url, "user_42")}
    runtime = open_demo(url, setup=False, max_connections=RUNTIME_CONNECTIONS).runtime
    app = create_app(runtime, settings=Settings(lock_connections=1))
    try:
        with TestClient(app) as client:
            thread = client.post("/v1/threads", headers=alice).json()["thread_id"]
            held = app.state.wg.store.lock_thread("someone-elses-thread", wait_s=0)
            try:
                busy = client.post(
                    f"/v1/threads/{thread}/messages", headers=alice, json={"content": "hi"}
                )
            finally:
                held.release()
            assert busy.status_code == 503, busy.text
            assert (busy.json()["code"], busy.json()["retryable"]) == ("unavailable", True)
            after = client.post(
                f"/v1/threads/{thread}/messages", headers=alice, json={"content": "hi"}
            )
            assert after.status_code == 200 and sse_events(after.text)[-1][1]["status"] == "done"
    finally:
        runtime.close()


WAITERS_SQL = """
SELECT mode FROM pg_locks
WHERE locktype = 'advisory' AND NOT granted AND database = (
    SELECT oid FROM pg_database WHERE datname = current_database())
"""


def test_a_click_that_finds_the_thread_busy_waits_shared_and_gets_the_same_receipt(
    create_database: Callable[[], str],
) -> None:
    """A later click on an executed approval, while another request holds the thread,
    waits for the thread's lock in shared mode (so such clicks are let in together
    when it is released) and answers with the one receipt, as a replay."""
    url = seeded_database(create_database)
    alice = {"Authorization": "Bearer " + make_key(url, "user_42")}
    runtime = open_demo(url, setup=False, max_connections=RUNTIME_CONNECTIONS).runtime
    app = create_app(runtime, settings=Settings(decision_lock_wait_s=60.0))
    try:
        with ThreadServer(app) as server, httpx.Client(base_url=server.url, timeout=60) as http:
            order, thread, pid = _propose_refund(http, url, alice)

            def confirm(key: str) -> httpx.Response:
                return http.post(
                    f"/v1/approvals/{pid}/decision",
                    headers={**alice, "Idempotency-Key": key},
                    json={"action": "confirm"},
                )

            first = confirm("first")
            assert first.status_code == 200 and first.json()["replayed"] is False, first.text

            later: list[httpx.Response] = []
            held = app.state.wg.store.lock_thread(thread, wait_s=0)
            try:
                clicker = threading.Thread(target=lambda: later.append(confirm("later")))
                clicker.start()
                with psycopg.connect(url, autocommit=True) as conn:
                    modes: list[str] = []
                    while not modes and clicker.is_alive():
                        modes = [row[0] for row in conn.execute(WAITERS_SQL).fetchall()]
                assert modes == ["ShareLock"], modes
            finally:
                held.release()
            clicker.join(timeout=60)
            assert len(later) == 1 and later[0].status_code == 200, later
            body = later[0].json()
            assert body["replayed"] is True and body["outcome"] == "executed"
            assert body["receipt"] == first.json()["receipt"]
            assert provider_refunds(url, order) == 1
    finally:
        runtime.close()
