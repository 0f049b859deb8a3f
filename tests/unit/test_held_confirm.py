"""The one-transaction confirm and execute writes the proposal row once: the decision's
awaiting -> confirmed is held and written with the claim's confirmed -> executed, and any
other call writes it first (approval/held_confirm.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from writegate.approval.held_confirm import HeldConfirmTx
from writegate.approval.models import ProposalStatus, Token, TokenStatus

AWAITING, CONFIRMED, EXECUTED = (
    ProposalStatus.AWAITING,
    ProposalStatus.CONFIRMED,
    ProposalStatus.EXECUTED,
)
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class RecordingTx:
    """The calls of a LedgerTx that reach the database, in order."""

    conn = None

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def transition_proposal(self, pid: str, *move: ProposalStatus, **by: str | None) -> bool:
        self.calls.append(("transition", pid, *move, by.get("decided_by")))
        return True

    def expect_transition_proposal(self, pid: str, *move: ProposalStatus, **by: str) -> None:
        self.calls.append(("expect_transition", pid, *move, by.get("decided_by")))

    def expect_insert_execution(self, execution: Any) -> None:
        self.calls.append(("expect_insert_execution", execution.request_key))

    def insert_token(self, token: Token) -> None:
        self.calls.append(("insert_token", token.token_hash, token.status, token.execution_id))

    def get_token(self, token_hash: str, *, for_update: bool = False) -> Token | None:
        self.calls.append(("get_token", token_hash))
        return None

    def consume_token(self, token_hash: str, execution_id: str) -> bool:
        self.calls.append(("consume_token", token_hash))
        return True

    def get_proposal(self, proposal_id: str, *, for_update: bool = False) -> None:
        self.calls.append(("get_proposal", proposal_id))

    def lock_proposal(self, proposal_id: str) -> tuple[Any, None]:
        self.calls.append(("lock_proposal", proposal_id))
        return SimpleNamespace(request_key="k"), None

    def get_execution(self, **where: str) -> None:
        self.calls.append(("get_execution", *where.values()))

    def insert_execution(self, execution: Any) -> bool:
        self.calls.append(("insert_execution", execution.request_key))
        return True


def token(token_hash: str = "h1") -> Token:
    return Token(
        token_hash=token_hash, proposal_id="p1", subject="alice", tenant_id="t",
        audience="writegate", operation="refund_order", resource="order:o1",
        args_digest="d", policy_version="v1", request_key="k", issued_at=NOW,
        expires_at=NOW, status=TokenStatus.ISSUED,
    )  # fmt: skip


def held() -> tuple[RecordingTx, HeldConfirmTx]:
    db = RecordingTx()
    return db, HeldConfirmTx(db)  # type: ignore[arg-type]


def test_the_decision_and_the_claim_move_the_proposal_in_one_write_with_the_decider() -> None:
    db, tx = held()
    assert tx.transition_proposal("p1", AWAITING, CONFIRMED, decided_by="alice")
    assert db.calls == []
    assert tx.transition_proposal("p1", CONFIRMED, EXECUTED)
    assert db.calls == [("expect_transition", "p1", AWAITING, EXECUTED, "alice")]
    tx.flush()
    assert len(db.calls) == 1


def test_any_other_call_writes_the_held_decision_first() -> None:
    db, tx = held()
    tx.transition_proposal("p1", AWAITING, CONFIRMED, decided_by="alice")
    tx.get_proposal("p1", for_update=True)
    assert db.calls == [
        ("transition", "p1", AWAITING, CONFIRMED, "alice"),
        ("lock_proposal", "p1"),
    ]


def test_the_locking_read_answers_the_execution_check_of_its_key_until_a_claim() -> None:
    db, tx = held()
    tx.get_proposal("p1", for_update=True)
    assert tx.get_execution(request_key="k") is None
    assert db.calls == [("lock_proposal", "p1")]
    tx.get_execution(request_key="other")
    tx.get_execution(execution_id="e1")
    # read absent under the lock: the claim is sent ahead, checked by the server
    assert tx.insert_execution(SimpleNamespace(request_key="k"))
    tx.get_execution(request_key="k")  # claimed now: the database answers
    tx.insert_execution(SimpleNamespace(request_key="other"))  # not read under the lock
    assert db.calls[1:] == [
        ("get_execution", "other"),
        ("get_execution", "e1"),
        ("expect_insert_execution", "k"),
        ("get_execution", "k"),
        ("insert_execution", "other"),
    ]


def test_a_held_decision_is_written_at_flush_and_another_transition_is_passed_on() -> None:
    db, tx = held()
    tx.transition_proposal("p1", AWAITING, CONFIRMED, decided_by="alice")
    tx.flush()
    tx.transition_proposal("p1", CONFIRMED, EXECUTED)
    assert db.calls == [
        ("transition", "p1", AWAITING, CONFIRMED, "alice"),
        ("transition", "p1", CONFIRMED, EXECUTED, None),
    ]


def test_the_token_just_inserted_is_read_from_memory_and_written_once_consumed() -> None:
    db, tx = held()
    issued = token()
    tx.insert_token(issued)
    assert tx.get_token("h1") is issued
    assert db.calls == []
    assert tx.consume_token("h1", "exec_1")
    assert db.calls == [("insert_token", "h1", TokenStatus.CONSUMED, "exec_1")]
    assert tx.get_token("h1") is None  # from the database now
    assert db.calls[-1] == ("get_token", "h1")
    tx.flush()
    assert len(db.calls) == 2  # written once


def test_a_token_not_consumed_is_written_as_issued_at_flush() -> None:
    db, tx = held()
    tx.insert_token(token())
    tx.flush()
    assert db.calls == [("insert_token", "h1", TokenStatus.ISSUED, None)]
    tx.flush()
    assert len(db.calls) == 1


def test_a_token_already_written_is_consumed_by_the_database() -> None:
    db, tx = held()
    tx.insert_token(token())
    tx.flush()
    assert tx.consume_token("h1", "exec_1")
    assert db.calls[-1] == ("consume_token", "h1")


def test_a_locking_read_of_the_token_writes_it_first() -> None:
    db, tx = held()
    tx.insert_token(token())
    tx.get_token("h1", for_update=True)
    assert db.calls == [("insert_token", "h1", TokenStatus.ISSUED, None), ("get_token", "h1")]
