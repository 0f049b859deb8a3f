"""Several `writegate serve` processes on one database: they share nothing else.

A thread started on one replica is decided on another; a replica killed with SIGKILL
while an approval waits is finished by the survivor; two replicas confirming the
same proposal at the same instant execute it once and answer with one receipt.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.integration.http_fixtures import (
    Replica,
    make_key,
    new_order,
    provider_refunds,
    seeded_database,
    sse_events,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def url(create_database: Callable[[], str]) -> str:
    return seeded_database(create_database)


@pytest.fixture(scope="module")
def auth(url: str) -> dict[str, str]:
    return {"Authorization": "Bearer " + make_key(url, "user_42")}


@pytest.fixture(scope="module")
def replicas(url: str) -> Iterator[tuple[Replica, Replica]]:
    pair = (Replica(url), Replica(url))  # both start at once; then wait for both
    try:
        yield pair[0].wait_ready(), pair[1].wait_ready()
    finally:
        for replica in pair:
            replica.stop()


def propose(base: str, auth: dict[str, str], order_id: str) -> tuple[str, str]:
    thread = httpx.post(f"{base}/v1/threads", headers=auth).json()["thread_id"]
    reply = httpx.post(
        f"{base}/v1/threads/{thread}/messages",
        headers=auth,
        json={"content": f"refund 3.00 CNY of {order_id} because it is late"},
        timeout=30,
    )
    kind, end = sse_events(reply.text)[-1]
    assert kind == "end" and end["status"] == "awaiting_approval", reply.text
    return thread, end["pending"][0]["proposal_id"]


def confirm(base: str, auth: dict[str, str], pid: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{base}/v1/approvals/{pid}/decision",
        headers={**auth, "Idempotency-Key": key},
        json={"action": "confirm"},
        timeout=30,
    )


def test_a_thread_started_on_one_replica_is_confirmed_on_the_other(
    replicas: tuple[Replica, Replica], url: str, auth: dict[str, str]
) -> None:
    a, b = replicas
    order = new_order(url)
    thread, pid = propose(a.url, auth, order)
    seen_on_b = httpx.get(f"{b.url}/v1/approvals", headers=auth).json()["approvals"]
    assert pid in [p["proposal_id"] for p in seen_on_b]
    r = confirm(b.url, auth, pid, "on-b")
    assert r.status_code == 200 and r.json()["receipt"]["status"] == "succeeded", r.text
    history = httpx.get(f"{a.url}/v1/threads/{thread}", headers=auth).json()
    assert [p["status"] for p in history["approvals"]] == ["executed"]
    assert provider_refunds(url, order) == 1


def test_a_replica_killed_mid_approval_is_finished_by_the_other(
    replicas: tuple[Replica, Replica], url: str, auth: dict[str, str]
) -> None:
    survivor = replicas[1]
    victim = Replica(url).wait_ready()
    order = new_order(url)
    try:
        thread, pid = propose(victim.url, auth, order)
    finally:
        victim.kill()  # after the proposal, before anyone decided
    assert victim.proc.returncode == -9
    view = httpx.get(f"{survivor.url}/v1/threads/{thread}", headers=auth).json()
    assert [p["proposal_id"] for p in view["pending"]] == [pid]
    r = confirm(survivor.url, auth, pid, "after-crash")
    assert r.status_code == 200 and r.json()["outcome"] == "executed", r.text
    assert provider_refunds(url, order) == 1


def test_concurrent_confirms_on_two_replicas_execute_once(
    replicas: tuple[Replica, Replica], url: str, auth: dict[str, str]
) -> None:
    order = new_order(url)
    _, pid = propose(replicas[0].url, auth, order)
    start = threading.Barrier(2)
    answers: dict[str, Any] = {}

    def click(replica: Replica, key: str) -> None:
        start.wait(timeout=10)
        answers[key] = confirm(replica.url, auth, pid, key)

    clicks = [
        threading.Thread(target=click, args=(replica, f"tab-{i}"))
        for i, replica in enumerate(replicas)
    ]
    for t in clicks:
        t.start()
    for t in clicks:
        t.join(timeout=60)
    responses = list(answers.values())
    assert len(responses) == 2
    receipts = [r.json()["receipt"] for r in responses if r.status_code == 200]
    busy = [r.json() for r in responses if r.status_code == 409]
    assert receipts, [r.text for r in responses]
    assert all(body["code"] == "in_progress" for body in busy), busy
    assert all(receipt == receipts[0] for receipt in receipts)
    assert sorted(r.json().get("replayed", True) for r in responses)[0] is False
    assert provider_refunds(url, order) == 1
