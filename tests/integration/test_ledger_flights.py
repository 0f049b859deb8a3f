"""A ledger transaction sent in flights (checkpoints/ledger.py): writes nobody waits for
are held and sent with the next statement that is waited for, the BEGIN with the first,
the COMMIT with the last. These tests hold it to plain one-by-one statements' meaning:
all or nothing, in order, domain code inside the transaction, and a guarded write sent
ahead of its answer failing the whole transaction when its guard fails."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest

from tests.integration.ledger_helpers import ALICE, new_order, propose_refund
from writegate.approval.audit import call_audit
from writegate.approval.canonical import hash_secret
from writegate.approval.decisions import Confirm
from writegate.approval.errors import AlreadyConsumed, InvalidTransition, NotFound, RecordExpired
from writegate.approval.models import AuditRecord, Identity, ProposalStatus
from writegate.approval.service import Confirmation
from writegate.checkpoints.ledger import PgLedgerStore, PgLedgerTx
from writegate.checkpoints.migrate import setup_database
from writegate.graph.runtime import Runtime

AWAITING, EXECUTED = ProposalStatus.AWAITING, ProposalStatus.EXECUTED
BOB = Identity("user_7", ALICE.tenant_id)


@pytest.fixture(scope="module")
def rt(create_database: Callable[[], str]) -> Iterator[Runtime]:
    url = create_database()
    setup_database(url)
    runtime = Runtime.open(url, max_connections=4)
    yield runtime
    runtime.close()


def audit_count(rt: Runtime, thread_id: str) -> int:
    with rt.pool.connection() as conn:
        row = conn.execute("SELECT count(*) AS n FROM wg_audit WHERE thread_id = %s", (thread_id,))
        return int(row.fetchone()["n"])  # type: ignore[index]


def status_of(rt: Runtime, proposal_id: str) -> str:
    with rt.pool.connection() as conn:
        row = conn.execute("SELECT status FROM wg_proposals WHERE proposal_id = %s", (proposal_id,))
        return str(row.fetchone()["status"])  # type: ignore[index]


def audit(thread_id: str) -> AuditRecord:
    return call_audit(ALICE, thread_id, "get_order", "read", {}, "succeeded", 0.0)


def test_held_writes_commit_with_the_transaction(rt: Runtime) -> None:
    store = PgLedgerStore(rt.pool)
    with store.transaction() as tx:
        tx.insert_audit(audit("flights-commit"))
        tx.insert_audit(audit("flights-commit"))
        assert audit_count(rt, "flights-commit") == 0  # not committed yet, whatever was sent
    assert audit_count(rt, "flights-commit") == 2


def test_an_error_after_held_writes_commits_none_of_them(rt: Runtime) -> None:
    store = PgLedgerStore(rt.pool)
    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.insert_audit(audit("flights-error"))
        tx.now()  # a statement waited for: the audit row has gone out by now
        tx.insert_audit(audit("flights-error"))
        raise RuntimeError("the caller failed")
    assert audit_count(rt, "flights-error") == 0
    with rt.pool.connection() as conn:  # and the connection went back clean
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_domain_code_given_the_connection_runs_inside_the_transaction(rt: Runtime) -> None:
    order_id = new_order(rt)
    store = PgLedgerStore(rt.pool)
    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.insert_audit(audit("flights-domain"))
        conn = tx.conn  # sends the BEGIN and the held row first
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        seen = conn.execute("SELECT count(*) AS n FROM wg_audit WHERE thread_id = 'flights-domain'")
        assert seen.fetchone()["n"] == 1  # type: ignore[index]
        conn.execute("UPDATE orders SET version = version + 100 WHERE order_id = %s", (order_id,))
        raise RuntimeError("the tool failed")
    with rt.pool.connection() as conn:
        row = conn.execute("SELECT version FROM orders WHERE order_id = %s", (order_id,))
        assert row.fetchone()["version"] < 100  # type: ignore[index]
    assert audit_count(rt, "flights-domain") == 0


def test_a_guarded_write_sent_ahead_fails_the_transaction_when_its_guard_fails(
    rt: Runtime,
) -> None:
    proposal = propose_refund(rt, new_order(rt), thread="flights-guard")
    store = PgLedgerStore(rt.pool)
    before = audit_count(rt, "flights-guard")
    with pytest.raises(InvalidTransition) as refused, store.transaction() as tx:
        tx.insert_audit(audit("flights-guard"))
        # the proposal is awaiting, not executed: this move's guard does not hold
        tx.expect_transition_proposal(proposal.proposal_id, EXECUTED, AWAITING)
    assert refused.value.to_dict()["code"] == "invalid_transition"
    assert status_of(rt, proposal.proposal_id) == "awaiting_confirmation"
    assert audit_count(rt, "flights-guard") == before  # nothing of it committed


def test_a_commit_that_fails_is_rolled_back_before_the_connection_goes_back(
    create_database: Callable[[], str], caplog: pytest.LogCaptureFixture
) -> None:
    """The failing guarded write was the last one held: it fails in the COMMIT's flight.
    The connection goes back clean, with no rollback left to the pool's reset."""
    url = create_database()
    setup_database(url)
    with Runtime.open(url, setup=False, max_connections=1) as one:
        proposal = propose_refund(one, new_order(one), thread="flights-commit-fails")
        seen: list[object] = []
        with pytest.raises(InvalidTransition), one.store.transaction() as tx:
            seen.append(tx.conn)  # the pool's one connection
            tx.expect_transition_proposal(proposal.proposal_id, EXECUTED, AWAITING)
        conn = seen[0]
        assert isinstance(conn, psycopg.Connection)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    # the pool found nothing to roll back itself (it warns when it has to)
    assert not [r for r in caplog.records if "rolling back" in r.getMessage()]


