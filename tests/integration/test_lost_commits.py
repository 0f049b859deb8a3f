"""Operations whose ledger rows a failover lost, found again after the promotion.

Under asynchronous replication a promoted standby may lack the old primary's last
commits: a person's confirm, the claim and the downstream call of a refund are gone
from the ledger while the payment provider paid it. Here a promotion is simulated on
one PostgreSQL as a failover leaves it: the timeline the database is on began now
(`writegate.timelines`), and every pooled connection is dropped. What the lost commits
did is left where it would be: the provider applied the operation's request key, and
the ledger has the proposal still waiting (case P) or nothing at all (case V). The HA
soaks (test_failover.py) run the same through real failovers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import typer
from langchain_core.messages import HumanMessage
from langgraph.types import Command
from typer.testing import CliRunner

from tests.app_db import setup_app
from tests.integration.fault_scripts.harness import wait_until
from tests.integration.graph_helpers import (
    config,
    confirm,
    new_id,
    new_order,
    only_interrupt,
    refund_call,
    refunded_minor,
    refunds_at_provider,
    scripted_graph,
    tool_content,
    tool_messages,
)
from writegate import write_tool
from writegate.approval import errors
from writegate.approval.decisions import Confirm
from writegate.approval.execution import Executor, RetryPolicy
from writegate.approval.models import Identity, Proposal
from writegate.approval.reconcile import ReconcilePolicy, Reconciler, Settled
from writegate.checkpoints.ops import PgBacklog
from writegate.checkpoints.pool import Pool
from writegate.demo.faults import FaultScript
from writegate.demo.provider import SimulatedProvider
from writegate.demo.runtime import open_demo
from writegate.demo.seed import DEMO_TENANT
from writegate.runtime.wiring import Runtime
from writegate.runtime.writegate import Writegate
from writegate.surfaces.cli import ops as cli_ops

# A short lease: the reconciler checks a promotion once calls sent before it have had
# their deadline (the longest lease of its tools), so here within a fifth of a second.
SHORT = RetryPolicy(base_delay=0.0, call_timeout=0.1, lease=timedelta(seconds=0.2))
WHO = Identity("user_42", DEMO_TENANT)
PROMOTED_SQL = "UPDATE writegate.timelines SET began_at = clock_timestamp() RETURNING began_at"
NOW_SQL = "SELECT now() AS now"
PROPOSAL_SQL = "SELECT status, decided_by FROM writegate.proposals WHERE proposal_id = %s"
EXECUTION_SQL = "SELECT * FROM writegate.executions WHERE proposal_id = %s"
REFUND_ROW_SQL = "SELECT status, provider_ref FROM refunds WHERE request_key = %s"
AUDIT_SQL = """
SELECT user_id, event, status, result FROM writegate.audit
WHERE request_key = %s AND event = 'reconcile' ORDER BY audit_id"""


@pytest.fixture
def faults() -> FaultScript:
    return FaultScript()


@pytest.fixture
def url(create_database: Callable[[], str]) -> str:
    """A database of this test's own: a promotion is the database's."""
    url = create_database()
    setup_app(url)
    return url


@pytest.fixture
def provider(url: str, faults: FaultScript) -> SimulatedProvider:
    return SimulatedProvider(url, faults=faults)


@pytest.fixture
def rt(url: str, provider: SimulatedProvider) -> Iterator[Runtime]:
    """The demo on the test's database, its refunds to `provider`."""
    runtime = open_demo(url, setup=False, retry=SHORT, provider=provider).runtime
    try:
        yield runtime
    finally:
        runtime.close()


def promote(pool: Pool) -> datetime:
    """As a failover leaves the database: the timeline it is on began now, and every
    connection made before is gone (each new one notes when its timeline began)."""
    with pool.connection() as conn:
        row = conn.execute(PROMOTED_SQL).fetchone()
    assert row is not None
    pool.drain()
    began: datetime = row["began_at"]
    return began


def reconcile_after(pool: Pool, reconciler: Reconciler, began: datetime) -> list[Settled]:
    """One reconcile run once calls sent before the promotion have had their deadline."""

    def settled_in() -> bool:
        with pool.connection() as conn:
            row = conn.execute(NOW_SQL).fetchone()
        return row is not None and row["now"] >= began + SHORT.lease

    wait_until(settled_in, "the calls sent before the promotion to be over", 5.0)
    return reconciler.drain()


