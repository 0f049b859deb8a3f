"""A thread's serialization outlives the lock holder's session (docs/failover.md).

The thread lock's session is cut (the fault proxy, as a failover cuts it) while the
request that holds it is inside its run, between the checkpoint it read and the
checkpoint it writes. A click sent again meanwhile must not run the same thread beside
it: it waits, or is told to retry, and the approval ends executed once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from langchain_core.messages import AIMessage

from tests.integration.fault_proxy import FaultProxy
from tests.integration.http_fixtures import make_key, new_order, seeded_database, sse_events
from writegate.approval.models import Identity
from writegate.demo.runtime import open_demo
from writegate.surfaces.web import create_app
from writegate.surfaces.web.inputs import ConfirmIn
from writegate.surfaces.web.services import Services

WHO = Identity(user_id="user_42", tenant_id="tenant_hz")
HELD_S = 20.0  # an armed hook is reached within this


@dataclass
class Pause:
    """Holds the first run that reaches `step` there until released (a barrier, no sleep)."""

    step: str = ""
    reached: threading.Event = field(default_factory=threading.Event)
    go_on: threading.Event = field(default_factory=threading.Event)

    def __call__(self, step: str) -> None:
        if step == self.step and not self.reached.is_set():
            self.reached.set()
            assert self.go_on.wait(HELD_S), "never released"


@dataclass
class World:
    url: str
    proxy: FaultProxy
    client: TestClient
    svc: Services
    pause: Pause
    auth: dict[str, str]


@pytest.fixture(scope="module")
def world(create_database: Callable[[], str], test_server_url: str) -> Iterator[World]:
    url = seeded_database(create_database)
    proxy = FaultProxy(test_server_url)
    pause = Pause()
    runtime = open_demo(url, setup=False, step_hook=pause).runtime
    app = create_app(runtime)
    with TestClient(app) as client:
        svc: Services = app.state.wg
        svc.store.url = proxy.url(url)  # the lock sessions, and only they, go through it
        auth = {"Authorization": "Bearer " + make_key(url, WHO.user_id)}
        yield World(url, proxy, client, svc, pause, auth)
    runtime.close()
    proxy.close()


def propose(world: World) -> tuple[str, str]:
    order = new_order(world.url)
    thread = world.client.post("/v1/threads", headers=world.auth).json()["thread_id"]
    reply = world.client.post(
        f"/v1/threads/{thread}/messages",
        headers=world.auth,
        json={"content": f"refund 3.00 CNY of {order} because it is late"},
    )
    kind, end = sse_events(reply.text)[-1]
    assert kind == "end" and end["status"] == "awaiting_approval", reply.text
    return thread, end["pending"][0]["proposal_id"]


def confirm(world: World, pid: str, key: str) -> tuple[int, dict[str, Any]]:
    return world.svc.decisions.decide(WHO, pid, ConfirmIn(action="confirm"), key, "rid")


CHECKPOINTS_SQL = "SELECT count(*) FROM checkpoints WHERE thread_id = %s"


def checkpoints(world: World, thread: str) -> int:
    with psycopg.connect(world.url) as conn:
        row = conn.execute(CHECKPOINTS_SQL, (thread,)).fetchone()
    return int(row[0]) if row else 0


def test_a_click_sent_again_after_the_lock_session_died_never_runs_beside_the_first(
    world: World,
) -> None:
    """The first click's run has claimed the execution and is held before it writes its
    checkpoint; its lock session is cut. The click sent again must not run the thread
    beside it (no checkpoint of its own): it is told to retry, and once the first run
    is done the same click gets the one receipt."""
    thread, pid = propose(world)
    world.pause.step = "claimed"
    answers: dict[str, tuple[int, dict[str, Any]]] = {}
    first = threading.Thread(target=lambda: answers.update(first=confirm(world, pid, "k-1")))
    first.start()
    try:
        assert world.pause.reached.wait(HELD_S)
        assert world.proxy.cut_all() >= 1  # the lock's session is gone, as at a failover
        before = checkpoints(world, thread)
        status, again = confirm(world, pid, "k-1")  # the person clicks again
        written = checkpoints(world, thread) - before
    finally:
        world.pause.go_on.set()
        first.join(HELD_S)
    assert (written, status, again["code"], again["retryable"]) == (0, 409, "in_progress", True)
    assert answers["first"][0] == 200 and answers["first"][1]["outcome"] == "executed"
    status, last = confirm(world, pid, "k-1")
    assert (status, last["outcome"], last["replayed"]) == (200, "executed", True)


def lose_the_question(world: World, thread: str) -> None:
    """What an overlapping run can leave: the thread's turn over, its question gone,
    while the ledger still holds the proposal open."""
    config = world.svc.runner.config(WHO, thread)
    note = AIMessage("A run of this thread ended the turn.")
    world.svc.graph.update_state(config, {"messages": [note]}, as_node="agent")
    assert world.svc.runner.questions(config) == {}


def test_an_open_approval_whose_question_the_thread_lost_is_cancelled_and_the_thread_told(
    world: World,
) -> None:
    thread, pid = propose(world)
    lose_the_question(world, thread)
    status, body = confirm(world, pid, "k-lost")
    assert (status, body["code"], body["retryable"]) == (409, "not_resumable", False), body
    assert body["state"]["status"] == "cancelled"  # the ledger agrees: nothing will run
    view = world.client.get(f"/v1/threads/{thread}", headers=world.auth).json()
    assert view["pending"] == []
    assert pid in view["messages"][-1]["content"]  # the thread (and its model) is told
    status, again = confirm(world, pid, "k-lost-2")  # a new click: the same ending
    assert (status, again["code"], again["retryable"]) == (409, "cancelled", False), again
