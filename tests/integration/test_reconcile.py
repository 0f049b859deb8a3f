"""Reconciliation on a real PostgreSQL, with the in-process provider and scripted faults.

Scenarios: found at the provider, never applied (sent again with the same key),
declined on the retry, lookups that keep failing (backoff, then escalation), a
provider record that disagrees, a key older than the provider keeps keys, live and
lost leases, several reconcile processes sharing one backlog, the receipt afterwards,
retention with tombstones, and the metrics.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import typer
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from tests.app_db import setup_app
from tests.demo_registry import default_registry
from tests.integration.fault_scripts.harness import ROOT, make_order, new_id, wait_until
from tests.integration.http_fixtures import free_port
from writegate.approval import errors
from writegate.approval.decisions import Confirm, Decline, Edit
from writegate.approval.errors import RecordExpired
from writegate.approval.execution import Executor, RetryPolicy
from writegate.approval.models import Identity, Proposal
from writegate.approval.reconcile import ReconcilePolicy, Reconciler, Settled, receipt_for
from writegate.approval.retention import RetentionPolicy
from writegate.approval.service import ApprovalService, Confirmation
from writegate.checkpoints.ledger import PgLedgerStore
from writegate.checkpoints.ops import PgBacklog, ledger_stats, purge
from writegate.checkpoints.pool import Pool, open_pool
from writegate.console.app import command as console_app
from writegate.demo.faults import FaultScript
from writegate.demo.provider import SimulatedProvider
from writegate.surfaces.cli import ops as cli_ops
from writegate.surfaces.metrics import prometheus_text

RETRY = RetryPolicy(base_delay=0.0, lease=timedelta(seconds=30))
EXECUTION_SQL = "SELECT * FROM writegate.executions WHERE proposal_id = %s"
AUDIT_SQL = """
SELECT event, status, result->>'action' AS action FROM writegate.audit
WHERE proposal_id = %s AND event IN ('execute', 'reconcile') ORDER BY audit_id"""
ORDER_SQL = "SELECT refunded_minor FROM orders WHERE order_id = %s"
DUE_NOW_SQL = "UPDATE writegate.executions SET next_check_at = now() WHERE proposal_id = %s"
METRICS = (
    "writegate_duplicate_requests",
    "writegate_fingerprint_conflicts",
    "writegate_unknown_outcomes",
    "writegate_backlog_oldest_age_seconds",
    "writegate_reconcile_latency_seconds",
)
LEASE_EXPIRED_SQL = """
SELECT lease_expires_at <= now() AS expired FROM writegate.executions WHERE proposal_id = %s"""
# Thirty-one days pass for one tenant's rows (all but those in `keep`).
AGE_EXECUTIONS_SQL = """
UPDATE writegate.executions SET completed_at = completed_at - interval '31 days'
WHERE tenant_id = %(tenant)s AND completed_at IS NOT NULL"""
AGE_PROPOSALS_SQL = """
UPDATE writegate.proposals SET expires_at = expires_at - interval '31 days'
WHERE tenant_id = %(tenant)s AND proposal_id <> ALL(%(keep)s)"""


@pytest.fixture(scope="module")
def db(create_database: Callable[[], str]) -> str:
    url = create_database()  # its own database: the backlog holds only this module's work
    setup_app(url)
    return url


@pytest.fixture(scope="module")
def ops_pool(db: str) -> Iterator[Pool]:
    pool = open_pool(db, max_size=12)
    yield pool
    pool.close()


@dataclass
class Ops:
    pool: Pool
    faults: FaultScript
    service: ApprovalService

    def executor(self, **kwargs: Any) -> Executor:
        return Executor(self.service, retry=kwargs.pop("retry", RETRY), **kwargs)

    def reconciler(self, step_hook: Any = None, **policy: Any) -> Reconciler:
        lease = policy.pop("lease", timedelta(seconds=30))
        return Reconciler(
            self.service,
            PgBacklog(self.pool),
            policy=ReconcilePolicy(lease=lease, **policy),
            retry=RETRY,
            step_hook=step_hook,
        )

    def propose(self, who: Identity, order: str, amount: int = 19900) -> Proposal:
        return self.service.propose(
            who,
            thread_id=new_id("thread"),
            tool_call_id=new_id("call"),
            tool_name="refund_order",
            raw_args={"order_id": order, "amount_minor": amount, "currency": "CNY", "reason": "x"},
        )

    def confirmed(self, who: Identity, *faults: str) -> tuple[str, Proposal, str]:
        order = make_order(self.pool, who.tenant_id, who.user_id)
        self.faults.add(*(f"{order}={f}" for f in faults))
        proposal = self.propose(who, order)
        decided = self.service.decide(
            who, Confirm(action="confirm", proposal_id=proposal.proposal_id)
        )
        assert isinstance(decided, Confirmation)
        return order, proposal, decided.token

    def unknown(self, who: Identity, *faults: str) -> tuple[str, Proposal, str]:
        order, proposal, token = self.confirmed(who, *faults)
        with pytest.raises(errors.OutcomeUnknown):
            self.executor().execute(who, token)
        return order, proposal, token

    def row(self, sql: str, *params: Any) -> dict[str, Any]:
        with self.pool.connection() as conn:
            row = conn.execute(sql, params).fetchone()
        assert row is not None
        return dict(row)

    def execution(self, proposal: Proposal) -> dict[str, Any]:
        return self.row(EXECUTION_SQL, proposal.proposal_id)

    def audit(self, proposal: Proposal) -> list[tuple[str, str, str | None]]:
        with self.pool.connection() as conn:
            rows = conn.execute(AUDIT_SQL, (proposal.proposal_id,)).fetchall()
        return [(r["event"], r["status"], r["action"]) for r in rows]

    def mine(self, settled: list[Settled], proposal: Proposal) -> list[tuple[str, str]]:
        return [(s.action, s.status) for s in settled if s.request_key == proposal.request_key]


@pytest.fixture
def ops(ops_pool: Pool) -> Ops:
    faults = FaultScript()
    provider = SimulatedProvider(pool=ops_pool, faults=faults)
    service = ApprovalService(PgLedgerStore(ops_pool), default_registry(provider))
    return Ops(ops_pool, faults, service)


def user() -> Identity:
    return Identity(new_id("user"), new_id("tenant"))


def test_applied_but_answer_lost_is_found_and_recorded_with_its_reference(ops: Ops):
    who = user()
    _, proposal, _ = ops.unknown(who, "timeout_after*3")
    settled = ops.reconciler().drain()
    assert ops.mine(settled, proposal) == [("found", "succeeded")]
    row = ops.execution(proposal)
    at_provider = ops.service.tools.get("refund_order").lookup_downstream({}, proposal.request_key)
    assert at_provider is not None and row["provider_ref"] == at_provider.provider_ref
    assert row["reconciled_at"] is not None
    assert ops.audit(proposal)[-2:] == [
        ("reconcile", "running", "claimed"),
        ("reconcile", "succeeded", "found"),
    ]
    receipt = receipt_for(ops.service.store, who, proposal.proposal_id)
    assert receipt.provider_ref == at_provider.provider_ref
    by_id = receipt_for(ops.service.store, who, execution_id=row["execution_id"])
    assert by_id == receipt
    with pytest.raises(errors.NotFound):  # a stranger sees nothing
        receipt_for(ops.service.store, Identity("someone", who.tenant_id), proposal.proposal_id)


def test_never_applied_is_sent_again_with_the_same_key(ops: Ops):
    who = user()
    order, proposal, _ = ops.unknown(who, "timeout_before*3")
    assert ops.faults.calls[("refund", proposal.request_key)] == 3
    assert ops.mine(ops.reconciler().drain(), proposal) == [("retried", "succeeded")]
    assert ops.faults.calls[("refund", proposal.request_key)] == 4
    assert ops.service.tools.get("refund_order").lookup_downstream({}, proposal.request_key)
    assert ops.row(ORDER_SQL, order)["refunded_minor"] == 19900


def test_failed_retryable_is_looked_up_before_it_is_resumed(ops: Ops):
    who = user()
    _, proposal, token = ops.confirmed(who, "503*3")
    with pytest.raises(errors.TemporarilyUnavailable):
        ops.executor().execute(who, token)
    assert ops.execution(proposal)["status"] == "failed_retryable"
    assert ops.mine(ops.reconciler().drain(), proposal) == [("retried", "succeeded")]
    assert ops.faults.calls[("lookup", proposal.request_key)] == 1


def test_a_decline_on_the_retry_fails_for_good_and_releases_the_reservation(ops: Ops):
    who = user()
    order, proposal, _ = ops.unknown(who, "timeout_before*3,decline")
    assert ops.mine(ops.reconciler().drain(), proposal) == [("retried", "failed_terminal")]
    assert ops.faults.calls[("refund", proposal.request_key)] == 4  # the decline: no retry
    assert ops.row(ORDER_SQL, order)["refunded_minor"] == 0
    with pytest.raises(errors.ExecutionFailed):
        receipt_for(ops.service.store, who, proposal.proposal_id)


def test_failing_lookups_back_off_then_escalate_to_a_person(ops: Ops, db: str):
    who = user()
    order, proposal, _ = ops.unknown(who, "timeout_after*3")
    ops.faults.add(f"lookup:{order}=unavailable*")
    assert ops.mine(ops.reconciler(backoff=60).drain(), proposal) == [("deferred", "unknown")]
    assert ops.mine(ops.reconciler(backoff=60).drain(), proposal) == []  # not due yet
    with ops.pool.connection() as conn:  # as if the backoff had passed
        conn.execute(DUE_NOW_SQL, (proposal.proposal_id,))
    assert ops.mine(ops.reconciler(max_checks=2).drain(), proposal) == [("escalated", "escalated")]
    assert ops.execution(proposal)["escalation"]["reason"] == "still_ambiguous"

    app = typer.Typer()
    cli_ops.register(app)
    args = ["escalations", "--json", "--tenant", who.tenant_id]
    result = CliRunner().invoke(app, args, env={"DATABASE_URL": db})
    assert result.exit_code == 0, result.output
    (listed,) = json.loads(result.output)
    assert listed["request_key"] == proposal.request_key and listed["args"]["order_id"] == order
    actions = [(h["result"] or {}).get("action") for h in listed["history"]]
    assert actions[-1] == "escalated" and "deferred:lookup_failed" in actions
    with pytest.raises(errors.OutcomeUnknown):  # the model is still told the truth
        receipt_for(ops.service.store, who, proposal.proposal_id)


class ReconcilerDied(Exception):
    """Stands in for a reconciler SIGKILLed right after its claim."""


def test_claims_whose_reconciler_died_are_not_counted_as_checks(ops: Ops):
    # Four reconcilers die after claiming, before any lookup; then the provider is away
    # for one lookup. That is one ambiguous check, not five: it waits the first backoff,
    # it is not escalated to a person (found by the kill soak).
    who = user()
    order, proposal, _ = ops.unknown(who, "timeout_after*3")

    def die(step: str) -> None:
        if step == "claimed":
            raise ReconcilerDied

    for n in range(4):
        with pytest.raises(ReconcilerDied):
            ops.reconciler(lease=timedelta(milliseconds=50), step_hook=die).run_once(limit=1)
        wait_until(lambda: _lease_expired(ops, proposal), f"claim {n + 1}'s lease to expire")
    ops.faults.add(f"lookup:{order}=unavailable")
    settled = ops.reconciler(backoff=60, max_checks=2).drain()
    assert ops.mine(settled, proposal) == [("deferred", "unknown")]
    row = ops.row(
        "SELECT checks, next_check_at - updated_at AS wait FROM writegate.executions "
        "WHERE proposal_id = %s",
        proposal.proposal_id,
    )
    assert (row["checks"], row["wait"]) == (1, timedelta(seconds=60))


def test_the_reconcile_command_takes_the_first_backoff(ops: Ops, db: str):
    who = user()
    _, proposal, _ = ops.unknown(who, "timeout_after*3")
    app = console_app()  # the demo's database: the composed command serves the demo's tools
    nobody = f"http://127.0.0.1:{free_port()}"  # the lookup finds no provider
    args = ["reconcile", "--backoff", "7", "--provider-url", nobody, "--json"]
    result = CliRunner().invoke(app, args, env={"DATABASE_URL": db})
    assert result.exit_code == 0, result.output
    mine = [s for s in json.loads(result.output) if s["request_key"] == proposal.request_key]
    assert [(s["action"], s["status"]) for s in mine] == [("deferred", "unknown")]
    row = ops.row(
        "SELECT next_check_at - updated_at AS wait FROM writegate.executions "
        "WHERE proposal_id = %s",
        proposal.proposal_id,
    )
    assert row["wait"] == timedelta(seconds=7)


def test_a_provider_record_that_disagrees_is_escalated(ops: Ops):
    who = user()
    order, proposal, _ = ops.unknown(who, "timeout_before*3")
    with ops.pool.connection() as conn:
        conn.execute(
            "INSERT INTO provider.refunds VALUES (%s, %s, %s, 1, 'CNY', 'other')",
            (proposal.request_key, new_id("re"), order),
        )
    assert ops.mine(ops.reconciler().drain(), proposal) == [("escalated", "escalated")]
    assert ops.execution(proposal)["escalation"]["reason"] == "provider_mismatch"


def test_a_key_older_than_the_provider_keeps_keys_is_escalated_not_resent(ops: Ops):
    who = user()
    _, proposal, _ = ops.unknown(who, "timeout_before*3")
    settled = ops.reconciler(key_retention=timedelta(0)).drain()
    assert ops.mine(settled, proposal) == [("escalated", "escalated")]
    assert ops.faults.calls[("refund", proposal.request_key)] == 3


def test_a_live_lease_is_not_taken_over(ops: Ops):
    who = user()
    _, proposal, token = ops.confirmed(who)
    seen: list[list[Settled]] = []
    executor = ops.executor(step_hook=lambda s: seen.append(ops.reconciler().drain()))
    assert executor.execute(who, token).status == "succeeded"
    assert all(ops.mine(batch, proposal) == [] for batch in seen)


def test_a_worker_whose_lease_was_taken_over_writes_nothing(ops: Ops):
    who = user()
    order, proposal, token = ops.confirmed(who)
    short = RetryPolicy(base_delay=0.0, call_timeout=0.4, lease=timedelta(milliseconds=500))
    taken: list[Settled] = []

    def stall_then_get_reconciled(step: str) -> None:
        if step == "claimed":
            wait_until(lambda: _lease_expired(ops, proposal), "the lease to expire")
            taken.extend(ops.reconciler().drain())

    receipt = ops.executor(retry=short, step_hook=stall_then_get_reconciled).execute(who, token)
    assert ops.mine(taken, proposal) == [("retried", "succeeded")]
    assert (
        receipt.status == "succeeded"
        and receipt.provider_ref == ops.execution(proposal)["provider_ref"]
    )
    assert ops.faults.calls[("refund", proposal.request_key)] == 2  # same key: one effect
    assert [a for a in ops.audit(proposal) if a[0] == "execute"] == []  # the stale write lost
    assert ops.row(ORDER_SQL, order)["refunded_minor"] == 19900


def test_a_stale_worker_cannot_overwrite_a_reconciler_in_flight(ops: Ops):
    """The old worker wakes up while the reconciler holds the execution: the lease-owner
    guard refuses its write, the reconciler's answer stands."""
    who = user()
    _, proposal, token = ops.confirmed(who)
    may_record, stale_said = threading.Event(), []

    def stall(step: str) -> None:
        if step == "downstream_returned":  # applied at the provider, not yet recorded
            may_record.wait(10)

    def run_stale_worker() -> None:
        short = RetryPolicy(base_delay=0.0, call_timeout=0.4, lease=timedelta(milliseconds=500))
        try:
            ops.executor(retry=short, step_hook=stall).execute(who, token)
        except errors.WritegateError as exc:
            stale_said.append(exc.code)

    def let_the_stale_worker_record(step: str) -> None:
        if step == "looked_up":  # the reconciler holds the lease now
            may_record.set()
            worker.join(10)

    worker = threading.Thread(target=run_stale_worker)
    worker.start()
    wait_until(lambda: _lease_expired(ops, proposal), "the worker's lease to expire")
    settled = ops.reconciler(step_hook=let_the_stale_worker_record).drain()
    worker.join(10)
    assert stale_said == ["in_progress"]  # it reported what was there, wrote nothing
    assert ops.mine(settled, proposal) == [("found", "succeeded")]
    assert [a for a in ops.audit(proposal) if a[0] == "execute"] == []


