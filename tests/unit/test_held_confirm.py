"""The one-transaction confirm and execute writes the proposal row once: the decision's
awaiting -> confirmed is held and written with the claim's confirmed -> executed, and any
other call writes it first (approval/held_confirm.py)."""

from __future__ import annotations

from datetime import UTC, datetime
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

    def insert_token(self, token: Token) -> None:
        self.calls.append(("insert_token", token.token_hash))

    def get_token(self, token_hash: str, *, for_update: bool = False) -> Token | None:
        self.calls.append(("get_token", token_hash))
        return None

    def consume_token(self, token_hash: str, execution_id: str) -> bool:
        self.calls.append(("consume_token", token_hash))
        return True

    def get_proposal(self, proposal_id: str, *, for_update: bool = False) -> None:
        self.calls.append(("get_proposal", proposal_id))


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
    assert db.calls == [("transition", "p1", AWAITING, EXECUTED, "alice")]
    tx.flush()
    assert len(db.calls) == 1


def test_any_other_call_writes_the_held_decision_first() -> None:
    db, tx = held()
    tx.transition_proposal("p1", AWAITING, CONFIRMED, decided_by="alice")
    tx.get_proposal("p1", for_update=True)
    assert db.calls == [
        ("transition", "p1", AWAITING, CONFIRMED, "alice"),
        ("get_proposal", "p1"),
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


def test_the_token_just_inserted_is_read_from_memory_until_it_is_consumed() -> None:
    db, tx = held()
    issued = token()
    tx.insert_token(issued)
    assert tx.get_token("h1") is issued
    assert db.calls == [("insert_token", "h1")]
    tx.consume_token("h1", "exec_1")
    assert tx.get_token("h1") is None  # from the database now
    assert db.calls[-2:] == [("consume_token", "h1"), ("get_token", "h1")]


def test_a_locking_read_of_the_token_goes_to_the_database() -> None:
    db, tx = held()
    tx.insert_token(token())
    tx.get_token("h1", for_update=True)
    assert db.calls[-1] == ("get_token", "h1")
