"""The last approval finishes the write, exactly once, even when the approver's process
is killed (SIGKILL, a real child process) around the approval.

The refund goes to the provider process (`writegate provider serve`), which counts
every call by request key: the downstream the test owns. Killed after the approval
committed (its execution claimed with it) and before the call, the reconciler looks
the key up and sends it once. Killed inside the approval's transaction, nothing of it
committed: the approval can be given again, and it runs once.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest

from tests.app_db import setup_app
from tests.demo_registry import default_registry
from tests.integration.fault_scripts.harness import (
    TALLY,
    ProviderProcess,
    fault_tally,  # noqa: F401  (the session's figures, printed in the summary)
    ledger_check,
    make_order,
    new_id,
    run_child,
    wait_until,
)
from writegate.approval.decisions import Confirm
from writegate.approval.execution import Executor, RetryPolicy
from writegate.approval.models import Identity, Proposal, ProposalStatus
from writegate.approval.reconcile import ReconcilePolicy, Reconciler
from writegate.approval.service import ApprovalService
from writegate.checkpoints.ledger import PgLedgerStore
from writegate.checkpoints.ops import PgBacklog
from writegate.checkpoints.pool import Pool, open_pool

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fault_tally")]

AMOUNT = 600_000  # ¥6,000.00: the shipped policy's second-approver tier
FAST_RETRY = RetryPolicy(base_delay=0.01, call_timeout=2.0, lease=timedelta(seconds=5))
EXECUTION_SQL = "SELECT status FROM writegate.executions WHERE proposal_id = %s"


@pytest.fixture(scope="module")
def db(create_database: Callable[[], str]) -> str:
    url = create_database()
    setup_app(url)
    return url


@pytest.fixture(scope="module")
def pool(db: str) -> Iterator[Pool]:
    opened = open_pool(db)
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def provider(db: str) -> Iterator[ProviderProcess]:
    process = ProviderProcess(db).start()
    yield process
    process.stop()


def service(pool: Pool, provider: ProviderProcess) -> ApprovalService:
    return ApprovalService(PgLedgerStore(pool), default_registry(provider.client(timeout=0.5)))


def awaiting_second(pool: Pool, provider: ProviderProcess) -> tuple[Identity, Proposal]:
    """A requester's refund, confirmed with its amount re-typed, waiting for an approver."""
    who = Identity(new_id("user"), new_id("tenant"))
    order = make_order(pool, who.tenant_id, who.user_id, AMOUNT)
    svc = service(pool, provider)
    proposal = svc.propose(
        who,
        thread_id=new_id("thread"),
        tool_call_id=new_id("call"),
        tool_name="refund_order",
        raw_args={"order_id": order, "amount_minor": AMOUNT, "currency": "CNY", "reason": "x"},
    )
    waiting = svc.decide(
        who, Confirm(action="confirm", proposal_id=proposal.proposal_id, retyped="¥6,000.00")
    )
    assert isinstance(waiting, Proposal) and waiting.status is ProposalStatus.AWAITING_SECOND
    return who, proposal


def approve_in_child(
    db: str, provider: ProviderProcess, who: Identity, proposal: Proposal, kill_at: str
) -> None:
    job = {
        "mode": "second_approve",
        "db": db,
        "provider": provider.url,
        "user": who.user_id,
        "tenant": who.tenant_id,
        "approver": "lead_" + who.user_id,
        "proposal_id": proposal.proposal_id,
        "kill_at": kill_at,
    }
    code, _ = run_child(job)
    assert code == -signal.SIGKILL, f"the approver's process was not killed (exit {code})"
    TALLY.kills += 1


def status_of(pool: Pool, proposal: Proposal) -> tuple[str, str | None]:
    with pool.connection() as conn:
        row = conn.execute(EXECUTION_SQL, (proposal.proposal_id,)).fetchone()
        state = conn.execute(
            "SELECT status FROM writegate.proposals WHERE proposal_id = %s",
            (proposal.proposal_id,),
        ).fetchone()
    assert state is not None
    return str(state["status"]), (str(row["status"]) if row else None)


def test_killed_after_the_approval_committed_the_reconciler_runs_it_once(
    db: str, pool: Pool, provider: ProviderProcess
) -> None:
    who, proposal = awaiting_second(pool, provider)
    approve_in_child(db, provider, who, proposal, "claimed")
    # The approval is durable, and so is the claim it made: executed, not yet called.
    assert status_of(pool, proposal) == ("executed", "running")
    assert provider.client().calls()["refund"].get(proposal.request_key, 0) == 0

    reconciler = Reconciler(
        service(pool, provider),
        PgBacklog(pool),
        policy=ReconcilePolicy(lease=timedelta(seconds=5)),
        retry=FAST_RETRY,
    )

    def settled() -> bool:
        reconciler.drain()
        return status_of(pool, proposal)[1] == "succeeded"

    wait_until(settled, "the reconciler to finish the approved write")  # once the lease ends
    calls = provider.client().calls()
    assert calls["lookup"][proposal.request_key] == 1  # looked up before it was sent
    assert calls["refund"][proposal.request_key] == 1  # sent once, with the proposal's key
    assert ledger_check(pool, who.tenant_id) == {
        "approved": 1,
        "effects": 1,
        "duplicates": 0,
        "lost": 0,
        "open": 0,
    }


def test_killed_inside_the_approval_nothing_committed_and_approving_again_runs_it_once(
    db: str, pool: Pool, provider: ProviderProcess
) -> None:
    who, proposal = awaiting_second(pool, provider)
    approve_in_child(db, provider, who, proposal, "approved")
    assert status_of(pool, proposal) == ("awaiting_second_approval", None)  # rolled back

    lead = Identity("lead_" + who.user_id, who.tenant_id, frozenset({"approver"}))
    approved = Executor(service(pool, provider), retry=FAST_RETRY).approve_as_second(
        lead, proposal.proposal_id
    )
    assert approved.outcome_body()["status"] == "succeeded"
    assert provider.client().calls()["refund"][proposal.request_key] == 1
    assert ledger_check(pool, who.tenant_id)["duplicates"] == 0
    assert status_of(pool, proposal) == ("executed", "succeeded")