def test_a_reconciler_whose_lease_was_taken_over_writes_nothing(ops: Ops):
    who = user()
    _, proposal, _ = ops.unknown(who, "timeout_before*3")
    second: list[Settled] = []

    def overtaken(step: str) -> None:
        if step == "looked_up":
            wait_until(lambda: _lease_expired(ops, proposal), "the first lease to expire")
            second.extend(ops.reconciler().drain())

    first = ops.reconciler(lease=timedelta(milliseconds=50), step_hook=overtaken).drain()
    assert ops.mine(second, proposal) == [("retried", "succeeded")]
    assert [(s.action, s.status) for s in first] == [("lost_lease", "?")]
    settles = [a for a in ops.audit(proposal) if a[2] in ("retried", "found")]
    assert settles == [("reconcile", "succeeded", "retried")]


def test_reconcile_processes_share_one_backlog_without_overlap(ops: Ops, db: str):
    tenant = new_id("tenant")
    ops.faults.add(f"{tenant}=timeout_after*")
    proposals = [ops.unknown(Identity(new_id("user"), tenant))[1] for _ in range(12)]
    keys = {p.request_key for p in proposals}
    cmd = [
        sys.executable,
        "-m",
        "writegate",
        "reconcile",
        "--workers",
        "3",
        "--batch",
        "2",
        "--json",
    ]
    env = {**os.environ, "DATABASE_URL": db}
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    reports = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    settled = [s for report in reports for s in report if s["request_key"] in keys]
    assert sorted(s["request_key"] for s in settled) == sorted(keys)  # each exactly once
    assert {(s["action"], s["status"]) for s in settled} == {("found", "succeeded")}
    for proposal in proposals:
        claims = [a for a in ops.audit(proposal) if a[2] == "claimed"]
        assert len(claims) == 1
        assert ops.faults.calls[("refund", proposal.request_key)] == 3  # none re-sent


