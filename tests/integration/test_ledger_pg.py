"""The protocol on a real PostgreSQL: exactly once, replays, stale state, audit."""

from __future__ import annotations

import secrets
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from tests.app_db import setup_app
from tests.integration.ledger_helpers import (
    ALICE,
    confirm,
    ledger_count,
    new_order,
    order_state,
    propose_refund,
    refund_args,
)
from writegate.approval import errors
from writegate.approval.canonical import digest
from writegate.approval.decisions import Confirm, Edit
from writegate.approval.execution import Executor
from writegate.approval.models import Identity, Receipt
from writegate.approval.service import ApprovalService, Policy
from writegate.approval.store import CallLookup
from writegate.checkpoints.ledger import PgLedgerStore, PgLedgerTx
from writegate.demo.provider import SimulatedProvider
from writegate.demo.runtime import open_demo
from writegate.runtime.wiring import Runtime

WORKERS = 16
ROUNDS = 15


class PinnedClock:
    """The server clock, pinned when a test needs an exact instant."""

    def __init__(self) -> None:
        self.at = None

    def __call__(self):
        assert self.at is not None
        return self.at


@pytest.fixture(scope="module")
def ledger_db(create_database: Callable[[], str]) -> str:
    """A database of this module's own: its orders must not show up in others' lists."""
    url = create_database()
    setup_app(url)
    return url


@pytest.fixture(scope="module")
def rt(ledger_db: str) -> Iterator[Runtime]:
    runtime = open_demo(ledger_db, max_connections=WORKERS + 4).runtime
    yield runtime
    runtime.close()


def server_now(rt: Runtime):
    with rt.pool.connection() as conn:
        row = conn.execute("SELECT now() AS now").fetchone()
    assert row is not None
    return row["now"]


def provider_refunds(rt: Runtime, order_id: str) -> int:
    return SimulatedProvider(pool=rt.pool).count_refunds(order_id)


