"""The small storage interface the protocol runs on.

Every state change is one guarded write: methods named `transition_*`, `consume_*`
and `insert_*` return False / None when the guard did not match, meaning someone else
won; the service turns that into a typed error. `checkpoints/` implements this on
PostgreSQL; an in-memory version serves the fast unit tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from writegate.approval.models import (
    AuditRecord,
    Execution,
    ExecutionStatus,
    Proposal,
    ProposalStatus,
    Token,
)


class LedgerReads(Protocol):
    """What a look at the ledger that writes nothing and locks nothing may ask
    (`LedgerStore.reading`); a transaction answers the same questions."""

    @property
    def conn(self) -> Any:
        """The connection, with every earlier ledger write sent."""
        ...

    def now(self) -> datetime:
        """The server's clock, never the client's."""
        ...

    def failed_over_since(self, moment: datetime) -> bool:
        """True if this database became a new primary after `moment` (a failover): what
        was committed before it may be missing here (asynchronous replication)."""
        ...

    def get_proposal(self, proposal_id: str, *, for_update: bool = False) -> Proposal | None: ...
    def get_proposal_and_execution(
        self, proposal_id: str
    ) -> tuple[Proposal | None, Execution | None]:
        """The proposal and the execution it made, if any, read in one round trip."""
        ...

    def get_token_for_proposal(self, proposal_id: str) -> Token | None: ...
    def get_execution(
        self,
        *,
        request_key: str | None = None,
        execution_id: str | None = None,
        proposal_id: str | None = None,
        for_update: bool = False,
    ) -> Execution | None: ...


class LedgerTx(LedgerReads, Protocol):
    """One transaction. `conn` is handed to domain code so it commits with the ledger."""

    # proposals
    def expect_insert_proposal(self, proposal: Proposal) -> None:
        """`insert_proposal` for a caller that looked the call up and found no proposal
        (see `expect_transition_proposal`): should a twin have inserted one since, the
        transaction fails with `InvalidTransition` and nothing commits."""
        ...

    def lock_proposal(self, proposal_id: str) -> tuple[Proposal | None, Execution | None]:
        """The proposal, locked as `get_proposal(for_update=True)` locks it, and the
        execution of its request key, read once that lock is held; one round trip."""
        ...

    def transition_proposal(
        self,
        proposal_id: str,
        expected: ProposalStatus,
        new: ProposalStatus,
        *,
        decided_by: str | None = None,
        superseded_by: str | None = None,
    ) -> bool: ...

    def expect_transition_proposal(
        self,
        proposal_id: str,
        expected: ProposalStatus,
        new: ProposalStatus,
        *,
        decided_by: str | None = None,
    ) -> None:
        """`transition_proposal` for a caller that knows its guard holds: it may be sent
        with a later statement or the commit. Should the guard fail after all, the
        transaction fails with `InvalidTransition` and nothing commits."""
        ...

    # second approval and revocation: guarded like every transition
    def approve_second(self, proposal_id: str, approver: str) -> bool:
        """awaiting_second_approval -> confirmed by `approver`, never the subject."""
        ...

    def revoke_proposal(self, proposal_id: str, expected: ProposalStatus, by: str) -> bool: ...
    def list_awaiting_second(self, tenant_id: str, *, limit: int = 100) -> list[Proposal]: ...

    # tokens
    def insert_token(self, token: Token) -> None: ...
    def get_token(self, token_hash: str, *, for_update: bool = False) -> Token | None: ...
    def replace_token_hash(self, proposal_id: str, new_hash: str, expires_at: datetime) -> bool: ...
    def expect_replace_token_hash(
        self, proposal_id: str, new_hash: str, expires_at: datetime
    ) -> None:
        """`replace_token_hash` for a caller holding the proposal's lock that saw it
        confirmed, so its token issued (see `expect_transition_proposal`)."""
        ...

    def consume_token(self, token_hash: str, execution_id: str) -> bool: ...
    def revoke_token(self, proposal_id: str) -> bool: ...

    # executions
    def insert_execution(self, execution: Execution) -> bool: ...
    def expect_insert_execution(self, execution: Execution) -> None:
        """`insert_execution` for a caller that knows nothing claims its key (see
        `expect_transition_proposal`)."""
        ...

    def transition_execution(
        self,
        execution_id: str,
        expected: tuple[ExecutionStatus, ...],
        new: ExecutionStatus,
        *,
        lease_owner: str | None = None,
        require_owner: str | None = None,
        lease_seconds: float | None = None,
        provider_ref: str | None = None,
        result: dict[str, Any] | None = None,
        error_code: str | None = None,
        count_attempt: bool = False,
    ) -> Execution | None: ...
    def look_up_call(
        self, tenant_id: str, thread_id: str, tool_call_id: str, fingerprint: str
    ) -> CallLookup:
        """`LedgerStore.look_up_call` inside this transaction (an edit's new proposal)."""
        ...

    # audit
    def insert_audit(self, record: AuditRecord) -> None: ...


@dataclass(frozen=True)
class CallLookup:
    """What `propose` reads before it writes anything, in one statement.

    `same_call`: the proposal already made for this tool call (a re-run), and then
    nothing else is read. Otherwise `running`, the request's open execution (running,
    retrying, unknown or escalated), and `open_one`, the thread's open, unexpired
    proposal for the same fingerprint; `now`, the database clock the read saw, when
    the store has one (None: ask the transaction).
    """

    same_call: Proposal | None
    running: Execution | None = None
    open_one: Proposal | None = None
    now: datetime | None = None


class LedgerStore(Protocol):
    def transaction(self) -> AbstractContextManager[LedgerTx]: ...

    def reading(self) -> AbstractContextManager[LedgerReads]:
        """Reads only, outside any transaction: each statement on its own (at read
        committed a transaction that locks nothing would see no more), so a lookup
        costs no BEGIN and no COMMIT."""
        ...

    def look_up_call(
        self, tenant_id: str, thread_id: str, tool_call_id: str, fingerprint: str
    ) -> CallLookup:
        """The call's proposal, or what a new proposal for it must check first; read on
        its own (one statement, no transaction: none of it is locked, so a transaction
        at read committed would see no more)."""
        ...

    def audit_rows(self, tenant_id: str, **filters: Any) -> Iterator[dict[str, Any]]: ...


class PresentedQuestions(Protocol):
    """Which approval questions reached a client: an interrupt that ended its run.

    A question is the interrupt at `index` of the task at `checkpoint_ns` in a thread.
    An answer naming no proposal counts only for a question recorded here.
    """

    def record(self, thread_id: str, checkpoint_ns: str, index: int, proposal_id: str) -> None: ...

    def was_presented(
        self, thread_id: str, checkpoint_ns: str, index: int, proposal_id: str
    ) -> bool: ...


# -- the reconcile backlog (approval/reconcile.py) ------------------------------------


@dataclass(frozen=True)
class BacklogItem:
    """A claimed execution: ours (status running, our lease) until settled or deferred."""

    execution: Execution
    previous_status: str
    # This check's number: the checks that ended without settling it (deferred or
    # escalated), plus this one. A claim whose reconciler died is not a check.
    checks: int
    age_seconds: float  # since the execution started, on the database clock


class BacklogStore(Protocol):
    def claim_due(
        self,
        owner: str,
        *,
        lease_seconds: float,
        limit: int,
        audit: Callable[[BacklogItem], AuditRecord],
    ) -> list[BacklogItem]:
        """Claim up to `limit` due candidates no other worker holds, auditing each claim."""
        ...

    def settle(
        self,
        tx: LedgerTx,
        execution_id: str,
        owner: str,
        status: ExecutionStatus,
        *,
        provider_ref: str | None = None,
        result: dict[str, Any] | None = None,
        error_code: str | None = None,
    ) -> Execution | None:
        """Final (or deferred) state, guarded by our lease; None if we lost it."""
        ...

    def defer(
        self,
        tx: LedgerTx,
        execution_id: str,
        owner: str,
        status: ExecutionStatus,
        *,
        delay_seconds: float,
        error_code: str | None,
    ) -> Execution | None: ...

    def escalate(
        self, tx: LedgerTx, execution_id: str, owner: str, reason: dict[str, Any]
    ) -> Execution | None: ...