def test_retention_purges_finished_rows_keeps_open_ones_and_leaves_tombstones(ops: Ops):
    who = user()
    _, done, token = ops.confirmed(who)
    assert ops.executor().execute(who, token).status == "succeeded"
    _, open_one, _ = ops.unknown(who, "timeout_after*3")
    declined = ops.propose(who, make_order(ops.pool, who.tenant_id, who.user_id))
    ops.service.decide(who, Decline(action="decline", proposal_id=declined.proposal_id))
    edited_from = ops.propose(who, make_order(ops.pool, who.tenant_id, who.user_id))
    smaller = {**edited_from.args, "amount_minor": 100}
    edited = ops.service.decide(
        who, Edit(action="edit", proposal_id=edited_from.proposal_id, args=smaller)
    )
    assert isinstance(edited, Proposal)
    confirmation = ops.service.decide(
        who, Confirm(action="confirm", proposal_id=edited.proposal_id)
    )
    assert isinstance(confirmation, Confirmation)
    ops.executor().execute(who, confirmation.token)
    aged = {"tenant": who.tenant_id, "keep": [edited_from.proposal_id]}
    with ops.pool.connection() as conn:
        conn.execute(AGE_EXECUTIONS_SQL, aged)
        conn.execute(AGE_PROPOSALS_SQL, aged)

    report = purge(ops.pool, RetentionPolicy(days=30))
    assert report.executions >= 2 and report.proposals >= 1
    with ops.pool.connection() as conn:
        stones = conn.execute(
            "SELECT proposal_id, final_status FROM writegate.tombstones WHERE tenant_id = %s",
            (who.tenant_id,),
        ).fetchall()
        kept = conn.execute(
            "SELECT proposal_id, superseded_by FROM writegate.proposals WHERE tenant_id = %s",
            (who.tenant_id,),
        ).fetchall()
    assert {(s["proposal_id"], s["final_status"]) for s in stones} == {
        (done.proposal_id, "succeeded"),
        (declined.proposal_id, "declined"),
        (edited.proposal_id, "succeeded"),
    }
    assert {k["proposal_id"]: k["superseded_by"] for k in kept} == {
        open_one.proposal_id: None,  # unknown: never purged
        edited_from.proposal_id: None,  # kept, its link to the purged successor dropped
    }
    with pytest.raises(RecordExpired):  # the late retry, and every one after it
        ops.executor().execute(who, token)
    with pytest.raises(RecordExpired):
        ops.executor().execute(who, token)