def test_a_guarded_write_sent_ahead_commits_when_its_guard_holds(rt: Runtime) -> None:
    proposal = propose_refund(rt, new_order(rt), thread="flights-guard-ok")
    store = PgLedgerStore(rt.pool)
    with store.transaction() as tx:
        tx.expect_transition_proposal(
            proposal.proposal_id, AWAITING, ProposalStatus.CONFIRMED, decided_by=ALICE.user_id
        )
    assert status_of(rt, proposal.proposal_id) == "confirmed"


def test_a_lookup_reads_outside_any_transaction(rt: Runtime) -> None:
    """`reading()` sends its reads on their own: no BEGIN before them, no COMMIT after,
    and they see what is committed, with the database clock."""
    proposal = propose_refund(rt, new_order(rt), thread="flights-reading")
    store = PgLedgerStore(rt.pool)
    with store.reading() as reads:
        found = reads.get_proposal(proposal.proposal_id)
        assert reads.get_execution(proposal_id=proposal.proposal_id) is None
        clock = reads.now()
        assert reads.conn.info.transaction_status is psycopg.pq.TransactionStatus.IDLE
    assert found == proposal
    assert proposal.created_at <= clock < proposal.expires_at
    assert rt.service.get_proposal(ALICE, proposal.proposal_id) == proposal


