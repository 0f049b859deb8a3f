"""The small storage interface the protocol runs on.

Every state change is one statement, guarded by the state it expects: methods named
`transition_*`, `replace_*`, `approve_*` and `revoke_*` return False / None when their
guard did not hold, meaning someone else won, and the caller turns that into a typed
error; `insert_proposal` returns False when the call has a proposal already; `claim`,
the one move from a confirm to an execution, is made under the proposal's lock and
raises `InvalidTransition` naming the guard if one failed anyway. Nothing is held back
to be sent later: an error surfaces from the call that caused it. `checkpoints/`
implements this on PostgreSQL; an in-memory version serves the fast unit tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from writegate.approval.events import Due
from writegate.approval.models import (
    AuditRecord,
    Execution,
    ExecutionStatus,
    Proposal,
    ProposalStatus,
    Token,
)
from writegate.approval.retention import Tombstone


@dataclass(frozen=True)
class Locked:
    """A proposal locked for a decision or an execution (None: no such proposal), and,
    read once that lock was held, its token, the execution of its request key, and
    whether that key was purged (a tombstone)."""

    proposal: Proposal | None
    token: Token | None = None
    execution: Execution | None = None
    purged: bool = False


@dataclass(frozen=True)
class Claim:
    """The one move from a person's confirm to an execution (`LedgerTx.claim`).

    The proposal, seen in `from_status` under its lock, becomes executed (decided by
    `decided_by`, if this very call is the confirm); `token`, issued now (`issue`) or
    earlier, is consumed by `execution` (running, or already succeeded for a write
    that commits with the ledger); `audit` rows are written with them.
    """

    proposal_id: str
    from_status: ProposalStatus
    decided_by: str | None
    token: Token
    issue: bool
    execution: Execution
    audit: tuple[AuditRecord, ...]


class LedgerReads(Protocol):
    """What a look at the ledger that writes nothing and locks nothing may ask
    (`LedgerStore.reading`); a transaction answers the same questions."""

    @property
    def conn(self) -> Any:
        """The connection: a tool's code runs its SQL on it, inside the transaction."""
        ...

    def now(self) -> datetime:
        """The server's clock, never the client's."""
        ...

    def failed_over_since(self, moment: datetime) -> bool:
        """True if this database became a new primary after `moment` (a failover): what
        was committed before it may be missing here (asynchronous replication)."""
        ...

    def get_proposal(self, proposal_id: str, *, for_update: bool = False) -> Proposal | None: ...

    def get_call_proposal(
        self, thread_id: str, message_id: str, tool_call_id: str
    ) -> Proposal | None:
        """The proposal made for one tool call of one model message, if any."""
        ...

    def get_proposal_and_execution(
        self, proposal_id: str
    ) -> tuple[Proposal | None, Execution | None]:
        """The proposal and the execution it made, if any, read together."""
        ...

    def get_token(self, token_hash: str, *, for_update: bool = False) -> Token | None: ...
    def get_token_for_proposal(self, proposal_id: str) -> Token | None: ...
    def get_execution(
        self,
        *,
        request_key: str | None = None,
        execution_id: str | None = None,
        proposal_id: str | None = None,
        for_update: bool = False,
    ) -> Execution | None: ...

    def find_tombstone(
        self, *, token_hash: str | None = None, request_key: str | None = None
    ) -> Tombstone | None:
        """What is left of a purged operation, by its token or its request key."""
        ...