def test_stats_and_metrics_count_from_the_ledger(ops: Ops, db: str):
    before = ledger_stats(ops.pool)["totals"]
    who = user()
    _, proposal, token = ops.confirmed(who)
    ops.executor().execute(who, token)
    with pytest.raises(errors.AlreadyConsumed):  # a double click: a duplicate request
        ops.executor().execute(who, token)
    with pytest.raises(errors.IdempotencyConflict):  # same call id, other arguments
        ops.service.propose(
            who,
            thread_id=proposal.thread_id,
            tool_call_id=proposal.tool_call_id,
            tool_name="refund_order",
            raw_args={**proposal.args, "amount_minor": 1},
        )
    ops.unknown(who, "timeout_after*3")
    after = ledger_stats(ops.pool)
    totals = after["totals"]
    assert totals["duplicates"] == before["duplicates"] + 1
    assert totals["fingerprint_conflicts"] == before["fingerprint_conflicts"] + 1
    assert totals["unknown_outcomes"] == before["unknown_outcomes"] + 1
    assert after["backlog"]["size"] >= 1 and after["backlog"]["oldest_age_s"] > 0

    families = {f.name: f for f in text_string_to_metric_families(prometheus_text(ops.pool))}
    assert set(METRICS) <= set(families)
    dup = families["writegate_duplicate_requests"].samples
    assert sum(s.value for s in dup) == totals["duplicates"]

    app = typer.Typer()
    cli_ops.register(app)
    env = {"DATABASE_URL": db}
    shown = CliRunner().invoke(app, ["stats", "--json"], env=env)
    assert shown.exit_code == 0 and json.loads(shown.output)["totals"] == totals
    scraped = CliRunner().invoke(app, ["stats", "--prometheus"], env=env)
    assert scraped.exit_code == 0 and "writegate_backlog_size " in scraped.output
    purged = CliRunner().invoke(app, ["purge"], env={**env, "WRITEGATE_RETENTION_DAYS": "3650"})
    assert purged.exit_code == 0 and "purged 0 execution(s)" in purged.output


def _lease_expired(ops: Ops, proposal: Proposal) -> bool:
    """True once the execution exists and its lease ran out on the database clock."""
    with ops.pool.connection() as conn:
        row = conn.execute(LEASE_EXPIRED_SQL, (proposal.proposal_id,)).fetchone()
    return bool(row and row["expired"])
