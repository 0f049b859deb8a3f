"""The ledger on PostgreSQL, statement by statement (checkpoints/ledger.py): every call is
one statement, sent when it is made, so an error surfaces from the call that caused it
and nothing of its transaction commits; a tool's code runs inside the transaction; the
confirm's claim writes each row once; rows made whole elsewhere (`load`, the bench's
seed) read back as they were loaded."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import psycopg
import pytest

from tests.app_db import setup_app
from tests.integration.ledger_helpers import ALICE, new_order, propose_refund
from writegate.approval.audit import call_audit
from writegate.approval.decisions import Confirm
from writegate.approval.errors import InvalidTransition, RecordExpired
from writegate.approval.execution import execution_of
from writegate.approval.models import (
    AuditRecord,
    Execution,
    ExecutionStatus,
    Proposal,
    ProposalStatus,
    Receipt,
    Token,
)
from writegate.approval.store import Claim, Locked
from writegate.demo.provider import SimulatedProvider
from writegate.demo.runtime import open_demo
from writegate.runtime.wiring import Runtime


@pytest.fixture(scope="module")
def rt(create_database: Callable[[], str]) -> Iterator[Runtime]:
    url = create_database()
    setup_app(url)
    runtime = open_demo(url, max_connections=4).runtime
    yield runtime
    runtime.close()


def scalar(rt: Runtime, query: str, *params: object) -> object:
    with rt.pool.connection() as conn:
        row = conn.execute(query, params).fetchone()
    assert row is not None
    return next(iter(row.values()))


def status_of(rt: Runtime, proposal_id: str) -> str:
    query = "SELECT status FROM writegate.proposals WHERE proposal_id = %s"
    return str(scalar(rt, query, proposal_id))


def audit_count(rt: Runtime, thread_id: str) -> int:
    query = "SELECT count(*) FROM writegate.audit WHERE thread_id = %s"
    return int(scalar(rt, query, thread_id))  # type: ignore[call-overload]


def audit(thread_id: str) -> AuditRecord:
    return call_audit(ALICE, thread_id, "get_order", "read", {}, "succeeded", 0.0)


def test_a_guard_that_fails_raises_from_the_call_that_made_it_and_nothing_commits(
    rt: Runtime,
) -> None:
    """A claim of a proposal that is no longer awaiting fails at `tx.claim(...)`, naming
    its guard; the audit row written before it in the same transaction is rolled back."""
    proposal = propose_refund(rt, new_order(rt), thread="statements-guard")
    with rt.store.transaction() as tx:
        locked = tx.lock_proposal(proposal.proposal_id)
        assert locked.proposal is not None
        token = rt.service.new_token(tx, proposal, "wgt_never_shown")
    written = audit_count(rt, proposal.thread_id)
    refused = pytest.raises(InvalidTransition, match="no longer confirmed")
    with refused, rt.store.transaction() as tx:
        tx.insert_audit(audit(proposal.thread_id))
        tx.claim(
            Claim(
                proposal_id=proposal.proposal_id,
                from_status=ProposalStatus.CONFIRMED,  # it is awaiting: the guard fails
                decided_by=None,
                token=token,
                issue=True,
                execution=execution_of(proposal, token, tx.now(), status=ExecutionStatus.RUNNING),
                audit=(),
            )
        )
    assert audit_count(rt, proposal.thread_id) == written
    assert status_of(rt, proposal.proposal_id) == ProposalStatus.AWAITING.value


def test_a_tools_code_given_the_connection_runs_inside_the_transaction(
    rt: Runtime,
) -> None:
    with pytest.raises(RuntimeError, match="after the audit row"), rt.store.transaction() as tx:
        tx.insert_audit(audit("statements-domain"))
        seen = tx.conn.execute(
            "SELECT count(*) AS n FROM writegate.audit WHERE thread_id = %s",
            ("statements-domain",),
        ).fetchone()
        assert seen is not None and seen["n"] == 1  # the ledger's write, already made
        raise RuntimeError("the tool fails after the audit row")
    assert audit_count(rt, "statements-domain") == 0


def test_a_lookup_reads_outside_any_transaction(rt: Runtime) -> None:
    proposal = propose_refund(rt, new_order(rt), thread="statements-lookup")
    with rt.store.reading() as reads:
        assert reads.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        found = reads.get_proposal(proposal.proposal_id)
        assert found == proposal
        assert reads.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


WAITING_ON_A_LOCK_SQL = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'"""


def wait_until_one_waits_on_a_lock(rt: Runtime, deadline_s: float = 10.0) -> None:
    end = time.monotonic() + deadline_s
    while scalar(rt, WAITING_ON_A_LOCK_SQL) != 1:
        assert time.monotonic() < end, "no session came to wait on the proposal's lock"


