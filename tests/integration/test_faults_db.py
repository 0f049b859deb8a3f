"""PostgreSQL faults: connections cut at chosen points, and the database away a while.

writegate reaches PostgreSQL through `FaultProxy`; the provider process, and every
check of these tests, connect directly. A cut happens at an exact point, chosen by a
statement the client sends (inside the execute transaction, in its COMMIT, in a
confirm, in a checkpoint write) or by the executor's step hook (after the provider
answered, before the outcome is recorded); never after a delay. After each fault:
one effect per approved operation (0 lost, 0 duplicated), the same pool serves again,
a paused thread resumes, and the caller got `temporarily_unavailable`, not a trace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.types import Command

from tests.integration.fault_proxy import FaultProxy
from tests.integration.fault_scripts.harness import (
    ProviderProcess,
    fault_line,
    ledger_check,
    make_order,
    new_id,
    wait_until,
)
from tests.integration.http_fixtures import make_key, seeded_database
from writegate.approval.decisions import Confirm
from writegate.approval.errors import AlreadyConsumed, InProgress, TemporarilyUnavailable
from writegate.approval.execution import RetryPolicy
from writegate.approval.models import Identity, Proposal
from writegate.approval.reconcile import ReconcilePolicy, Reconciler
from writegate.approval.service import Confirmation
from writegate.checkpoints.ops import PgBacklog
from writegate.checkpoints.pool import Pool, open_pool
from writegate.demo.runtime import open_demo
from writegate.graph.build import build_graph
from writegate.graph.scripted import ScriptedChatModel
from writegate.runtime.wiring import Runtime
from writegate.surfaces.web import create_app

pytestmark = pytest.mark.slow

LEASE = timedelta(seconds=2)
RETRY = RetryPolicy(base_delay=0.01, call_timeout=1.0, lease=LEASE)  # the lease outlasts it
POOL_WAIT_S = 2.0  # how long a caller waits for a connection while the database is away
EXECUTION_SQL = "SELECT status FROM writegate.executions WHERE proposal_id = %s"
EFFECTS_SQL = "SELECT count(*) AS n FROM provider.refunds WHERE order_id = %s"
TOKEN_SQL = "SELECT status FROM writegate.tokens WHERE proposal_id = %s"


class Hooks:
    """The executor's step hook: run a fault once when a given step is reached."""

    def __init__(self) -> None:
        self.armed: dict[str, Callable[[], None]] = {}

    def on(self, step: str, action: Callable[[], None]) -> None:
        self.armed[step] = action

    def __call__(self, step: str) -> None:
        action = self.armed.pop(step, None)
        if action is not None:
            action()


@dataclass
class World:
    db: str
    direct: Pool  # straight to PostgreSQL: what the tests check with
    proxy: FaultProxy
    rt: Runtime  # through the proxy: what the faults hit
    hooks: Hooks
    provider: ProviderProcess
    faults_before: int = field(default=0)

    def confirmed(self, who: Identity) -> tuple[str, Proposal, str]:
        order = make_order(self.direct, who.tenant_id, who.user_id)
        proposal = self.rt.service.propose(
            who,
            thread_id=new_id("thread"),
            tool_call_id=new_id("call"),
            tool_name="refund_order",
            raw_args={"order_id": order, "amount_minor": 19900, "currency": "CNY", "reason": "x"},
        )
        decided = self.rt.service.decide(
            who, Confirm(action="confirm", proposal_id=proposal.proposal_id)
        )
        assert isinstance(decided, Confirmation)
        return order, proposal, decided.token

    def one(self, query: str, key: str) -> Any:
        with self.direct.connection() as conn:
            row = conn.execute(query, (key,)).fetchone()
        return next(iter(row.values())) if row else None

    def effects(self, order: str) -> int:
        return int(self.one(EFFECTS_SQL, order))

    def faults(self) -> int:
        return self.proxy.cuts - self.faults_before

    def pool_serves(self) -> bool:
        """The process's own pool hands out a working connection again."""
        try:
            with self.rt.store.transaction() as tx:
                tx.now()
        except TemporarilyUnavailable:
            return False
        return True

    def graph(self, call_id: str, order: str) -> Any:
        call = {
            "name": "refund_order",
            "args": {"order_id": order, "amount_minor": 19900, "currency": "CNY", "reason": "x"},
            "id": call_id,
        }
        replies = [AIMessage("", tool_calls=[call]), *[AIMessage("done")] * 3]
        model = ScriptedChatModel(script=replies)
        return build_graph(self.rt, model=model, checkpointer=self.rt.checkpointer)


