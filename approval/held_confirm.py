"""The one-transaction confirm and execute, with the confirm's proposal write held back.

`Executor.confirm_and_execute` decides and claims in one transaction. Run as is, that
writes the proposal row twice (awaiting -> confirmed by the decision, confirmed ->
executed by the claim), leaving a dead copy of the whole row with its arguments and
preview, and reads back the token it has just inserted. Through `HeldConfirmTx` the
decision's move is held and written together with the claim's, as one guarded
awaiting -> executed update that records the decider and the decision time exactly
as the two would; the token just inserted is answered from memory, and held too: the
claim that consumes it writes it once, already consumed by its execution, instead of
an insert and an update (a dead copy of the token row, and a round trip).

Nobody can tell the difference: the proposal row is locked by this transaction from
the decision's first read (FOR UPDATE) until the commit, and the token row is this
transaction's own, invisible to others until then. Any other call writes what is
held first, so every other read sees the rows the plain path would have written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from writegate.approval.errors import guard_gone
from writegate.approval.models import (
    AuditRecord,
    Execution,
    Proposal,
    ProposalStatus,
    Token,
    TokenStatus,
)
from writegate.approval.store import LedgerTx

AWAITING, CONFIRMED, EXECUTED = (
    ProposalStatus.AWAITING,
    ProposalStatus.CONFIRMED,
    ProposalStatus.EXECUTED,
)


class HeldConfirmTx:
    """A LedgerTx over `tx` that holds the decision's awaiting -> confirmed write."""

    def __init__(self, tx: LedgerTx) -> None:
        self.tx = tx
        self.held: tuple[str, str] | None = None  # (proposal_id, decided_by) not yet written
        self.issued: dict[str, Token] = {}  # tokens this transaction inserted, untouched since
        self.unsent: dict[str, Token] = {}  # of those, the ones not yet written
        # request key -> its execution (or None), read with the proposal's lock, which
        # every claim of that key takes first: true until this transaction claims it
        self.executions: dict[str, Execution | None] = {}

    @property
    def conn(self) -> Any:
        self.flush()
        return self.tx.conn

    def flush(self) -> None:
        """Write the held decision and tokens as the plain path would have."""
        if self.held is not None:
            proposal_id, decided_by = self.held
            self.held = None
            self.tx.transition_proposal(proposal_id, AWAITING, CONFIRMED, decided_by=decided_by)
        unsent, self.unsent = self.unsent, {}
        for token in unsent.values():
            self.tx.insert_token(token)

    def transition_proposal(
        self,
        proposal_id: str,
        expected: ProposalStatus,
        new: ProposalStatus,
        *,
        decided_by: str | None = None,
        superseded_by: str | None = None,
        reason: str | None = None,
    ) -> bool:
        plain = superseded_by is None and reason is None
        if (
            plain
            and self.held is None
            and (expected, new) == (AWAITING, CONFIRMED)
            and decided_by is not None
        ):
            # The decision read this row FOR UPDATE and saw it awaiting: the guard holds.
            self.held = (proposal_id, decided_by)
            return True
        if (
            plain
            and self.held is not None
            and self.held[0] == proposal_id
            and (expected, new) == (CONFIRMED, EXECUTED)
            and decided_by is None
        ):
            by = self.held[1]
            self.held = None
            # Still locked by this transaction, still awaiting: the guard holds, so the
            # write goes out with the next statement (and fails the transaction if not).
            self.tx.expect_transition_proposal(proposal_id, AWAITING, EXECUTED, decided_by=by)
            return True
        self.flush()
        return self.tx.transition_proposal(
            proposal_id,
            expected,
            new,
            decided_by=decided_by,
            superseded_by=superseded_by,
            reason=reason,
        )

    def expect_transition_proposal(
        self,
        proposal_id: str,
        expected: ProposalStatus,
        new: ProposalStatus,
        *,
        decided_by: str | None = None,
        reason: str | None = None,
    ) -> None:
        """As `transition_proposal`: the decision's move is held the same way."""
        if not self.transition_proposal(
            proposal_id, expected, new, decided_by=decided_by, reason=reason
        ):
            raise guard_gone("the proposal's move")

    # -- tokens: the one just inserted is known; any change to it goes to the database

    def insert_token(self, token: Token) -> None:
        self.issued[token.token_hash] = token
        self.unsent[token.token_hash] = token

    def get_token(self, token_hash: str, *, for_update: bool = False) -> Token | None:
        if not for_update and token_hash in self.issued:
            return self.issued[token_hash]
        self.flush()
        return self.tx.get_token(token_hash, for_update=for_update)

    def consume_token(self, token_hash: str, execution_id: str) -> bool:
        self.issued.pop(token_hash, None)
        token = self.unsent.pop(token_hash, None)
        if token is not None and token.status is TokenStatus.ISSUED:
            # Ours, unwritten, issued: the guard (status issued) holds; write it consumed.
            consumed = replace(token, status=TokenStatus.CONSUMED, execution_id=execution_id)
            self.tx.insert_token(consumed)
            return True
        self.flush()
        return self.tx.consume_token(token_hash, execution_id)

    # -- calls that touch neither the held proposal row nor a token

    def now(self) -> datetime:
        return self.tx.now()

    def insert_audit(self, record: AuditRecord) -> None:
        self.tx.insert_audit(record)

    def insert_execution(self, execution: Execution) -> bool:
        key = execution.request_key
        if key in self.executions and self.executions.pop(key) is None:
            # Read absent under the proposal's lock, which every claim of the key takes:
            # nothing else can claim it, so the insert goes out with the next statement.
            self.tx.expect_insert_execution(execution)
            return True
        return self.tx.insert_execution(execution)

    def fetch_one(self, query: str, params: Any = None) -> Any:
        """A read of rows that are neither the held proposal's nor a token's (the
        tombstone check): it leaves what is held held."""
        return self.tx.fetch_one(query, params)  # type: ignore[attr-defined]

    def expect_no_row(self, query: str, params: dict[str, Any], what: str) -> None:
        """A held check of rows that are neither the held proposal's nor a token's (the
        tombstone check): it leaves what is held held."""
        self.tx.expect_no_row(query, params, what)  # type: ignore[attr-defined]

    def get_execution(self, **where: Any) -> Execution | None:
        key = where.get("request_key")
        if set(where) == {"request_key"} and key in self.executions:
            return self.executions[key]
        return self.tx.get_execution(**where)

    # -- the decision's locking read brings the execution check's answer along

    def get_proposal(self, proposal_id: str, *, for_update: bool = False) -> Proposal | None:
        self.flush()
        self.issued.clear()
        if not for_update:
            return self.tx.get_proposal(proposal_id)
        proposal, execution = self.tx.lock_proposal(proposal_id)
        if proposal is not None:
            self.executions[proposal.request_key] = execution
        return proposal

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """Every other call: the held write first, and no token is answered from memory."""
        method = getattr(self.tx, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.flush()
            self.issued.clear()
            return method(*args, **kwargs)

        return call