def test_a_lock_reads_what_the_locks_last_holder_committed(rt: Runtime) -> None:
    """`lock_proposal` is one statement that waits for the lock, then reads the token
    and the execution: it sees the token the previous holder wrote and committed while
    it waited, not the snapshot of the moment it asked."""
    proposal = propose_refund(rt, new_order(rt), thread="statements-lock")
    seen: list[Locked] = []
    with rt.store.transaction() as holder:
        assert holder.lock_proposal(proposal.proposal_id).token is None
        holder.insert_token(rt.service.new_token(holder, proposal, "wgt_while_waiting"))

        def second() -> None:
            with rt.store.transaction() as tx:
                seen.append(tx.lock_proposal(proposal.proposal_id))

        waiter = threading.Thread(target=second)
        waiter.start()
        wait_until_one_waits_on_a_lock(rt)
    waiter.join(timeout=10)
    assert len(seen) == 1 and seen[0].proposal == proposal
    assert seen[0].token is not None and seen[0].token.proposal_id == proposal.proposal_id
    assert seen[0].execution is None and not seen[0].purged


def test_an_outcome_is_audited_by_its_own_statement_only_if_its_guard_held(
    rt: Runtime,
) -> None:
    """The transition of an execution carries its audit row: written with the change,
    and not at all when the guard (status, lease owner) no longer held."""
    proposal = propose_refund(rt, new_order(rt), thread="statements-record")
    receipt = rt.executor.confirm(
        ALICE, Confirm(action="confirm", proposal_id=proposal.proposal_id), "refund_order"
    )
    assert isinstance(receipt, Receipt) and receipt.status == "succeeded"
    written = audit_count(rt, proposal.thread_id)
    with rt.store.transaction() as tx:
        execution = tx.get_execution(proposal_id=proposal.proposal_id)
        assert execution is not None
        lost = tx.transition_execution(  # it succeeded: no longer running
            execution.execution_id,
            (ExecutionStatus.RUNNING,),
            ExecutionStatus.UNKNOWN,
            audit=audit(proposal.thread_id),
        )
        assert lost is None
    assert audit_count(rt, proposal.thread_id) == written
    with rt.store.transaction() as tx:
        won = tx.transition_execution(
            execution.execution_id,
            (ExecutionStatus.SUCCEEDED,),
            ExecutionStatus.SUCCEEDED,
            audit=audit(proposal.thread_id),
        )
        assert won is not None and won.status is ExecutionStatus.SUCCEEDED
    assert audit_count(rt, proposal.thread_id) == written + 1


COUNT_WRITES_SQL = """
CREATE TABLE IF NOT EXISTS test_row_writes (table_name text, op text, proposal_id text);
CREATE OR REPLACE FUNCTION test_count_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO test_row_writes VALUES (TG_TABLE_NAME, TG_OP, NEW.proposal_id);
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER test_proposal_writes AFTER INSERT OR UPDATE ON writegate.proposals
    FOR EACH ROW EXECUTE FUNCTION test_count_write();
CREATE OR REPLACE TRIGGER test_token_writes AFTER INSERT OR UPDATE ON writegate.tokens
    FOR EACH ROW EXECUTE FUNCTION test_count_write();
CREATE OR REPLACE TRIGGER test_execution_writes AFTER INSERT OR UPDATE ON writegate.executions
    FOR EACH ROW EXECUTE FUNCTION test_count_write();
"""


def test_the_confirm_moves_its_proposal_once_and_writes_its_token_once(
    rt: Runtime,
) -> None:
    """Taken server-side, the confirm and its claim move the proposal row once (awaiting
    -> executed) and insert its token already consumed: no second version of either."""
    with psycopg.connect(rt.url, autocommit=True) as conn:
        conn.execute(COUNT_WRITES_SQL, prepare=False)
    proposal = propose_refund(rt, new_order(rt), amount=100)
    decision = Confirm(action="confirm", proposal_id=proposal.proposal_id)
    receipt = rt.executor.confirm(ALICE, decision, "refund_order")
    assert isinstance(receipt, Receipt) and receipt.status == "succeeded"
    with rt.pool.connection() as conn:
        rows = conn.execute(
            "SELECT table_name || ':' || op AS w, count(*) AS n FROM test_row_writes"
            " WHERE proposal_id = %s GROUP BY 1",
            (proposal.proposal_id,),
        ).fetchall()
    # the execution: claimed (insert), then its outcome recorded (one update)
    assert {r["w"]: r["n"] for r in rows} == {
        "proposals:INSERT": 1,
        "proposals:UPDATE": 1,
        "tokens:INSERT": 1,
        "executions:INSERT": 1,
        "executions:UPDATE": 1,
    }
    assert status_of(rt, proposal.proposal_id) == "executed"