def race(rt: Runtime, token: str) -> tuple[Counter[str], set[str]]:
    """WORKERS threads, each with its own connection and lease owner, execute one token."""
    barrier = threading.Barrier(WORKERS)
    outcomes: list[str] = []
    receipts: set[str] = set()

    def worker() -> None:
        executor = Executor(rt.service)
        barrier.wait()
        try:
            receipts.add(executor.execute(ALICE, token).execution_id)
            outcomes.append("executed")
        except errors.AlreadyConsumed as exc:
            first = exc.details.get("receipt")
            if first:
                receipts.add(first["execution_id"])
            outcomes.append("already_consumed")
        except errors.InProgress:
            outcomes.append("in_progress")

    threads = [threading.Thread(target=worker) for _ in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return Counter(outcomes), receipts


def test_sixteen_workers_race_one_token_and_exactly_one_refund_happens(rt):
    for _ in range(ROUNDS):
        order_id = new_order(rt)
        counts, receipts = race(rt, confirm(rt, propose_refund(rt, order_id)).token)
        assert counts["executed"] == 1 and sum(counts.values()) == WORKERS, counts
        assert len(receipts) == 1
        assert provider_refunds(rt, order_id) == 1 and ledger_count(rt, order_id) == 1
        assert order_state(rt, order_id)["refunded_minor"] == 19900


def _refused_without_effect(
    rt: Runtime, order_id: str, error: type[errors.WritegateError], call
) -> None:
    before = order_state(rt, order_id)
    with pytest.raises(error):
        call()
    assert order_state(rt, order_id) == before
    assert provider_refunds(rt, order_id) == 0 and ledger_count(rt, order_id) == 0


def test_replay_matrix_each_refused_with_its_own_code_and_nothing_written(rt):
    order_id = new_order(rt)
    proposal = propose_refund(rt, order_id, amount=5000)
    token = confirm(rt, proposal).token
    other_order = new_order(rt)
    other = confirm(rt, propose_refund(rt, other_order, amount=100))
    cases = [
        (
            errors.SubjectMismatch,
            lambda: rt.executor.execute(Identity("user_7", "tenant_hz"), token),
        ),
        (
            errors.TenantMismatch,
            lambda: rt.executor.execute(Identity("user_42", "tenant_sh"), token),
        ),
        (
            errors.OperationMismatch,
            lambda: rt.executor.execute(ALICE, token, operation="update_ticket"),
        ),
        # the token of this proposal presented for another proposal's (other) arguments
        (
            errors.ArgsMismatch,
            lambda: rt.executor.execute(ALICE, token, proposal_id=other.proposal.proposal_id),
        ),
        (errors.TokenUnknown, lambda: rt.executor.execute(ALICE, "wgt_forged")),
        (
            errors.AudienceMismatch,
            lambda: Executor(
                ApprovalService(rt.store, rt.registry, Policy(audience="billing"))
            ).execute(ALICE, token),
        ),
        (
            errors.PolicyChanged,
            lambda: Executor(ApprovalService(rt.store, rt.registry, Policy(version="v2"))).execute(
                ALICE, token
            ),
        ),
    ]
    for error, call in cases:
        _refused_without_effect(rt, order_id, error, call)
    # finally the rightful use succeeds, and a replay of it is already_consumed
    assert rt.executor.execute(ALICE, token).status == "succeeded"
    with pytest.raises(errors.AlreadyConsumed):
        rt.executor.execute(ALICE, token)
    assert provider_refunds(rt, order_id) == 1


REFUSALS_SQL = """
SELECT status, error_code FROM writegate.audit
WHERE tenant_id = %s AND event = 'execute' AND status IN ('refused', 'duplicate')
ORDER BY audit_id"""


def refusals(rt: Runtime, who: Identity) -> list[tuple[str, str]]:
    with rt.pool.connection() as conn:
        rows = conn.execute(REFUSALS_SQL, (who.tenant_id,)).fetchall()
    return [(row["status"], row["error_code"]) for row in rows]


def test_each_refused_unknown_token_leaves_one_audit_row_with_its_code(rt):
    who = Identity("user_42", "tenant_" + secrets.token_hex(4))
    order_id = new_order(rt, owner=who)
    proposal = propose_refund(rt, order_id, who=who)
    first = confirm(rt, proposal, who).token
    second = confirm(rt, proposal, who).token
    with pytest.raises(errors.TokenUnknown):
        rt.executor.execute(who, "wgt_forged")
    with pytest.raises(errors.TokenReplaced):
        rt.executor.execute(who, first, proposal_id=proposal.proposal_id)
    assert rt.executor.execute(who, second, proposal_id=proposal.proposal_id).status == "succeeded"
    with pytest.raises(errors.AlreadyConsumed):  # replaced, and the one run is done
        rt.executor.execute(who, first, proposal_id=proposal.proposal_id)
    assert refusals(rt, who) == [
        ("refused", "token_unknown"),
        ("refused", "token_replaced"),
        ("duplicate", "already_consumed"),
    ]
    assert provider_refunds(rt, order_id) == 1 and ledger_count(rt, order_id) == 1


def test_token_is_expired_at_exactly_its_expiry_on_the_server_clock(rt, ledger_db):
    clock = PinnedClock()
    pinned = open_demo(ledger_db, setup=False, clock=clock).runtime
    try:
        order_id = new_order(pinned)
        clock.at = server_now(pinned)
        confirmation = confirm(pinned, propose_refund(pinned, order_id))
        clock.at = confirmation.expires_at  # now == expires_at: already expired
        _refused_without_effect(
            pinned,
            order_id,
            errors.TokenExpired,
            lambda: pinned.executor.execute(ALICE, confirmation.token),
        )
        clock.at = confirmation.expires_at - timedelta(microseconds=1)
        assert pinned.executor.execute(ALICE, confirmation.token).status == "succeeded"
    finally:
        pinned.close()


def test_proposal_is_expired_at_exactly_its_expiry(rt, ledger_db):
    clock = PinnedClock()
    pinned = open_demo(ledger_db, setup=False, clock=clock).runtime
    try:
        order_id = new_order(pinned)
        clock.at = server_now(pinned)
        proposal = propose_refund(pinned, order_id)
        clock.at = proposal.expires_at
        with pytest.raises(errors.ProposalExpired):
            confirm(pinned, proposal)
        assert pinned.service.get_proposal(ALICE, proposal.proposal_id).status.value == "expired"
    finally:
        pinned.close()


def test_token_of_a_superseded_proposal_is_refused(rt):
    order_id = new_order(rt)
    proposal = propose_refund(rt, order_id)
    token = confirm(rt, proposal).token
    edited = rt.service.decide(
        ALICE,
        Edit(action="edit", proposal_id=proposal.proposal_id, args=refund_args(order_id, 5000)),
    )
    assert edited.args["amount_minor"] == 5000
    _refused_without_effect(
        rt, order_id, errors.ProposalSuperseded, lambda: rt.executor.execute(ALICE, token)
    )


def test_state_changed_between_confirm_and_execute_writes_nothing(rt):
    order_id = new_order(rt)
    token = confirm(rt, propose_refund(rt, order_id, amount=15000)).token
    # another channel refunds 100 meanwhile: the version moves on
    other = confirm(rt, propose_refund(rt, order_id, amount=100))
    assert rt.executor.execute(ALICE, other.token).status == "succeeded"
    before = order_state(rt, order_id)
    with pytest.raises(errors.StateChanged):
        rt.executor.execute(ALICE, token)
    assert order_state(rt, order_id) == before and provider_refunds(rt, order_id) == 1


ROWS_SQL = """
SELECT p.status, p.decided_by, p.decided_at, t.status AS token_status, t.issued_at,
       t.consumed_at, t.execution_id = e.execution_id AS token_names_execution,
       e.status AS execution_status
FROM writegate.proposals p JOIN writegate.tokens t USING (proposal_id)
    JOIN writegate.executions e USING (proposal_id)
WHERE p.proposal_id = %s"""


def ledger_rows(rt: Runtime, proposal_id: str) -> dict[str, object]:
    with rt.pool.connection() as conn:
        row = conn.execute(ROWS_SQL, (proposal_id,)).fetchone()
    assert row is not None
    return dict(row)


def test_the_one_transaction_confirm_leaves_the_rows_the_two_step_confirm_leaves(rt):
    together = propose_refund(rt, new_order(rt), amount=100)
    decision = Confirm(action="confirm", proposal_id=together.proposal_id)
    receipt = rt.executor.confirm(ALICE, decision, "refund_order")
    assert isinstance(receipt, Receipt) and receipt.status == "succeeded"
    apart = propose_refund(rt, new_order(rt), amount=100)
    assert rt.executor.execute(ALICE, confirm(rt, apart).token).status == "succeeded"

    one, two = ledger_rows(rt, together.proposal_id), ledger_rows(rt, apart.proposal_id)
    moments = ("decided_at", "issued_at", "consumed_at")
    assert {k: v for k, v in one.items() if k not in moments} == {
        k: v for k, v in two.items() if k not in moments
    }
    assert one["status"] == "executed" and one["decided_by"] == ALICE.user_id
    assert one["token_status"] == "consumed" and one["token_names_execution"]
    # One transaction, one clock: decided, issued and consumed at the same instant.
    assert one["decided_at"] == one["issued_at"] == one["consumed_at"] is not None


COPIES_SQL = """
SELECT (t.subject, t.tenant_id, t.operation, t.resource, t.args_digest, t.digest_scheme,
        t.request_key, t.tier)
     = (p.subject, p.tenant_id, p.operation, p.resource, p.args_digest, p.digest_scheme,
        p.request_key, p.tier) AS token_copies,
       (e.tenant_id, e.subject, e.operation, e.resource, e.args, e.args_digest,
        e.digest_scheme, e.fingerprint)
     = (p.tenant_id, p.subject, p.operation, p.resource, p.args, p.args_digest,
        p.digest_scheme, p.fingerprint) AS execution_copies
FROM writegate.proposals p JOIN writegate.tokens t USING (proposal_id)
    JOIN writegate.executions e USING (proposal_id)
WHERE p.proposal_id = %s"""


def test_the_columns_kept_for_the_previous_release_say_what_the_proposal_says(rt):
    """A token and an execution refer to their proposal; their old copied columns,
    which a 0.2.0 process still reads, are filled from it by the database."""
    together = propose_refund(rt, new_order(rt), amount=100)
    decision = Confirm(action="confirm", proposal_id=together.proposal_id)
    assert isinstance(rt.executor.confirm(ALICE, decision, "refund_order"), Receipt)
    apart = propose_refund(rt, new_order(rt), amount=100)
    assert rt.executor.execute(ALICE, confirm(rt, apart).token).status == "succeeded"
    with rt.pool.connection() as conn:
        for proposal in (together, apart):
            row = conn.execute(COPIES_SQL, (proposal.proposal_id,)).fetchone()
            assert row == {"token_copies": True, "execution_copies": True}


def test_same_request_key_with_different_arguments_is_a_conflict(rt):
    order_id = new_order(rt)
    thread = "th_conflict"
    first = rt.service.propose(
        ALICE,
        thread_id=thread,
        tool_call_id="call_1",
        tool_name="refund_order",
        raw_args=refund_args(order_id, 100),
    )
    with pytest.raises(errors.IdempotencyConflict):
        rt.service.propose(
            ALICE,
            thread_id=thread,
            tool_call_id="call_1",
            tool_name="refund_order",
            raw_args=refund_args(order_id, 200),
        )
    # at the ledger: a second request with the same request key but other arguments. A
    # token carries no key of its own (it refers to its proposal), and a proposal's key
    # is one request's: the database refuses to give it to another.
    token = confirm(rt, first).token
    rt.executor.execute(ALICE, token)
    second = confirm(rt, propose_refund(rt, order_id, amount=300))
    with rt.pool.connection() as conn, pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute(
            "UPDATE writegate.proposals SET request_key = %s WHERE proposal_id = %s",
            (first.request_key, second.proposal.proposal_id),
        )
    assert provider_refunds(rt, order_id) == 1


def test_reads_and_writes_leave_audit_rows_with_equal_digests(rt):
    order_id = new_order(rt)
    thread = "th_audit"
    rt.service.read(ALICE, "get_order", {"order_id": order_id}, thread_id=thread)
    proposal = propose_refund(rt, order_id, thread=thread)
    receipt = rt.executor.execute(ALICE, confirm(rt, proposal).token)
    rows = list(rt.store.audit_rows("tenant_hz", thread_id=thread))
    assert [r["event"] for r in rows] == ["read", "propose", "decide", "execute"]
    done = rows[-1]
    assert done["status"] == "succeeded" and done["request_key"] == receipt.request_key
    assert done["requested_digest"] == done["approved_digest"] == done["executed_digest"]
    assert done["approver"] == "user_42" and done["proposal_id"] == proposal.proposal_id
    assert rows[0]["tool_name"] == "get_order" and rows[0]["status"] == "succeeded"
    with rt.pool.connection() as conn:
        refund = conn.execute(
            "SELECT status, provider_ref FROM refunds WHERE request_key = %s",
            (receipt.request_key,),
        ).fetchone()
    assert refund == {"status": "succeeded", "provider_ref": receipt.provider_ref}


def test_a_token_replaced_by_a_second_confirm_answers_with_the_one_run(rt):
    order_id = new_order(rt)
    proposal = propose_refund(rt, order_id)
    first = confirm(rt, proposal).token
    second = confirm(rt, proposal).token  # the same person confirms again: one approval
    with pytest.raises(errors.TokenReplaced):  # the newer confirmation carries the run
        rt.executor.execute(ALICE, first, proposal_id=proposal.proposal_id)
    receipt = rt.executor.execute(ALICE, second, proposal_id=proposal.proposal_id)
    with pytest.raises(errors.AlreadyConsumed) as late:
        rt.executor.execute(ALICE, first, proposal_id=proposal.proposal_id)
    assert late.value.details["receipt"]["execution_id"] == receipt.execution_id
    with pytest.raises(errors.TokenUnknown):  # a stranger learns nothing
        rt.executor.execute(
            Identity("user_7", "tenant_hz"), first, proposal_id=proposal.proposal_id
        )
    assert provider_refunds(rt, order_id) == 1


def test_every_audit_row_hashes_the_arguments_it_holds(rt):
    """The audit's arguments hash is the digest of that row's own arguments, for the
    proposal, the decision and the execution, on both the token and the one-transaction
    confirm (a hash carried over from the proposal must still be the row's own)."""
    token_way = propose_refund(rt, new_order(rt), amount=700)
    Executor(rt.service).execute(ALICE, confirm(rt, token_way).token)
    one_way = propose_refund(rt, new_order(rt), amount=800)
    decision = Confirm(action="confirm", proposal_id=one_way.proposal_id)
    assert rt.executor.confirm(ALICE, decision, "refund_order") is not None
    for proposal in (token_way, one_way):
        rows = list(rt.store.audit_rows(ALICE.tenant_id, proposal_id=proposal.proposal_id))
        assert [r["event"] for r in rows] == ["propose", "decide", "execute"]
        for row in rows:
            assert row["arguments"] == proposal.args
            assert row["arguments_hash"] == digest(row["arguments"]) == proposal.args_digest


def test_propose_answers_exactly_the_proposal_it_stored(rt):
    """What propose hands back (and the question is built from) is the stored row, field
    for field: no value the database would store differently (a tuple, a naive time)."""
    proposal = propose_refund(rt, new_order(rt), amount=900)
    assert rt.service.get_proposal(ALICE, proposal.proposal_id) == proposal


class _FirstLookupMisses(PgLedgerStore):
    """A store whose first lookup saw no proposal for the call: a twin inserted it between
    that read and the insert."""

    @contextmanager
    def statements(self) -> Iterator[PgLedgerTx]:
        with super().statements() as tx:
            reads = tx.look_up_call

            def first_misses(*args: Any, **where: Any) -> CallLookup:
                tx.look_up_call = reads  # type: ignore[method-assign]
                return CallLookup(None)

            tx.look_up_call = first_misses  # type: ignore[method-assign]
            yield tx


def test_a_twin_that_inserted_first_is_the_answer_and_nothing_else_is_written(rt):
    """The proposal and its audit row are one statement; when a twin took the call
    meanwhile, it writes nothing (no second audit row, the connection back idle) and
    propose answers the twin's proposal."""
    first = propose_refund(rt, new_order(rt), amount=600, thread="th_twin")
    late = ApprovalService(_FirstLookupMisses(rt.pool), rt.registry, rt.service.policy)
    again = late.propose(
        ALICE,
        thread_id=first.thread_id,
        tool_call_id=first.tool_call_id,
        tool_name="refund_order",
        raw_args=first.args,
    )
    assert again == first
    rows = list(rt.store.audit_rows(ALICE.tenant_id, proposal_id=first.proposal_id))
    assert [r["event"] for r in rows] == ["propose"]
    with rt.pool.connection() as conn:
        count = conn.execute(
            "SELECT count(*) AS n FROM writegate.proposals WHERE thread_id = %s", (first.thread_id,)
        ).fetchone()
        assert count is not None and count["n"] == 1
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