def reconciler(rt: Runtime) -> Reconciler:
    return Reconciler(rt.service, PgBacklog(rt.pool), retry=SHORT)


def mine(settled: list[Settled], key: str) -> list[tuple[str, str]]:
    return [(s.action, s.status) for s in settled if s.request_key == key]


def row(pool: Pool, sql: str, *params: Any) -> dict[str, Any]:
    with pool.connection() as conn:
        found = conn.execute(sql, params).fetchone()
    assert found is not None, (sql, params)
    return dict(found)


def paid_before_the_failover(provider: SimulatedProvider, proposal_key: str, order: str) -> str:
    """What the lost commits did outside the database: the provider paid under the key."""
    paid = provider.refund(
        idempotency_key=proposal_key, order_id=order, amount_minor=19900, currency="CNY"
    )
    return str(paid["provider_ref"])


def escalations(url: str, tenant: str) -> list[dict[str, Any]]:
    app = typer.Typer()
    cli_ops.register(app)
    args = ["escalations", "--json", "--tenant", tenant]
    result = CliRunner().invoke(app, args, env={"DATABASE_URL": url})
    assert result.exit_code == 0, result.output
    listed: list[dict[str, Any]] = json.loads(result.output)
    return listed


# -- case P: the proposal is here, its confirm and claim were lost ------------------------


def test_a_refund_paid_in_lost_commits_is_recorded_and_the_person_and_model_see_its_receipt(
    rt: Runtime, provider: SimulatedProvider, faults: FaultScript
) -> None:
    """Confirmed, claimed and paid on the old primary; the new one has the question still
    waiting. Nobody answers again: the reconciler looks its key up and records what the
    provider did (never a second payment), so the thread's answer is the receipt."""
    order, thread = new_order(rt), new_id("th")
    graph = scripted_graph(rt, [refund_call(order)], "done")
    asked = only_interrupt(graph.invoke({"messages": [HumanMessage("refund")]}, config(thread)))
    proposal = rt.service.get_proposal(WHO, asked.value["proposal_id"])
    ref = paid_before_the_failover(provider, proposal.request_key, order)

    settled = reconcile_after(rt.pool, reconciler(rt), promote(rt.pool))

    assert mine(settled, proposal.request_key) == [("found_after_failover", "succeeded")]
    assert faults.calls[("lookup", proposal.request_key)] == 1
    assert faults.calls[("refund", proposal.request_key)] == 1  # the lost run's, only
    execution = row(rt.pool, EXECUTION_SQL, proposal.proposal_id)
    assert (execution["status"], execution["provider_ref"]) == ("succeeded", ref)
    assert row(rt.pool, PROPOSAL_SQL, proposal.proposal_id) == {
        "status": "executed",
        "decided_by": "system:reconciler",
    }
    assert row(rt.pool, REFUND_ROW_SQL, proposal.request_key) == {
        "status": "succeeded",
        "provider_ref": ref,
    }
    assert refunded_minor(rt, order) == 19900  # the reservation the failover lost, again
    (audit,) = [a for a in _audit(rt.pool, proposal.request_key) if a["status"] == "succeeded"]
    assert audit["user_id"] == "system:reconciler"
    assert audit["result"]["action"] == "found_after_failover"
    assert audit["result"]["provider_ref"] == ref and audit["result"]["why"]

    out = graph.invoke(Command(resume=confirm(proposal.proposal_id)), config(thread))
    told = tool_content(tool_messages(out)[-1])
    assert told["status"] == "succeeded" and told["provider_ref"] == ref
    assert refunds_at_provider(rt, order) == 1


def test_a_refund_the_provider_never_saw_waits_for_the_person_and_is_looked_up_first(
    rt: Runtime, faults: FaultScript
) -> None:
    order = new_order(rt)
    proposal = _propose(rt, order)

    settled = reconcile_after(rt.pool, reconciler(rt), promote(rt.pool))

    assert mine(settled, proposal.request_key) == []
    assert faults.calls[("lookup", proposal.request_key)] == 1
    assert row(rt.pool, PROPOSAL_SQL, proposal.proposal_id)["status"] == "awaiting_confirmation"
    assert refunds_at_provider(rt, order) == 0
    # A confirm of a proposal made before the promotion is looked up again before it is
    # sent (the hand-over): the reconciler finds nothing, and sends it once.
    with pytest.raises(errors.InProgress):
        rt.executor.confirm(WHO, Confirm(action="confirm", proposal_id=proposal.proposal_id))
    assert mine(reconciler(rt).drain(), proposal.request_key) == [("retried", "succeeded")]
    assert faults.calls[("lookup", proposal.request_key)] == 2
    assert refunds_at_provider(rt, order) == 1


