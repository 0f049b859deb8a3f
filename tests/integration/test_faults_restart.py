"""A real PostgreSQL restart in the middle of a run of confirmed writes.

A private cluster (never the shared one) is crashed (`pg_ctl -m immediate`) at an
exact point of write #40 of 120: after the provider applied it, before writegate
recorded it. The writer, like any client, retries what it was told is retryable
(`temporarily_unavailable`), and the one write the crash cut after the provider answered
is finished by the reconciler; a second thread starts the cluster once the writer has
seen the outage. The same process, the same pool carry on; a thread paused at its
question before the crash is resumed after it. Every write: exactly one effect.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.types import Command

from tests.app_db import setup_app
from tests.integration.fault_scripts.harness import (
    ProviderProcess,
    fault_line,
    ledger_check,
    make_order,
    new_id,
    wait_until,
)
from tests.integration.private_cluster import PrivateCluster
from writegate.approval.decisions import Confirm
from writegate.approval.errors import InProgress, OutcomeUnknown, TemporarilyUnavailable
from writegate.approval.execution import RetryPolicy
from writegate.approval.models import Identity
from writegate.approval.reconcile import ReconcilePolicy, Reconciler, receipt_for
from writegate.approval.service import Confirmation
from writegate.checkpoints.database import with_database
from writegate.checkpoints.ops import PgBacklog
from writegate.demo.runtime import open_demo
from writegate.graph.build import build_graph
from writegate.graph.scripted import ScriptedChatModel
from writegate.runtime.wiring import Runtime

pytestmark = pytest.mark.slow

WRITES = 120
CRASH_AT = 40
LEASE = timedelta(seconds=3)
RETRY = RetryPolicy(base_delay=0.01, call_timeout=2.0, lease=LEASE)  # the lease outlasts it
OUTAGE_DEADLINE_S = 60.0
T = TypeVar("T")


@pytest.fixture(scope="module")
def cluster() -> Iterator[PrivateCluster]:
    cluster = PrivateCluster().init()
    cluster.start()
    yield cluster
    cluster.remove()


class Outage:
    """The writer reports what it was told; the restarter brings the server back."""

    def __init__(self, cluster: PrivateCluster) -> None:
        self.cluster = cluster
        self.seen = threading.Event()  # the writer was told temporarily_unavailable
        self.back = threading.Event()  # the server runs again
        self.told = 0
        self.restarts = 0
        self.settled_by_reconcile = 0

    def crash(self) -> None:
        self.cluster.stop("immediate")
        self.restarts += 1

    def restart_when_seen(self) -> None:
        if self.seen.wait(OUTAGE_DEADLINE_S):
            self.cluster.start()
        self.back.set()

    def retried(self, call: Callable[[], T]) -> T:
        """Call; while told `temporarily_unavailable`, wait for the server and retry."""
        while True:
            try:
                return call()
            except TemporarilyUnavailable as exc:
                assert exc.to_dict()["retryable"] is True
                self.told += 1
                self.seen.set()
                assert self.back.wait(OUTAGE_DEADLINE_S), "the server never came back"
                assert self.told < 50, "still unavailable long after the restart"


def test_postgres_restart_mid_run_every_write_once_and_a_paused_thread_resumes(cluster, capsys):
    db = with_database(cluster.url, "writegate_restart")
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        conn.execute("CREATE DATABASE writegate_restart")
    setup_app(db)
    provider = ProviderProcess(db).start()
    outage = Outage(cluster)
    crash_armed = threading.Event()

    def hook(step: str) -> None:
        if step == "downstream_returned" and crash_armed.is_set():
            crash_armed.clear()
            outage.crash()

    rt = open_demo(
        db, setup=False, provider=provider.client(timeout=5.0), retry=RETRY, step_hook=hook
    ).runtime
    rt.pool.timeout = 2.0
    who = Identity(new_id("user"), new_id("tenant"))
    try:
        graph, config, paused_call = _pause_a_thread(rt, who)
        restarter = threading.Thread(target=outage.restart_when_seen, daemon=True)
        restarter.start()
        receipts = []
        for n in range(WRITES):
            if n == CRASH_AT:
                crash_armed.set()
            receipts.append(_one_write(rt, who, outage))
        restarter.join(timeout=OUTAGE_DEADLINE_S)

        assert outage.restarts == 1 and outage.told >= 1
        assert [r.status for r in receipts] == ["succeeded"] * WRITES
        # The question asked before the crash is still there, and answering it runs it.
        (asked,) = graph.get_state(config).interrupts
        out = graph.invoke(
            Command(resume={"action": "confirm", "proposal_id": asked.value["proposal_id"]}),
            config,
        )
        results = [m for m in out["messages"] if getattr(m, "tool_call_id", None) == paused_call]
        assert len(results) == 1 and '"status":"succeeded"' in str(results[0].content)

        check = ledger_check(rt.pool, who.tenant_id)
        approved = WRITES + 1
        assert check == {"approved": approved, "effects": approved, "duplicates": 0,
                         "lost": 0, "open": 0}  # fmt: skip
        with capsys.disabled():
            print("\n" + fault_line("restart", approved, outage.restarts, check))
    finally:
        rt.close()
        provider.stop()


def _one_write(rt: Runtime, who: Identity, outage: Outage) -> Any:
    order = outage.retried(lambda: _order(rt, who))
    call_id = new_id("call")
    args = {"order_id": order, "amount_minor": 19900, "currency": "CNY", "reason": "x"}
    proposal = outage.retried(
        lambda: rt.service.propose(
            who, thread_id="restart-run", tool_call_id=call_id, tool_name="refund_order",
            raw_args=args,
        )
    )  # fmt: skip
    decided = outage.retried(
        lambda: rt.service.decide(who, Confirm(action="confirm", proposal_id=proposal.proposal_id))
    )
    assert isinstance(decided, Confirmation)
    try:
        return outage.retried(lambda: rt.executor.execute(who, decided.token))
    except InProgress:
        # The crash came after the provider answered: the execution is claimed but not
        # recorded, and nobody here can tell it from one still in flight. After its lease
        # the reconciler looks the key up at the provider and records what it finds.
        outage.settled_by_reconcile += 1
        return _reconciled(rt, who, proposal.proposal_id)


def _reconciled(rt: Runtime, who: Identity, proposal_id: str) -> Any:
    reconciler = Reconciler(
        rt.service, PgBacklog(rt.pool), policy=ReconcilePolicy(lease=LEASE), retry=RETRY
    )

    def receipt() -> Any:
        reconciler.drain()
        try:
            return receipt_for(rt.store, who, proposal_id)
        except (InProgress, OutcomeUnknown, TemporarilyUnavailable):
            return None

    return wait_until(receipt, "the reconciler to settle the write the crash cut", 60.0)


def _order(rt: Runtime, who: Identity) -> str:
    try:
        return make_order(rt.pool, who.tenant_id, who.user_id)
    except psycopg.OperationalError as exc:  # test data, written straight to the pool
        raise TemporarilyUnavailable() from exc


def _pause_a_thread(rt: Runtime, who: Identity) -> tuple[Any, Any, str]:
    order, call_id = make_order(rt.pool, who.tenant_id, who.user_id), new_id("call")
    call = {
        "name": "refund_order",
        "args": {"order_id": order, "amount_minor": 19900, "currency": "CNY", "reason": "x"},
        "id": call_id,
    }
    model = ScriptedChatModel(script=[AIMessage("", tool_calls=[call]), AIMessage("done")])
    graph = build_graph(rt, model=model, checkpointer=rt.checkpointer)
    ids = {"thread_id": new_id("thread"), "user_id": who.user_id, "tenant_id": who.tenant_id}
    config: Any = {"configurable": ids}
    out = graph.invoke({"messages": [HumanMessage(f"refund {order}")]}, config)
    assert out["__interrupt__"]
    return graph, config, call_id
