"""Fault injection with real processes: SIGKILLed workers, a provider over HTTP that
times out, loses answers and dies, concurrent processes, replays and expired records.

Each scenario ends with `ledger_check`: every approved operation has exactly one
effect at the provider, the ledger records it with the provider's reference, the
money reserved matches what was paid, and nothing is left running or unknown.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from tests.app_db import setup_app
from tests.demo_registry import default_registry
from tests.integration.fault_scripts.harness import (
    TALLY,
    Child,
    ProviderProcess,
    fault_tally,  # noqa: F401  (the session's figures, printed in the summary)
    ledger_check,
    make_order,
    new_id,
    run_child,
    wait_until,
)
from writegate.approval import errors
from writegate.approval.decisions import Confirm
from writegate.approval.errors import RecordExpired
from writegate.approval.execution import Executor, RetryPolicy
from writegate.approval.models import Identity, Proposal
from writegate.approval.reconcile import ReconcilePolicy, Reconciler, Settled, receipt_for
from writegate.approval.retention import RetentionPolicy
from writegate.approval.service import ApprovalService, Confirmation
from writegate.checkpoints.ledger import PgLedgerStore
from writegate.checkpoints.ops import PgBacklog, purge
from writegate.checkpoints.pool import Pool, open_pool

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fault_tally")]

FAST_RETRY = RetryPolicy(base_delay=0.01, call_timeout=2.0, lease=timedelta(seconds=5))
EXECUTION_SQL = "SELECT * FROM writegate.executions WHERE proposal_id = %s"
LEASE_EXPIRED_SQL = """
SELECT lease_expires_at <= now() AS expired FROM writegate.executions WHERE proposal_id = %s"""
EFFECTS_SQL = "SELECT count(*) AS n FROM provider.refunds WHERE order_id = %s"


@pytest.fixture(scope="module")
def db(create_database: Callable[[], str]) -> str:
    url = create_database()  # its own database: reconcile and purge see only this suite
    setup_app(url)
    return url


@pytest.fixture(scope="module")
def ops_pool(db: str) -> Iterator[Pool]:
    pool = open_pool(db)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def provider(db: str) -> Iterator[ProviderProcess]:
    process = ProviderProcess(db).start()
    yield process
    process.stop()


@dataclass
class World:
    db: str
    pool: Pool
    provider: ProviderProcess

    def service(self) -> ApprovalService:
        registry = default_registry(self.provider.client(timeout=0.3))
        return ApprovalService(PgLedgerStore(self.pool), registry)

    def executor(self) -> Executor:
        return Executor(self.service(), retry=FAST_RETRY)

    def confirmed(self, who: Identity) -> tuple[str, Proposal, str]:
        service = self.service()
        order = make_order(self.pool, who.tenant_id, who.user_id)
        proposal = service.propose(
            who,
            thread_id=new_id("thread"),
            tool_call_id=new_id("call"),
            tool_name="refund_order",
            raw_args={"order_id": order, "amount_minor": 19900, "currency": "CNY", "reason": "x"},
        )
        decided = service.decide(who, Confirm(action="confirm", proposal_id=proposal.proposal_id))
        assert isinstance(decided, Confirmation)
        return order, proposal, decided.token

    def job(self, who: Identity, proposal: Proposal, token: str, **extra: Any) -> dict[str, Any]:
        return {
            "mode": "execute",
            "db": self.db,
            "provider": self.provider.url,
            "user": who.user_id,
            "tenant": who.tenant_id,
            "token": token,
            "proposal_id": proposal.proposal_id,
            **extra,
        }

    def execution(self, proposal: Proposal) -> dict[str, Any]:
        with self.pool.connection() as conn:
            row = conn.execute(EXECUTION_SQL, (proposal.proposal_id,)).fetchone()
        assert row is not None
        return dict(row)

    def effects(self, order: str) -> int:
        with self.pool.connection() as conn:
            row = conn.execute(EFFECTS_SQL, (order,)).fetchone()
        return int(row["n"]) if row else 0

    def refund_calls(self, proposal: Proposal) -> int:
        return self.provider.client().calls()["refund"].get(proposal.request_key, 0)

    def reconcile_until_settled(self, proposal: Proposal) -> list[Settled]:
        """Reconcile until this execution is final; its old lease must expire first."""
        reconciler = Reconciler(
            self.service(),
            PgBacklog(self.pool),
            policy=ReconcilePolicy(lease=timedelta(seconds=5)),
            retry=FAST_RETRY,
        )
        settled: list[Settled] = []

        def final() -> bool:
            settled.extend(reconciler.drain())
            return self.execution(proposal)["status"] in ("succeeded", "failed_terminal")

        wait_until(final, "reconciliation to settle the execution")
        return [s for s in settled if s.request_key == proposal.request_key]


@pytest.fixture
def world(db: str, ops_pool: Pool, provider: ProviderProcess) -> World:
    if not provider.alive():  # a scenario killed it on purpose
        provider.start()
    provider.client().set_faults()  # no faults left over
    return World(db, ops_pool, provider)


def user() -> Identity:
    return Identity(new_id("user"), new_id("tenant"))


def assert_clean(world: World, who: Identity) -> None:
    check = ledger_check(world.pool, who.tenant_id)
    assert check == {"approved": 1, "effects": 1, "duplicates": 0, "lost": 0, "open": 0}


def killed(code: int) -> None:
    assert code == -signal.SIGKILL, f"the worker was not killed (exit {code})"
    TALLY.kills += 1


# -- SIGKILL at each step of the execute path -------------------------------------------


def test_killed_after_claiming_is_looked_up_then_sent_once_with_the_same_key(world: World):
    who = user()
    order, proposal, token = world.confirmed(who)
    code, _ = run_child(world.job(who, proposal, token, kill_at="claimed"))
    killed(code)
    assert world.execution(proposal)["status"] == "running" and world.effects(order) == 0

    settled = world.reconcile_until_settled(proposal)
    assert_clean(world, who)
    assert [(s.previous_status, s.action, s.status) for s in settled] == [
        ("running", "retried", "succeeded")
    ]
    calls = world.provider.client().calls()
    assert calls["lookup"][proposal.request_key] == 1  # looked up before sending
    assert calls["refund"][proposal.request_key] == 1  # sent once, under the same key


def test_killed_after_the_provider_applied_is_found_not_sent_again(world: World):
    who = user()
    order, proposal, token = world.confirmed(who)
    code, _ = run_child(world.job(who, proposal, token, kill_at="downstream_returned"))
    killed(code)
    assert world.execution(proposal)["status"] == "running" and world.effects(order) == 1

    settled = world.reconcile_until_settled(proposal)
    assert_clean(world, who)
    assert [(s.action, s.status) for s in settled] == [("found", "succeeded")]
    assert world.refund_calls(proposal) == 1  # only the dead worker's: never re-sent


def test_killed_after_recording_before_the_checkpoint_resumes_to_the_receipt(world: World):
    from langgraph.types import Command

    from writegate.demo.runtime import open_demo
    from writegate.graph.build import build_graph
    from writegate.graph.scripted import ScriptedChatModel

    who, order = user(), ""
    order = make_order(world.pool, who.tenant_id, who.user_id)
    configurable = {"thread_id": new_id("thread"), **_ids(who)}
    job = {
        "mode": "graph",
        "db": world.db,
        "provider": world.provider.url,
        "order_id": order,
        "amount": 19900,
        "call_id": new_id("call"),
        "configurable": configurable,
        "kill_at": "recorded",
    }
    code, _ = run_child(job)
    killed(code)
    assert world.effects(order) == 1

    # A new process resumes the thread from its last checkpoint.
    with open_demo(world.db, setup=False, provider=world.provider.client()).runtime as rt:
        graph = build_graph(
            rt, model=ScriptedChatModel(script=_done_replies()), checkpointer=rt.checkpointer
        )
        config: Any = {"configurable": configurable}
        out = graph.invoke(None, config)
        if out.get("__interrupt__"):  # the checkpoint was from before the confirmation
            (asked,) = out["__interrupt__"]
            decision = {"action": "confirm", "proposal_id": asked.value["proposal_id"]}
            out = graph.invoke(Command(resume=decision), config)
    results = [m for m in out["messages"] if getattr(m, "tool_call_id", None) == job["call_id"]]
    assert len(results) == 1 and '"status":"succeeded"' in str(results[0].content)
    assert world.effects(order) == 1
    assert_clean(world, who)


def test_reconciler_killed_after_its_retry_applied_is_finished_by_the_next(world: World):
    who = user()
    order, proposal, token = world.confirmed(who)
    killed(run_child(world.job(who, proposal, token, kill_at="claimed"))[0])
    wait_until(lambda: _lease_expired(world, proposal), "the worker's lease to expire")
    reconcile_job = {"mode": "reconcile", "db": world.db, "provider": world.provider.url}
    killed(run_child({**reconcile_job, "kill_at": "downstream_returned"})[0])
    assert world.effects(order) == 1 and world.execution(proposal)["status"] == "running"

    settled = world.reconcile_until_settled(proposal)
    assert_clean(world, who)
    assert [(s.action, s.status) for s in settled] == [("found", "succeeded")]
    assert world.refund_calls(proposal) == 1


# -- the provider times out, loses answers, dies -----------------------------------------


def test_provider_dies_after_applying_then_reconcile_finds_it(world: World):
    who = user()
    order, proposal, token = world.confirmed(who)
    world.provider.client().set_faults(f"{order}=apply_then_die")
    with pytest.raises(errors.OutcomeUnknown):
        world.executor().execute(who, token)
    wait_until(lambda: not world.provider.alive(), "the provider process to die")
    TALLY.provider_deaths += 1
    assert world.execution(proposal)["status"] == "unknown" and world.effects(order) == 1

    world.provider.start()  # restarted on a new port, same table
    settled = world.reconcile_until_settled(proposal)
    assert_clean(world, who)
    assert [(s.action, s.status) for s in settled] == [("found", "succeeded")]


def test_answer_lost_after_apply_the_retry_gets_the_stored_result(world: World):
    who = user()
    order, proposal, token = world.confirmed(who)
    world.provider.client().set_faults(f"{order}=timeout_after")
    receipt = world.executor().execute(who, token)
    assert receipt.status == "succeeded"
    assert world.refund_calls(proposal) == 2 and world.effects(order) == 1
    assert_clean(world, who)


def test_timeouts_on_every_attempt_stay_unknown_until_reconciled(world: World):
    who = user()
    order, proposal, token = world.confirmed(who)
    world.provider.client().set_faults(f"{order}=timeout_after*3")
    service = world.service()
    with pytest.raises(errors.OutcomeUnknown):
        world.executor().execute(who, token)
    assert world.execution(proposal)["status"] == "unknown" and world.effects(order) == 1
    # The agent retries: the same confirmation, then a fresh proposal. Neither runs.
    with pytest.raises(errors.OutcomeUnknown):
        world.executor().execute(who, token)
    with pytest.raises(errors.OutcomeUnknown):
        service.propose(
            who,
            thread_id=proposal.thread_id,
            tool_call_id=new_id("call"),
            tool_name="refund_order",
            raw_args=proposal.args,
        )
    with pytest.raises(errors.OutcomeUnknown):
        receipt_for(service.store, who, proposal.proposal_id)
    assert world.refund_calls(proposal) == 3

    world.reconcile_until_settled(proposal)
    assert_clean(world, who)
    receipt = receipt_for(service.store, who, proposal.proposal_id)
    assert receipt.status == "succeeded" and receipt.provider_ref


def test_over_http_transient_codes_are_retried_and_a_decline_is_not(world: World):
    who = user()
    order, proposal, token = world.confirmed(who)
    world.provider.client().set_faults(f"{order}=503,429")
    assert world.executor().execute(who, token).status == "succeeded"
    assert world.refund_calls(proposal) == 3  # two retries, one key
    assert_clean(world, who)

    other = user()
    order, proposal, token = world.confirmed(other)
    world.provider.client().set_faults(f"{order}=decline")
    with pytest.raises(errors.ExecutionFailed):
        world.executor().execute(other, token)
    assert world.refund_calls(proposal) == 1 and world.effects(order) == 0
    execution = world.execution(proposal)
    assert (
        execution["status"] == "failed_terminal" and execution["error_code"] == "execution_failed"
    )
    with world.pool.connection() as conn:
        row = conn.execute("SELECT refunded_minor FROM orders WHERE order_id = %s", (order,))
        assert row.fetchone() == {"refunded_minor": 0}  # the reservation was released


# -- concurrency, replays, retention -----------------------------------------------------


def _race(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    children = [Child({**job, "barrier": True}) for job in jobs]
    for child in children:
        child.wait_ready()
    for child in children:  # released together
        child.go()
    return [child.finish()[1] for child in children]


def test_four_processes_executing_one_token_run_it_once(world: World):
    who = user()
    _, proposal, token = world.confirmed(who)
    outcomes = _race([world.job(who, proposal, token)] * 4)
    assert_clean(world, who)
    first = [o for o in outcomes if o.get("status") == "succeeded"]
    others = [o.get("code") for o in outcomes if "code" in o]
    assert len(first) == 1 and set(others) <= {"already_consumed", "in_progress"}
    assert world.refund_calls(proposal) == 1


def test_four_processes_confirming_and_executing_one_proposal_run_it_once(world: World):
    who = user()
    service = world.service()
    order = make_order(world.pool, who.tenant_id, who.user_id)
    proposal = service.propose(
        who,
        thread_id=new_id("thread"),
        tool_call_id=new_id("call"),
        tool_name="refund_order",
        raw_args={"order_id": order, "amount_minor": 19900, "currency": "CNY", "reason": "x"},
    )
    outcomes = _race([{**world.job(who, proposal, ""), "mode": "confirm_execute"}] * 4)
    assert_clean(world, who)
    assert sum(o.get("status") == "succeeded" for o in outcomes) == 1
    allowed = {"already_consumed", "in_progress", "token_replaced"}  # never a bare unknown
    assert {o["code"] for o in outcomes if "code" in o} <= allowed


def test_valid_token_replayed_by_another_user_or_tenant_is_refused(world: World):
    who = user()
    order, proposal, token = world.confirmed(who)
    stranger = Identity(new_id("user"), who.tenant_id)
    elsewhere = Identity(who.user_id, new_id("tenant"))
    outcomes = _race([world.job(stranger, proposal, token), world.job(elsewhere, proposal, token)])
    assert [o.get("code") for o in outcomes] == ["subject_mismatch", "tenant_mismatch"]
    assert world.effects(order) == 0
    assert world.executor().execute(who, token).status == "succeeded"  # still the owner's
    assert_clean(world, who)


def test_late_retry_after_retention_expiry_is_refused_by_the_tombstone(world: World):
    who = user()
    order, proposal, token = world.confirmed(who)
    assert world.executor().execute(who, token).status == "succeeded"
    assert_clean(world, who)

    report = purge(world.pool, RetentionPolicy(days=0))
    assert report.executions >= 1
    code, outcome = run_child(world.job(who, proposal, token))  # the late retry
    assert code == 0 and outcome["code"] == RecordExpired.code
    assert outcome["details"]["final_status"] == "succeeded"
    assert world.effects(order) == 1
    with world.pool.connection() as conn:
        left = conn.execute(EXECUTION_SQL, (proposal.proposal_id,)).fetchone()
    assert left is None  # refused before anything was written


def _ids(who: Identity) -> dict[str, str]:
    return {"user_id": who.user_id, "tenant_id": who.tenant_id}


def _done_replies() -> list[Any]:
    from langchain_core.messages import AIMessage

    return [AIMessage("done"), AIMessage("done")]


def _lease_expired(world: World, proposal: Proposal) -> bool:
    with world.pool.connection() as conn:
        row = conn.execute(LEASE_EXPIRED_SQL, (proposal.proposal_id,)).fetchone()
    return bool(row and row["expired"])