def test_a_refund_paid_in_lost_commits_whose_order_moved_since_goes_to_a_person(
    rt: Runtime, provider: SimulatedProvider
) -> None:
    """The provider paid, but the order changed here since: the reservation cannot be
    made again as the person saw it. Nothing is guessed: a person settles it."""
    order = new_order(rt)
    proposal = _propose(rt, order)
    paid_before_the_failover(provider, proposal.request_key, order)
    with rt.pool.connection() as conn:
        conn.execute("UPDATE orders SET version = version + 1 WHERE order_id = %s", (order,))

    settled = reconcile_after(rt.pool, reconciler(rt), promote(rt.pool))

    assert mine(settled, proposal.request_key) == [("escalated", "escalated")]
    (listed,) = escalations(rt.url, DEMO_TENANT)
    assert listed["kind"] == "failover" and listed["request_key"] == proposal.request_key
    assert listed["escalation"]["reason"] == "local_part_refused"
    assert listed["escalation"]["error"]["code"] == "state_changed"
    assert row(rt.pool, PROPOSAL_SQL, proposal.proposal_id)["status"] == "awaiting_confirmation"
    assert refunds_at_provider(rt, order) == 1


def test_a_pending_write_of_a_tool_without_lookup_goes_to_a_person_after_a_failover(
    create_database: Callable[[], str],
) -> None:
    """Its proposal may have been confirmed and sent in the commits the failover lost, and
    nothing can tell: a person is asked, and nothing is sent."""
    sent: list[str] = []

    @write_tool(side_effect="external")
    def post_notice(channel: str, text: str, *, request_key: str) -> dict[str, Any]:
        """Post a notice to a channel.

        Args:
            channel: Where.
            text: What.
        """
        sent.append(request_key)
        return {"posted": request_key}

    url = create_database()
    with Writegate.open(url, tools=[post_notice], retry=SHORT) as wg:
        proposal = wg.runtime.service.propose(
            WHO,
            thread_id=new_id("th"),
            tool_call_id=new_id("call"),
            tool_name="post_notice",
            raw_args={"channel": "ops", "text": "deploy at noon"},
        )
        settled = reconcile_after(wg.runtime.pool, wg.reconciler(), promote(wg.runtime.pool))

        assert mine(settled, proposal.request_key) == [("escalated", "escalated")]
        (listed,) = escalations(url, DEMO_TENANT)
        assert listed["escalation"]["reason"] == "no_lookup"
        assert listed["proposal_id"] == proposal.proposal_id
        assert sent == []


# -- case V: the proposal was lost whole ---------------------------------------------------


def test_an_effect_only_the_provider_has_is_escalated_with_what_the_provider_says(
    rt: Runtime, provider: SimulatedProvider
) -> None:
    """The proposal, its confirm and its run were all in the lost commits: only the
    provider has the refund, under a writegate request key the ledger does not know.
    Its listing of what it applied since shortly before the promotion finds it."""
    order = new_order(rt)
    lost_key = f"refund_order:{DEMO_TENANT}:order:{order}:prop_{new_id('lost')}"
    ref = paid_before_the_failover(provider, lost_key, order)
    provider.refund(  # someone else's refund at the same provider: not writegate's
        idempotency_key=new_id("pos"), order_id=order, amount_minor=100, currency="CNY"
    )
    known = _propose(rt, new_order(rt))  # a key the ledger has: nothing to say about it
    paid_before_the_failover(provider, known.request_key, known.args["order_id"])

    settled = reconcile_after(rt.pool, reconciler(rt), promote(rt.pool))

    assert mine(settled, lost_key) == [("escalated", "escalated")]
    assert mine(settled, known.request_key) == [("found_after_failover", "succeeded")]
    (listed,) = escalations(rt.url, DEMO_TENANT)
    assert listed["kind"] == "failover" and listed["request_key"] == lost_key
    assert listed["operation"] == "refund_order" and listed["proposal_id"] is None
    assert listed["escalation"]["reason"] == "applied_downstream_not_in_ledger"
    assert listed["escalation"]["downstream"]["provider_ref"] == ref
    assert reconciler(rt).drain() == []  # a promotion is checked once