def test_a_proposal_and_its_execution_are_read_in_one_round_trip(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an HTTP click answers from: the proposal and the execution it made, read
    in one flight, before it ran (none) and after (the one execution)."""
    proposal = propose_refund(rt, new_order(rt), thread="flights-both")
    pid = proposal.proposal_id
    flights: list[int] = []
    send = PgLedgerTx._send

    def counted(tx: PgLedgerTx, *queries: tuple[str, object]) -> object:
        flights.append(len(queries))
        return send(tx, *queries)

    monkeypatch.setattr(PgLedgerTx, "_send", counted)
    assert rt.service.proposal_and_execution(ALICE, pid) == (proposal, None)
    assert flights == [2]
    decision = Confirm(action="confirm", proposal_id=pid)
    receipt = rt.executor.confirm_and_execute(ALICE, decision, "refund_order")
    assert receipt is not None
    flights.clear()
    found, execution = rt.service.proposal_and_execution(ALICE, pid)
    assert flights == [2]
    assert found.status is EXECUTED
    assert execution is not None and execution.execution_id == receipt.execution_id
    with pytest.raises(NotFound):
        rt.service.proposal_and_execution(BOB, pid)


def test_a_second_confirm_whose_token_is_gone_is_refused_and_changes_nothing(
    rt: Runtime,
) -> None:
    """A confirm of a confirmed proposal replaces its token with a write sent with the
    COMMIT. Should the token no longer be issued (revoked here behind the proposal's
    back), the write's guard fails the transaction: the answer is `already_consumed`,
    as when the write was waited for, and the token row is untouched."""
    proposal = propose_refund(rt, new_order(rt), thread="flights-reconfirm")
    pid = proposal.proposal_id
    first = rt.service.decide(ALICE, Confirm(action="confirm", proposal_id=pid))
    assert isinstance(first, Confirmation)
    again = rt.service.decide(ALICE, Confirm(action="confirm", proposal_id=pid))
    assert isinstance(again, Confirmation) and again.token != first.token
    with rt.pool.connection() as conn:
        conn.execute(TOKEN_STATUS_SQL, ("revoked", pid))
    with pytest.raises(AlreadyConsumed):
        rt.service.decide(ALICE, Confirm(action="confirm", proposal_id=pid))
    with rt.pool.connection() as conn:
        row = conn.execute(TOKEN_ROW_SQL, (pid,)).fetchone()
    assert row == {"token_hash": hash_secret(again.token), "status": "revoked"}
    assert status_of(rt, pid) == "confirmed"


TOKEN_STATUS_SQL = "UPDATE wg_tokens SET status = %s WHERE proposal_id = %s"
TOKEN_ROW_SQL = "SELECT token_hash, status FROM wg_tokens WHERE proposal_id = %s"


COUNT_UPDATES_SQL = """
CREATE TABLE IF NOT EXISTS test_row_updates (table_name text, proposal_id text);
CREATE OR REPLACE FUNCTION test_count_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO test_row_updates VALUES (TG_TABLE_NAME, NEW.proposal_id);
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER test_proposal_updates AFTER UPDATE ON wg_proposals
    FOR EACH ROW EXECUTE FUNCTION test_count_update();
CREATE OR REPLACE TRIGGER test_token_updates AFTER UPDATE ON wg_tokens
    FOR EACH ROW EXECUTE FUNCTION test_count_update();
"""


def test_the_one_transaction_confirm_writes_the_proposal_and_token_rows_once(
    rt: Runtime,
) -> None:
    """Under the runtime's own wiring (its tombstone check included), the confirm taken
    server-side moves the proposal row once (awaiting -> executed) and inserts its token
    already consumed: no second version of either row."""
    with psycopg.connect(rt.url, autocommit=True) as conn:
        conn.execute(COUNT_UPDATES_SQL, prepare=False)
    proposal = propose_refund(rt, new_order(rt), amount=100)
    decision = Confirm(action="confirm", proposal_id=proposal.proposal_id)
    receipt = rt.executor.confirm_and_execute(ALICE, decision, "refund_order")
    assert receipt is not None and receipt.status == "succeeded"
    with rt.pool.connection() as conn:
        rows = conn.execute(
            "SELECT table_name, count(*) AS n FROM test_row_updates WHERE proposal_id = %s"
            " GROUP BY table_name",
            (proposal.proposal_id,),
        ).fetchall()
    assert {row["table_name"]: row["n"] for row in rows} == {"wg_proposals": 1}
    assert status_of(rt, proposal.proposal_id) == "executed"


TOMBSTONE_SQL = """
INSERT INTO wg_tombstones (request_key, token_hash, proposal_id, thread_id, tool_call_id,
    tenant_id, subject, operation, fingerprint, execution_id, final_status, provider_ref,
    completed_at, purged_at)
VALUES (%(request_key)s, NULL, %(proposal_id)s, %(thread_id)s, %(tool_call_id)s,
    %(tenant_id)s, %(subject)s, %(operation)s, %(fingerprint)s, 'exec_purged', 'succeeded',
    're_purged', now(), now())"""


def test_a_proposal_restored_past_its_purge_never_runs_in_one_transaction(rt: Runtime) -> None:
    """A proposal row brought back (a restored backup) whose request was executed and
    purged: its tombstone fails the one-transaction confirm at its held check, nothing of
    that transaction commits, and the two-step path refuses with the tombstone's answer."""
    proposal = propose_refund(rt, new_order(rt), amount=400)
    with rt.pool.connection() as conn:
        conn.execute(TOMBSTONE_SQL, proposal.__dict__)
    decision = Confirm(action="confirm", proposal_id=proposal.proposal_id)
    assert rt.executor.confirm_and_execute(ALICE, decision, "refund_order") is None
    assert status_of(rt, proposal.proposal_id) == ProposalStatus.AWAITING.value
    assert audit_count(rt, proposal.thread_id) == 1  # the propose row alone
    confirmation = rt.service.decide(ALICE, decision)
    with pytest.raises(RecordExpired):
        rt.executor.execute(ALICE, confirmation.token)  # type: ignore[union-attr]
    with rt.pool.connection() as conn:
        row = conn.execute(
            "SELECT count(*) AS n FROM wg_executions WHERE request_key = %s",
            (proposal.request_key,),
        ).fetchone()
        assert row is not None and row["n"] == 0
    assert rt.provider.count_refunds(proposal.resource.split(":", 1)[1]) == 0  # type: ignore[attr-defined]