TOMBSTONE_SQL = """
INSERT INTO writegate.tombstones (request_key, token_hash, proposal_id, thread_id,
    tool_call_id, tenant_id, subject, operation, fingerprint, execution_id, final_status,
    provider_ref, completed_at, purged_at)
VALUES (%(request_key)s, NULL, %(proposal_id)s, %(thread_id)s, %(tool_call_id)s,
    %(tenant_id)s, %(subject)s, %(operation)s, %(fingerprint)s, 'exec_purged', 'succeeded',
    're_purged', now(), now())"""


def test_a_proposal_restored_past_its_purge_never_runs(rt: Runtime) -> None:
    """A proposal row brought back (a restored backup) whose request was executed and
    purged: its tombstone refuses the confirm with its own answer, nothing of the
    confirm's transaction commits, and the provider is never called."""
    proposal = propose_refund(rt, new_order(rt), amount=400)
    with rt.pool.connection() as conn:
        conn.execute(TOMBSTONE_SQL, proposal.__dict__)
    decision = Confirm(action="confirm", proposal_id=proposal.proposal_id)
    with pytest.raises(RecordExpired):
        rt.executor.confirm(ALICE, decision, "refund_order")
    assert status_of(rt, proposal.proposal_id) == ProposalStatus.AWAITING.value
    query = "SELECT count(*) FROM writegate.executions WHERE request_key = %s"
    assert scalar(rt, query, proposal.request_key) == 0
    assert SimulatedProvider(pool=rt.pool).count_refunds(proposal.resource.split(":", 1)[1]) == 0
    assert audit_count(rt, proposal.thread_id) == 1  # the propose row; the refusal's has none


# -- many rows at once (PgLedgerTx.load: the bench's seed and backlog) ----------------

LOAD_CONSUMED_AT_SQL = "SELECT consumed_at FROM writegate.tokens WHERE token_hash = %s"
LOAD_COUNT_SQL = "SELECT count(*) AS n FROM writegate.proposals WHERE proposal_id = %s"


def executed(rt: Runtime) -> tuple[Proposal, Token, Execution]:
    """An executed refund's rows, as the store reads them."""
    proposal = propose_refund(rt, new_order(rt), amount=100)
    decision = Confirm(action="confirm", proposal_id=proposal.proposal_id)
    receipt = rt.executor.confirm(ALICE, decision, "refund_order")
    assert isinstance(receipt, Receipt) and receipt.status == "succeeded"
    return read(rt, proposal.proposal_id)


def read(rt: Runtime, proposal_id: str) -> tuple[Proposal, Token, Execution]:
    with rt.store.reading() as tx:
        proposal = tx.get_proposal(proposal_id)
        token = tx.get_token_for_proposal(proposal_id)
        execution = tx.get_execution(proposal_id=proposal_id)
    assert proposal is not None and token is not None and execution is not None
    return proposal, token, execution


def copy_of(rows: tuple[Proposal, Token, Execution]) -> tuple[Proposal, Token, Execution]:
    """The same rows under fresh keys."""
    proposal, token, execution = rows
    tag = secrets.token_hex(6)
    proposal_id, execution_id, token_hash = f"prop_l{tag}", f"exe_l{tag}", f"hash_l{tag}"
    key = f"{proposal.request_key}:{tag}"
    return (
        replace(proposal, proposal_id=proposal_id, thread_id=f"thr_l{tag}", request_key=key),
        replace(
            token,
            token_hash=token_hash,
            proposal_id=proposal_id,
            execution_id=execution_id,
        ),
        replace(
            execution,
            execution_id=execution_id,
            request_key=key,
            token_hash=token_hash,
            proposal_id=proposal_id,
        ),
    )


def test_loaded_rows_read_back_as_they_were_loaded(rt: Runtime) -> None:
    copies = [copy_of(executed(rt)) for _ in range(3)]
    with rt.store.transaction() as tx:
        tx.load([p for p, _, _ in copies], [t for _, t, _ in copies], [e for _, _, e in copies])
    for loaded in copies:
        assert read(rt, loaded[0].proposal_id) == loaded
        with rt.pool.connection() as conn:
            row = conn.execute(LOAD_CONSUMED_AT_SQL, (loaded[1].token_hash,)).fetchone()
        assert row is not None and row["consumed_at"] == loaded[2].created_at


def test_a_consumed_token_without_its_execution_is_refused_and_nothing_is_written(
    rt: Runtime,
) -> None:
    proposal, token, _ = copy_of(executed(rt))
    refused = pytest.raises(ValueError, match="is consumed: load its execution with it")
    with refused, rt.store.transaction() as tx:
        tx.load([proposal], [token])
    with rt.pool.connection() as conn:
        row = conn.execute(LOAD_COUNT_SQL, (proposal.proposal_id,)).fetchone()
    assert row is not None and row["n"] == 0
