"""An in-memory ledger store for fast unit tests of the protocol.

One lock serializes transactions and a snapshot taken at the start is restored on an
exception, so the guarded-write semantics match the PostgreSQL store. It is not for
production: nothing here survives the process.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from writegate.approval.errors import InvalidTransition
from writegate.approval.models import (
    PENDING,
    AuditRecord,
    Execution,
    ExecutionStatus,
    Proposal,
    ProposalStatus,
    Token,
    TokenStatus,
)
from writegate.approval.retention import Tombstone
from writegate.approval.store import CallLookup, Claim, Locked

# An execution whose outcome is not final: the same request may not be proposed again.
UNSETTLED = (
    ExecutionStatus.RUNNING,
    ExecutionStatus.UNKNOWN,
    ExecutionStatus.FAILED_RETRYABLE,
    ExecutionStatus.ESCALATED,
)
OPEN_PROPOSALS = (
    ProposalStatus.AWAITING,
    ProposalStatus.AWAITING_SECOND,
    ProposalStatus.CONFIRMED,
)


class _State:
    def __init__(self) -> None:
        self.proposals: dict[str, Proposal] = {}
        self.tokens: dict[str, Token] = {}
        self.executions: dict[str, Execution] = {}
        self.escalations: dict[str, dict[str, Any]] = {}  # execution id -> why a person decides
        self.audit: list[AuditRecord] = []
        self.tombstones: dict[str, Tombstone] = {}  # by request key


class MemoryLedgerTx:
    def __init__(self, state: _State, clock: Callable[[], datetime], conn: Any):
        self.s = state
        self.conn = conn
        self._now = clock()

    def now(self) -> datetime:
        return self._now

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        saved, saved_conn = copy.deepcopy(self.s.__dict__), copy.deepcopy(self.conn)
        try:
            yield
        except BaseException:
            self.s.__dict__.update(saved)
            if self.conn is not None:  # a tool's fake handle, restored like the ledger
                self.conn.__dict__.update(saved_conn.__dict__)
            raise

    def failed_over_since(self, moment: datetime) -> bool:
        return False  # memory has no standby to fail over to

    def _insert_proposal(self, proposal: Proposal) -> Proposal | None:
        if self._proposal_by_call(proposal.thread_id, proposal.tool_call_id, proposal.message_id):
            return None
        self.s.proposals[proposal.proposal_id] = proposal
        return proposal

    def insert_proposal(self, proposal: Proposal, audit: AuditRecord) -> bool:
        if self._insert_proposal(proposal) is None:
            return False
        self.insert_audit(audit)
        return True

    def get_proposal(self, proposal_id: str, *, for_update: bool = False) -> Proposal | None:
        return self.s.proposals.get(proposal_id)

    def lock_proposal(self, proposal_id: str) -> Locked:
        proposal = self.s.proposals.get(proposal_id)
        if proposal is None:
            return Locked(None)
        return Locked(
            proposal,
            token=self.get_token_for_proposal(proposal_id),
            execution=self.get_execution(request_key=proposal.request_key),
            purged=proposal.request_key in self.s.tombstones,
        )

    def claim(self, claim: Claim) -> None:
        moved = self.transition_proposal(
            claim.proposal_id,
            claim.from_status,
            ProposalStatus.EXECUTED,
            decided_by=claim.decided_by,
        )
        if not moved:
            raise InvalidTransition(
                f"proposal {claim.proposal_id} is no longer {claim.from_status}"
            )
        token = claim.token
        if not claim.issue:
            held = self.s.tokens.get(token.token_hash)
            if held is None or held.status is not TokenStatus.ISSUED:
                raise InvalidTransition(
                    f"the token of proposal {claim.proposal_id} is no longer issued"
                )
        self.s.tokens[token.token_hash] = replace(
            token, status=TokenStatus.CONSUMED, execution_id=claim.execution.execution_id
        )
        if not self.insert_execution(claim.execution):
            raise InvalidTransition(f"request key {claim.execution.request_key} is claimed")
        for record in claim.audit:
            self.insert_audit(record)

    def find_tombstone(
        self, *, token_hash: str | None = None, request_key: str | None = None
    ) -> Tombstone | None:
        return next(
            (
                t
                for t in self.s.tombstones.values()
                if (token_hash is not None and t.token_hash == token_hash)
                or (request_key is not None and t.request_key == request_key)
            ),
            None,
        )

    def get_call_proposal(
        self, thread_id: str, message_id: str, tool_call_id: str
    ) -> Proposal | None:
        return self._proposal_by_call(thread_id, tool_call_id, message_id)

    def get_proposal_and_execution(
        self, proposal_id: str
    ) -> tuple[Proposal | None, Execution | None]:
        return self.s.proposals.get(proposal_id), self.get_execution(proposal_id=proposal_id)

    def _proposal_by_call(
        self, thread_id: str, tool_call_id: str, message_id: str
    ) -> Proposal | None:
        return next(
            (
                p
                for p in self.s.proposals.values()
                if (p.thread_id, p.tool_call_id, p.message_id)
                == (thread_id, tool_call_id, message_id)
            ),
            None,
        )

    def _open_proposal(self, thread_id: str, fingerprint: str) -> Proposal | None:
        return next(
            (
                p
                for p in self.s.proposals.values()
                if p.thread_id == thread_id
                and p.fingerprint == fingerprint
                and p.status in OPEN_PROPOSALS
                and p.expires_at > self._now
            ),
            None,
        )

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
        p = self.s.proposals.get(proposal_id)
        if p is None or p.status is not expected:
            return False
        self.s.proposals[proposal_id] = replace(
            p,
            status=new,
            decided_by=decided_by or p.decided_by,
            decided_at=self._now if decided_by else p.decided_at,
            superseded_by=superseded_by or p.superseded_by,
            decision_reason=reason or p.decision_reason,
        )
        return True

    def insert_token(self, token: Token) -> None:
        self.s.tokens[token.token_hash] = token

    def get_token(self, token_hash: str, *, for_update: bool = False) -> Token | None:
        return self.s.tokens.get(token_hash)

    def get_token_for_proposal(self, proposal_id: str) -> Token | None:
        return next((t for t in self.s.tokens.values() if t.proposal_id == proposal_id), None)

    def approve_second(self, proposal_id: str, approver: str) -> bool:
        p = self.s.proposals.get(proposal_id)
        if p is None or p.status is not ProposalStatus.AWAITING_SECOND or p.subject == approver:
            return False
        self.s.proposals[proposal_id] = replace(
            p,
            status=ProposalStatus.CONFIRMED,
            second_approver=approver,
            second_approved_at=self._now,
        )
        return True

    def revoke_proposal(self, proposal_id: str, expected: ProposalStatus, by: str) -> bool:
        p = self.s.proposals.get(proposal_id)
        if p is None or p.status is not expected:
            return False
        self.s.proposals[proposal_id] = replace(
            p, status=ProposalStatus.REVOKED, revoked_by=by, revoked_at=self._now
        )
        return True

    def list_thread_pending(self, thread_id: str) -> list[Proposal]:
        found = [
            p for p in self.s.proposals.values() if p.thread_id == thread_id and p.status in PENDING
        ]
        return sorted(found, key=lambda p: p.created_at)

    def list_awaiting_second(
        self, tenant_id: str, *, limit: int = 100, **page: Any
    ) -> list[Proposal]:
        newest, after = page.get("order") == "newest", page.get("after")
        matched = {k: page.get(k) for k in ("thread_id", "proposal_id", "operation")}
        waiting = [
            p
            for p in self.s.proposals.values()
            if p.tenant_id == tenant_id
            and p.status is ProposalStatus.AWAITING_SECOND
            and p.expires_at > self._now
            and p.subject != page.get("exclude")
            and all(v is None or getattr(p, k) == v for k, v in matched.items())
        ]
        waiting.sort(key=lambda p: (p.created_at, p.proposal_id), reverse=newest)
        if after is not None:
            waiting = [p for p in waiting if ((p.created_at, p.proposal_id) < after) == newest
                       and (p.created_at, p.proposal_id) != after]  # fmt: skip
        return waiting[:limit]

    def replace_token_hash(self, proposal_id: str, new_hash: str, expires_at: datetime) -> bool:
        token = self.get_token_for_proposal(proposal_id)
        if token is None or token.status is not TokenStatus.ISSUED:
            return False
        del self.s.tokens[token.token_hash]
        self.s.tokens[new_hash] = replace(token, token_hash=new_hash, expires_at=expires_at)
        return True

    def revoke_token(self, proposal_id: str) -> bool:
        token = self.get_token_for_proposal(proposal_id)
        if token is None or token.status is not TokenStatus.ISSUED:
            return False
        self.s.tokens[token.token_hash] = replace(token, status=TokenStatus.REVOKED)
        return True

    def insert_execution(self, execution: Execution) -> bool:
        if self.get_execution(request_key=execution.request_key):
            return False
        self.s.executions[execution.execution_id] = execution
        return True

    def get_execution(
        self,
        *,
        request_key: str | None = None,
        execution_id: str | None = None,
        proposal_id: str | None = None,
        for_update: bool = False,
    ) -> Execution | None:
        for e in self.s.executions.values():
            if (
                e.request_key == request_key
                or e.execution_id == execution_id
                or e.proposal_id == proposal_id
            ):
                return e
        return None

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
        e = self.s.executions.get(execution_id)
        if e is None or e.status not in expected:
            return None
        if require_owner is not None and e.lease_owner != require_owner:
            return None
        done = new in (ExecutionStatus.SUCCEEDED, ExecutionStatus.FAILED_TERMINAL)
        updated = replace(
            e,
            status=new,
            updated_at=self._now,
            lease_owner=lease_owner or e.lease_owner,
            lease_expires_at=(
                self._now + timedelta(seconds=lease_seconds)
                if lease_seconds is not None
                else e.lease_expires_at
            ),
            provider_ref=provider_ref or e.provider_ref,
            result=result if result is not None else e.result,
            error_code=error_code,
            attempts=e.attempts + (1 if count_attempt else 0),
            completed_at=self._now if done else e.completed_at,
        )
        self.s.executions[execution_id] = updated
        if escalation is not None:
            self.s.escalations[execution_id] = escalation
        if audit is not None:
            self.s.audit.append(audit)
        return updated

    def look_up_call(
        self,
        tenant_id: str,
        thread_id: str,
        tool_call_id: str,
        fingerprint: str,
        *,
        message_id: str = "",
    ) -> CallLookup:
        same_call = self._proposal_by_call(thread_id, tool_call_id, message_id)
        if same_call is not None:
            return CallLookup(same_call)
        return CallLookup(
            None,
            running=self._open_execution(tenant_id, fingerprint),
            open_one=self._open_proposal(thread_id, fingerprint),
        )

    def _open_execution(self, tenant_id: str, fingerprint: str) -> Execution | None:
        return next(
            (
                e
                for e in self.s.executions.values()
                if e.tenant_id == tenant_id
                and e.fingerprint == fingerprint
                and e.status in UNSETTLED
            ),
            None,
        )

    def insert_audit(self, record: AuditRecord) -> None:
        self.s.audit.append(record)


class MemoryLedgerStore:
    """`conn` is handed to tools as their transactional handle (any object a fake uses)."""

    def __init__(self, *, clock: Callable[[], datetime] | None = None, conn: Any = None):
        self.state = _State()
        self.clock = clock or (lambda: datetime.now(UTC))
        self.conn = conn
        self._lock = threading.RLock()

    @contextmanager
    def transaction(self) -> Iterator[MemoryLedgerTx]:
        with self._lock:
            saved = copy.deepcopy(self.state)
            saved_conn = copy.deepcopy(self.conn)
            try:
                yield MemoryLedgerTx(self.state, self.clock, self.conn)
            except BaseException:
                self.state = saved
                if self.conn is not None:
                    self.conn.__dict__.update(saved_conn.__dict__)
                raise

    @contextmanager
    def statements(self) -> Iterator[MemoryLedgerTx]:
        with self._lock:  # each write stands on its own: nothing to restore
            yield MemoryLedgerTx(self.state, self.clock, self.conn)

    reading = statements

    def audit_rows(self, tenant_id: str, **filters: Any) -> Iterator[dict[str, Any]]:
        """As the PostgreSQL store's: by audit_id, `order` first, after `after`, at
        most `limit` (all without one), each other filter matched exactly."""
        given = {k: v for k, v in filters.items() if v is not None}
        newest = given.pop("order", "oldest") == "newest"
        limit, after = given.pop("limit", None), given.pop("after", None)
        # Its position stands for the audit_id a database would have given it.
        records = [
            {"audit_id": n, **asdict(record)} for n, record in enumerate(self.state.audit, 1)
        ]
        rows = [
            row
            for row in (reversed(records) if newest else records)
            if row["tenant_id"] == tenant_id
            and all(row.get(k) == v for k, v in given.items())
            and (after is None or (row["audit_id"] < after if newest else row["audit_id"] > after))
        ]
        yield from rows if limit is None else rows[:limit]