def _propose(rt: Runtime, order: str) -> Proposal:
    return rt.service.propose(
        WHO,
        thread_id=new_id("th"),
        tool_call_id=new_id("call"),
        tool_name="refund_order",
        raw_args={"order_id": order, "amount_minor": 19900, "currency": "CNY", "reason": "x"},
    )


def _audit(pool: Pool, key: str) -> list[dict[str, Any]]:
    with pool.connection() as conn:
        return [dict(r) for r in conn.execute(AUDIT_SQL, (key,)).fetchall()]


# -- the run whose claim a promotion lost under it -------------------------------------

# What the new primary lacks of a claim that committed on the old one, in order.
LOSE_THE_CLAIM_SQL = (
    "DELETE FROM writegate.executions WHERE proposal_id = %(proposal_id)s",
    "DELETE FROM writegate.tokens WHERE proposal_id = %(proposal_id)s",
    "UPDATE writegate.proposals SET status = 'awaiting_confirmation', decided_by = NULL,"
    " decided_at = NULL WHERE proposal_id = %(proposal_id)s",
    "DELETE FROM refunds WHERE request_key = %(request_key)s",
    "UPDATE orders SET refunded_minor = 0, version = version - 1 WHERE order_id = %(order)s",
)


def test_a_run_whose_claim_the_promotion_lost_is_told_to_retry_and_found_by_its_key(
    rt: Runtime, faults: FaultScript
) -> None:
    """The claim committed on the old primary, the provider paid, and the new primary,
    promoted meanwhile, lacks the claim: the outcome cannot be recorded. The person is
    told to try again (never a crash); the retry's claim is handed over, looked up, and
    the one payment recorded."""
    order = new_order(rt)
    proposal = _propose(rt, order)
    params = {
        "proposal_id": proposal.proposal_id,
        "request_key": proposal.request_key,
        "order": order,
    }

    def lost_under_it(step: str) -> None:
        if step == "downstream_returned":
            with rt.pool.connection() as conn, conn.transaction():
                for statement in LOSE_THE_CLAIM_SQL:
                    conn.execute(statement, params)
            promote(rt.pool)

    again = Confirm(action="confirm", proposal_id=proposal.proposal_id)
    executor = Executor(rt.service, retry=SHORT, step_hook=lost_under_it)
    with pytest.raises(errors.TemporarilyUnavailable):
        executor.confirm(WHO, again)
    assert refunds_at_provider(rt, order) == 1

    with pytest.raises(errors.InProgress):  # handed to the reconciler: looked up first
        rt.executor.confirm(WHO, again)
    assert mine(reconciler(rt).drain(), proposal.request_key) == [("found", "succeeded")]
    assert faults.calls[("refund", proposal.request_key)] == 1
    assert refunded_minor(rt, order) == 19900


def test_a_lookup_that_keeps_failing_has_the_check_made_again_then_a_person_asked(
    rt: Runtime, faults: FaultScript
) -> None:
    order = new_order(rt)
    proposal = _propose(rt, order)
    faults.add(f"lookup:{order}=unavailable*")
    patient = Reconciler(
        rt.service, PgBacklog(rt.pool), policy=ReconcilePolicy(max_checks=2), retry=SHORT
    )

    assert reconcile_after(rt.pool, patient, promote(rt.pool)) == []  # asked again later
    assert patient.drain() == []  # not yet: the reconciler's backoff
    with rt.pool.connection() as conn:  # as if the backoff had passed
        conn.execute("UPDATE writegate.failover_checks SET lease_expires_at = now()")
    assert mine(patient.drain(), proposal.request_key) == [("escalated", "escalated")]
    (listed,) = escalations(rt.url, DEMO_TENANT)
    assert listed["escalation"]["reason"] == "lookup_failed"
    assert faults.calls[("lookup", proposal.request_key)] == 2
    assert refunds_at_provider(rt, order) == 0