def unavailable_body(exc: TemporarilyUnavailable) -> dict[str, Any]:
    body = exc.to_dict()
    assert body["code"] == "temporarily_unavailable" and body["retryable"] is True
    assert body["message"] and "Traceback" not in str(body)
    return body


def clean(world: World, tenant: str, approved: int = 1) -> dict[str, int]:
    check = ledger_check(world.direct, tenant)
    assert check == {"approved": approved, "effects": approved, "duplicates": 0, "lost": 0,
                     "open": 0}  # fmt: skip
    return check


@pytest.fixture(scope="module")
def module_world(create_database: Callable[[], str], test_server_url: str) -> Iterator[World]:
    db = seeded_database(create_database)
    proxy = FaultProxy(test_server_url)
    provider = ProviderProcess(db).start()
    hooks = Hooks()
    direct = open_pool(db)
    rt = open_demo(
        proxy.url(db), setup=False, provider=provider.client(), retry=RETRY, step_hook=hooks
    ).runtime
    rt.pool.timeout = POOL_WAIT_S
    # The proxy recognises a statement by its text, which a prepared statement sends only
    # the first time on each connection: send the text every time (new connections).
    rt.pool.kwargs = {**(rt.pool.kwargs or {}), "prepare_threshold": None}
    rt.pool.drain()
    yield World(db, direct, proxy, rt, hooks, provider)
    rt.close()
    direct.close()
    provider.stop()
    proxy.close()


@pytest.fixture
def world(module_world: World) -> Iterator[World]:
    module_world.proxy.up()
    module_world.proxy.disarm()
    module_world.hooks.armed.clear()
    module_world.faults_before = module_world.proxy.cuts
    wait_until(module_world.pool_serves, "the pool to serve")
    yield module_world


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    with capsys.disabled():
        print("\n" + line)


def user() -> Identity:
    return Identity(new_id("user"), new_id("tenant"))


# -- the execute transaction ---------------------------------------------------------------


def test_cut_inside_the_execute_transaction_rolls_back_and_the_retry_runs_once(world, capsys):
    who = user()
    order, proposal, token = world.confirmed(who)
    rule = world.proxy.arm(b"writegate.claim(")  # the claim, mid-transaction

    with pytest.raises(TemporarilyUnavailable) as info:
        world.rt.executor.execute(who, token)
    unavailable_body(info.value)
    assert rule.fired.is_set()
    # Rolled back whole: no execution, the token still unused, nothing sent.
    assert world.one(EXECUTION_SQL, proposal.proposal_id) is None
    assert world.one(TOKEN_SQL, proposal.proposal_id) == "issued"
    assert world.effects(order) == 0

    receipt = world.rt.executor.execute(who, token)  # the same process, the same pool
    assert receipt.status == "succeeded"
    check = clean(world, who.tenant_id)
    report(capsys, fault_line("execute_transaction", 1, world.faults(), check))


def test_lost_commit_answer_of_the_execute_transaction_is_finished_by_the_retry(world, capsys):
    who = user()
    order, proposal, token = world.confirmed(who)
    # The COMMIT reaches the server; its answer never reaches writegate.
    world.proxy.arm(b"writegate.claim(", then=b"COMMIT", deliver=True)

    with pytest.raises(TemporarilyUnavailable) as info:
        world.rt.executor.execute(who, token)
    unavailable_body(info.value)
    assert world.one(EXECUTION_SQL, proposal.proposal_id) == "running"
    assert world.effects(order) == 0

    # The claim committed, but nothing here can tell this lost attempt from one still in
    # flight on another thread: the retry is told in_progress and sends nothing.
    with pytest.raises(InProgress):
        world.rt.executor.execute(who, token)
    assert world.effects(order) == 0
    # Once the lease runs out, the reconciler asks the provider: never seen, so it sends
    # it, under the same request key.
    settled = reconcile_until_final(world, proposal)
    assert [(s.action, s.status) for s in settled] == [("retried", "succeeded")]
    assert world.provider.client().calls()["refund"][proposal.request_key] == 1
    report(capsys, fault_line("execute_commit", 1, world.faults(), clean(world, who.tenant_id)))


