"""The one-transaction confirm and execute, with the confirm's proposal write held back.

`Executor.confirm_and_execute` decides and claims in one transaction. Run as is, that
writes the proposal row twice (awaiting -> confirmed by the decision, confirmed ->
executed by the claim), leaving a dead copy of the whole row with its arguments and
preview, and reads back the token it has just inserted. Through `HeldConfirmTx` the
decision's move is held and written together with the claim's, as one guarded
awaiting -> executed update that records the decider and the decision time exactly
as the two would; the token just inserted is answered from memory.

Nobody can tell the difference: the proposal row is locked by this transaction from
the decision's first read (FOR UPDATE) until the commit, and the token row is this
transaction's own, invisible to others until then. Any other call writes what is
held first, so every other read sees the rows the plain path would have written.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from writegate.approval.models import AuditRecord, Execution, ProposalStatus, Token
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
        self.conn = tx.conn
        self.held: tuple[str, str] | None = None  # (proposal_id, decided_by) not yet written
        self.issued: dict[str, Token] = {}  # tokens this transaction inserted, untouched since

    def flush(self) -> None:
        """Write the held decision as the plain path would have."""
        if self.held is not None:
            proposal_id, decided_by = self.held
            self.held = None
            self.tx.transition_proposal(proposal_id, AWAITING, CONFIRMED, decided_by=decided_by)

    def transition_proposal(
        self,
        proposal_id: str,
        expected: ProposalStatus,
        new: ProposalStatus,
        *,
        decided_by: str | None = None,
        superseded_by: str | None = None,
    ) -> bool:
        plain = superseded_by is None
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
            return self.tx.transition_proposal(proposal_id, AWAITING, EXECUTED, decided_by=by)
        self.flush()
        return self.tx.transition_proposal(
            proposal_id, expected, new, decided_by=decided_by, superseded_by=superseded_by
        )

    # -- tokens: the one just inserted is known; any change to it goes to the database

    def insert_token(self, token: Token) -> None:
        self.tx.insert_token(token)
        self.issued[token.token_hash] = token

    def get_token(self, token_hash: str, *, for_update: bool = False) -> Token | None:
        if not for_update and token_hash in self.issued:
            return self.issued[token_hash]
        self.flush()
        return self.tx.get_token(token_hash, for_update=for_update)

    def consume_token(self, token_hash: str, execution_id: str) -> bool:
        self.issued.pop(token_hash, None)
        return self.tx.consume_token(token_hash, execution_id)

    # -- calls that touch neither the held proposal row nor a token

    def now(self) -> datetime:
        return self.tx.now()

    def insert_audit(self, record: AuditRecord) -> None:
        self.tx.insert_audit(record)

    def insert_execution(self, execution: Execution) -> bool:
        return self.tx.insert_execution(execution)

    def get_execution(self, **where: Any) -> Execution | None:
        return self.tx.get_execution(**where)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """Every other call: the held write first, and no token is answered from memory."""
        method = getattr(self.tx, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.flush()
            self.issued.clear()
            return method(*args, **kwargs)

        return call