class LedgerTx(LedgerReads, Protocol):
    """One transaction. `conn` is handed to a tool's code so it commits with the ledger."""

    def savepoint(self) -> AbstractContextManager[Any]:
        """A part of the transaction that an exception undoes alone (a SAVEPOINT)."""
        ...

    # proposals
    def insert_proposal(self, proposal: Proposal, audit: AuditRecord) -> bool:
        """The proposal and its audit row; False, writing nothing, if its call (thread,
        model message, tool-call id) has a proposal already: a twin's."""
        ...

    def lock_proposal(self, proposal_id: str) -> Locked:
        """The proposal, locked (`FOR UPDATE`), then what `Locked` says, read under it."""
        ...

    def transition_proposal(
        self,
        proposal_id: str,
        expected: ProposalStatus,
        new: ProposalStatus,
        *,
        decided_by: str | None = None,
        superseded_by: str | None = None,
        reason: str | None = None,
    ) -> bool: ...

    # second approval and revocation: guarded like every transition
    def approve_second(self, proposal_id: str, approver: str) -> bool:
        """awaiting_second_approval -> confirmed by `approver`, never the subject."""
        ...

    def revoke_proposal(self, proposal_id: str, expected: ProposalStatus, by: str) -> bool: ...
    def list_thread_pending(self, thread_id: str) -> list[Proposal]:
        """The thread's open proposals (a question, or confirmed and not run), oldest first."""
        ...

    def list_awaiting_second(
        self, tenant_id: str, *, limit: int = 100, **page: Any
    ) -> list[Proposal]:
        """Proposals waiting for a second approver, by (created_at, proposal_id): `order`
        ("oldest", "newest") first, after `after` (such a pair), none of `exclude`'s
        (a requester), each of thread_id, proposal_id, operation matched when given."""
        ...

    # tokens
    def insert_token(self, token: Token) -> None: ...
    def replace_token_hash(self, proposal_id: str, new_hash: str, expires_at: datetime) -> bool: ...
    def revoke_token(self, proposal_id: str) -> bool: ...

    # executions
    def claim(self, claim: Claim) -> None:
        """The confirm's move to an execution, in one statement (see `Claim`); raises
        `InvalidTransition` naming the guard that no longer held."""
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
        escalation: dict[str, Any] | None = None,
        audit: AuditRecord | None = None,
    ) -> Execution | None:
        """One guarded change of an execution: None unless it is in `expected` (and,
        with `require_owner`, under that lease). `lease_seconds` sets the lease to end
        that long from now (0 releases it); `escalation` says why a person must decide;
        `audit` is written by the same statement, if and only if the change was made."""
        ...

    def look_up_call(
        self,
        tenant_id: str,
        thread_id: str,
        tool_call_id: str,
        fingerprint: str,
        *,
        message_id: str = "",
    ) -> CallLookup:
        """The call's proposal (the call `tool_call_id` of the model message
        `message_id` in the thread), or what a new proposal for it must check first,
        in one statement."""
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

    def statements(self) -> AbstractContextManager[LedgerTx]:
        """Each statement commits on its own, as in `reading`: for work whose only
        write is one statement (a new proposal with its audit row, `writegate.propose`),
        which needs no transaction around it and so pays for no BEGIN and no COMMIT."""
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
        operations: Sequence[str],
        lease_seconds: float,
        limit: int,
        audit: Callable[[BacklogItem], AuditRecord],
    ) -> list[BacklogItem]:
        """Claim up to `limit` due candidates of `operations` (tool names) that no one
        holds, auditing each claim."""
        ...

    def due_elsewhere(self, operations: Sequence[str]) -> dict[str, int]:
        """How many due candidates of tools not in `operations` there are, by tool."""
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
        hold_seconds: float = 0.0,
    ) -> Execution | None:
        """Check again after `delay_seconds`; our lease ends now, or `hold_seconds` from
        now while a call of ours is still running."""
        ...

    def escalate(
        self, tx: LedgerTx, execution_id: str, owner: str, reason: dict[str, Any]
    ) -> Execution | None: ...

    @property
    def failovers(self) -> FailoverStore:
        """Where the promotions of this database are checked (approval/failover.py)."""
        ...


# -- after a promotion (approval/failover.py) ----------------------------------------


@dataclass(frozen=True)
class Promotion:
    """Promotions of the database that some of a reconciler's tools have not been checked
    for yet, claimed together under a lease (`FailoverStore.claim_check`)."""

    checks: tuple[tuple[int, str], ...]  # (timeline, tool) pairs claimed
    first_began: datetime  # when the first of those timelines began (the database clock)
    last_began: datetime
    attempt: int  # 1 for the first try at checking them

    @property
    def operations(self) -> tuple[str, ...]:
        return tuple(sorted({operation for _, operation in self.checks}))

    @property
    def timeline(self) -> int:
        return max(timeline for timeline, _ in self.checks)


@dataclass(frozen=True)
class FailoverEscalation:
    """What a person must settle after a promotion that no execution row carries."""

    request_key: str | None  # None: the check itself failed (a listing, past its retries)
    operation: str
    tenant_id: str | None
    proposal_id: str | None  # None: the ledger lost the proposal whole
    timeline_id: int
    reason: dict[str, Any]


class FailoverStore(Protocol):
    def claim_check(
        self, owner: str, *, operations: Sequence[str], settle_seconds: float, lease_seconds: float
    ) -> Promotion | None:
        """The promotions that began at least `settle_seconds` ago and are not checked
        yet for some of `operations`, claimed for `lease_seconds`; None if there are none
        (or this database never was promoted)."""
        ...

    def open_before(self, promotion: Promotion, since: datetime) -> list[Proposal]:
        """Proposals of the promotion's tools that may have been confirmed and run in the
        commits it lost: made before it, still open at `since`, with no execution here,
        and still waiting (or expired, or decided again after it)."""
        ...

    def unknown_keys(self, keys: Sequence[str]) -> set[str]:
        """Those of `keys` the ledger has no record of: no proposal, execution or tombstone."""
        ...

    def escalate(self, escalation: FailoverEscalation, audit: AuditRecord | None) -> bool:
        """Record it with its audit row; False if it was recorded already."""
        ...

    def end_check(self, promotion: Promotion, owner: str, *, retry_seconds: float | None) -> None:
        """Done (`retry_seconds` None), or to be made again after `retry_seconds`."""
        ...


class OutboxStore(Protocol):
    """The webhook outbox (approval/delivery.py): every method is one statement."""

    def write_expiring(self) -> int:
        """Write the expiry warning of every unanswered proposal that expires within its
        endpoint's window and has none yet; return how many were written."""
        ...

    def claim_due(self, owner: str, *, lease_seconds: float, limit: int) -> list[Due]:
        """Due deliveries, each counted as an attempt and leased to `owner`."""
        ...

    def mark_delivered(self, delivery_id: int) -> None: ...

    def mark_failed(self, delivery_id: int, owner: str, error: str, retry_in: float) -> None:
        """Due again after `retry_in` seconds, unless another deliverer leased it since."""
        ...