def reconcile_until_final(world: Any, proposal: Proposal) -> list[Any]:
    """Drain the backlog until this proposal's execution has succeeded (after its lease)."""
    reconciler = Reconciler(
        world.rt.service, PgBacklog(world.rt.pool), policy=ReconcilePolicy(lease=LEASE), retry=RETRY
    )
    settled: list[Any] = []

    def final() -> bool:
        settled.extend(reconciler.drain())
        return world.one(EXECUTION_SQL, proposal.proposal_id) == "succeeded"

    wait_until(final, "reconcile to settle the execution (after its lease)")
    return settled


# -- between the provider's answer and the record -------------------------------------------


def test_database_away_after_the_provider_answered_reconcile_finds_the_effect(world, capsys):
    who = user()
    order, proposal, token = world.confirmed(who)
    world.hooks.on("downstream_returned", world.proxy.down)

    with pytest.raises(TemporarilyUnavailable) as info:
        world.rt.executor.execute(who, token)
    unavailable_body(info.value)
    # While it is away, every call through the library is told the same.
    with pytest.raises(TemporarilyUnavailable):
        world.rt.service.get_proposal(who, proposal.proposal_id)
    assert world.one(EXECUTION_SQL, proposal.proposal_id) == "running"
    assert world.effects(order) == 1  # applied at the provider, not yet recorded

    world.proxy.up()
    wait_until(world.pool_serves, "the pool to reconnect")
    settled = reconcile_until_final(world, proposal)
    assert [(s.action, s.status) for s in settled] == [("found", "succeeded")]
    with pytest.raises(AlreadyConsumed) as again:  # the user's retry gets the receipt
        world.rt.executor.execute(who, token)
    assert again.value.details["receipt"]["status"] == "succeeded"
    assert world.provider.client().calls()["refund"][proposal.request_key] == 1
    report(capsys, fault_line("after_downstream", 1, world.faults(), clean(world, who.tenant_id)))


# -- the graph: a confirm, a checkpoint write, a paused thread ------------------------------


def _tool_results(out: dict[str, Any], call_id: str) -> list[str]:
    return [str(m.content) for m in out["messages"] if getattr(m, "tool_call_id", None) == call_id]


def _paused(world: World, who: Identity) -> tuple[Any, Any, str, str, str]:
    order, call_id = make_order(world.direct, who.tenant_id, who.user_id), new_id("call")
    graph = world.graph(call_id, order)
    ids = {"thread_id": new_id("thread"), "user_id": who.user_id, "tenant_id": who.tenant_id}
    config: Any = {"configurable": ids}
    out = graph.invoke({"messages": [HumanMessage(f"refund {order}")]}, config)
    (asked,) = out["__interrupt__"]
    return graph, config, order, asked.value["proposal_id"], call_id


@pytest.mark.parametrize("answer_lost", [False, True], ids=["cut", "answer_lost"])
def test_cut_during_a_confirm_asks_again_and_the_thread_resumes(world, capsys, answer_lost):
    who = user()
    graph, config, order, proposal_id, call_id = _paused(world, who)
    confirm = Command(resume={"action": "confirm", "proposal_id": proposal_id})
    if answer_lost:  # the confirm commits; its answer is lost
        world.proxy.arm(b"writegate.claim(", then=b"COMMIT", deliver=True)
    else:  # the confirm is cut mid-transaction and rolls back
        world.proxy.arm(b"writegate.claim(")

    out = graph.invoke(confirm, config)
    (asked,) = out["__interrupt__"]  # the same question, with why the answer failed
    assert asked.value["proposal_id"] == proposal_id
    assert asked.value["error"]["code"] == "temporarily_unavailable"
    assert asked.value["error"]["retryable"] is True
    assert world.effects(order) == 0

    out = graph.invoke(confirm, config)
    (result,) = _tool_results(out, call_id)
    if answer_lost:
        # The graph's confirm commits with its execution claim: a retry cannot tell that
        # lost attempt from one in flight, so it is told in_progress, and the reconciler
        # sends it once, after the lease, under the same key.
        assert '"code":"in_progress"' in result
        assert world.effects(order) == 0
        settled = reconcile_until_final(world, world.rt.service.get_proposal(who, proposal_id))
        assert [(s.action, s.status) for s in settled] == [("retried", "succeeded")]
    else:
        assert '"status":"succeeded"' in result
    name = "confirm_answer_lost" if answer_lost else "confirm"
    report(capsys, fault_line(name, 1, world.faults(), clean(world, who.tenant_id)))


def test_cut_during_a_checkpoint_write_the_thread_continues_from_its_checkpoint(world, capsys):
    who = user()
    graph, config, order, proposal_id, call_id = _paused(world, who)
    # Recorded in the ledger, then the very next checkpoint write is cut.
    world.hooks.on("recorded", lambda: world.proxy.arm(b"INSERT INTO checkpoint"))

    with pytest.raises(TemporarilyUnavailable) as info:
        graph.invoke(Command(resume={"action": "confirm", "proposal_id": proposal_id}), config)
    unavailable_body(info.value)
    assert world.effects(order) == 1

    out = graph.invoke(None, config)  # continue the thread from its last checkpoint
    (result,) = _tool_results(out, call_id)
    assert '"status":"succeeded"' in result
    report(capsys, fault_line("checkpoint_write", 1, world.faults(), clean(world, who.tenant_id)))


def test_database_away_a_paused_thread_is_told_so_and_resumes_afterwards(world, capsys):
    who = user()
    graph, config, order, proposal_id, call_id = _paused(world, who)
    confirm = Command(resume={"action": "confirm", "proposal_id": proposal_id})
    world.proxy.down()

    with pytest.raises(TemporarilyUnavailable) as info:
        graph.invoke(confirm, config)
    unavailable_body(info.value)
    with pytest.raises(TemporarilyUnavailable):
        graph.get_state(config)

    world.proxy.up()
    wait_until(world.pool_serves, "the pool to reconnect")
    assert graph.get_state(config).interrupts  # the question still waits
    out = graph.invoke(confirm, config)
    (result,) = _tool_results(out, call_id)
    assert '"status":"succeeded"' in result and world.effects(order) == 1
    report(capsys, fault_line("paused_thread", 1, world.faults(), clean(world, who.tenant_id)))


# -- HTTP ---------------------------------------------------------------------------------


def test_http_answers_503_temporarily_unavailable_while_the_database_is_away(world, capsys):
    who = Identity(new_id("user"), new_id("tenant"))
    _, proposal, token = world.confirmed(who)
    headers = {"Authorization": "Bearer " + make_key(world.db, who.user_id, who.tenant_id)}
    path = f"/v1/approvals/{proposal.proposal_id}"
    with TestClient(create_app(world.rt)) as client:
        assert client.get(path, headers=headers).status_code == 200
        world.proxy.down()
        reply = client.get(path, headers=headers)
        decision = client.post(
            path + "/decision",
            headers={**headers, "Idempotency-Key": new_id("click")},
            json={"action": "confirm", "proposal_id": proposal.proposal_id},
        )
        world.proxy.up()
        wait_until(lambda: client.get(path, headers=headers).status_code == 200, "HTTP again")
    for answer in (reply, decision):
        assert answer.status_code == 503
        body = answer.json()
        assert body["code"] == "temporarily_unavailable" and body["retryable"] is True
        assert body["message"] and "Traceback" not in answer.text
    assert world.rt.executor.execute(who, token).status == "succeeded"  # the same process
    report(capsys, fault_line("http", 1, world.faults(), clean(world, who.tenant_id)))


def test_http_opening_a_thread_and_a_message_answer_503_while_the_database_is_away(world):
    """The requests that check their key in their first transaction say the database
    is away, as those that look it up first do: retryable, no trace; a message too
    before the thread locks' sessions were ever opened, and after they were."""
    who = Identity(new_id("user"), new_id("tenant"))
    headers = {"Authorization": "Bearer " + make_key(world.db, who.user_id, who.tenant_id)}
    with TestClient(create_app(world.rt)) as client:
        thread = client.post("/v1/threads", headers=headers).json()["thread_id"]
        path = f"/v1/threads/{thread}"

        def say() -> Any:
            return client.post(path + "/messages", headers=headers, json={"content": "hello"})

        world.proxy.down()
        answers = [client.post("/v1/threads", headers=headers), say()]
        world.proxy.up()
        wait_until(lambda: client.get(path, headers=headers).status_code == 200, "HTTP again")
        assert say().status_code == 200  # the thread locks' sessions are open now
        world.proxy.down()
        answers.append(say())
        world.proxy.up()
        wait_until(lambda: client.get(path, headers=headers).status_code == 200, "HTTP again")
    for answer in answers:
        assert answer.status_code == 503, answer.text
        body = answer.json()
        assert body["code"] == "temporarily_unavailable" and body["retryable"] is True
        assert body["message"] and "Traceback" not in answer.text
