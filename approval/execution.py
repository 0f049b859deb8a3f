"""Execute a confirmed proposal at most once.

    T1  verify the token against the stored snapshot, consume it (one guarded UPDATE),
        claim the request key with a lease, apply the local business write guarded by
        the version seen at proposal time, all in one transaction;
        then call the downstream with the request key (outside any transaction);
    T2  record the outcome and the receipt, guarded by our lease.

A lost or ambiguous downstream answer leaves the execution `unknown`: it is never
re-run blindly here; `approval/reconcile.py` looks it up by key.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from writegate.approval import tracing
from writegate.approval.audit import (
    duplicate_audit,
    execution_audit,
    execution_refusal_audit,
)
from writegate.approval.canonical import digest, hash_secret
from writegate.approval.decisions import Confirm
from writegate.approval.downstream import RetryPolicy, call_with_retries, outcome_status
from writegate.approval.errors import (
    AlreadyConsumed,
    ArgsMismatch,
    AudienceMismatch,
    ExecutionFailed,
    IdempotencyConflict,
    NotFound,
    OperationMismatch,
    OutcomeUnknown,
    PolicyChanged,
    ProposalSuperseded,
    Revoked,
    SubjectMismatch,
    TenantMismatch,
    TokenExpired,
    TokenReplaced,
    TokenUnknown,
    WritegateError,
    is_database_outage,
)
from writegate.approval.held_confirm import HeldConfirmTx
from writegate.approval.models import (
    Execution,
    ExecutionStatus,
    Identity,
    Proposal,
    ProposalStatus,
    Receipt,
    Token,
    TokenStatus,
)
from writegate.approval.outcomes import execution_outcome
from writegate.approval.retention import TombstoneLookup
from writegate.approval.risk import requires_fresh_confirmation
from writegate.approval.service import ApprovalService, Confirmation, new_id
from writegate.approval.spec import DownstreamResult, ToolContext, ToolSpec, acting_for
from writegate.approval.store import LedgerReads, LedgerTx

RUNNING = (ExecutionStatus.RUNNING,)


class _TwoSteps(Exception):
    """Leaves the one-transaction confirm-and-execute, rolling it back."""


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{new_id('w')}"


class _Consumed(NamedTuple):
    """A duplicate's run as `Executor._consumed_in` left it."""

    execution: Execution
    taken_over: bool  # it had failed retryably, and this request now runs it again


class Executor:
    def __init__(
        self,
        service: ApprovalService,
        *,
        retry: RetryPolicy | None = None,
        owner: str | None = None,
        step_hook: Callable[[str], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        tombstones: TombstoneLookup | None = None,
    ) -> None:
        self.service = service
        self.store = service.store
        self.retry = retry or RetryPolicy()
        self.owner = owner or default_owner()
        # Called at each step boundary ("claimed", "downstream_returned", "recorded");
        # the fault-injection suite uses it to kill the process at a precise point.
        self.step_hook = step_hook or (lambda step: None)
        self.sleep = sleep
        # Purged operations leave tombstones; without a lookup a purged token is
        # still refused (as unknown), just with a less precise reason.
        self.tombstones = tombstones

    def execute(
        self,
        identity: Identity,
        token: str,
        *,
        proposal_id: str | None = None,
        operation: str | None = None,
    ) -> Receipt:
        """Execute with the confirmation token a client presents (HTTP, MCP, CLI)."""
        return self._execute(identity, token, proposal_id, operation)

    def execute_confirmed(self, identity: Identity, proposal_id: str, operation: str) -> Receipt:
        """Execute the caller's own confirmed proposal, for server-side code that just
        took the confirmation itself (the graph's `execute` node).

        The token's secret is not needed, so it is never carried in graph state or a
        checkpoint; the proposal's issued token row is verified and consumed exactly as
        a presented one would be, under the same locks and checks.
        """
        return self._execute(identity, None, proposal_id, operation)

    def confirm_and_execute(
        self, identity: Identity, decision: Confirm, operation: str
    ) -> Receipt | None:
        """Take a person's confirm and execute it, for server-side code that takes the
        confirmation itself (the graph's write node): the decision, the token's issue
        and consumption, the execution claim and the local write commit together, in
        one transaction instead of two.

        Only the plain path is taken here: anything else (an expiry, a second approver,
        a refusal at the claim) rolls the whole transaction back and returns None, and
        the caller decides and executes in two steps as before, where each of those
        outcomes is recorded and answered.
        """
        parent = tracing.recall(self.store, proposal_id=decision.proposal_id)
        pid, tenant = decision.proposal_id, identity.tenant_id
        with tracing.span(
            "writegate.decide", parent, proposal_id=pid, tenant_id=tenant, action="confirm"
        ):
            pass  # the decision commits with the claim below, in the same transaction
        with tracing.span("writegate.execute", parent, proposal_id=pid, tenant_id=tenant):
            started = time.perf_counter()
            try:
                with self.store.transaction() as plain:
                    # The decision's proposal write is written with the claim's, as one.
                    tx = HeldConfirmTx(plain)
                    outcome = self.service.decide_in(tx, identity, decision, started)
                    if not isinstance(outcome, Confirmation):
                        raise _TwoSteps
                    proposal, spec, execution = self._claim(
                        tx,
                        identity,
                        outcome.token,
                        decision.proposal_id,
                        operation,
                        started,
                        held=outcome.proposal,
                    )
                    tx.flush()  # nothing is held after a claim; never commit a write unwritten
            except _TwoSteps:
                return None
            except WritegateError as exc:
                if is_database_outage(exc):
                    raise  # the commit's fate is unknown: say so, never decide a second time
                return None
            return self._after_claim(identity, spec, proposal, execution, started)

    def _execute(
        self,
        identity: Identity,
        token: str | None,
        proposal_id: str | None,
        operation: str | None,
    ) -> Receipt:
        parent = tracing.recall(
            self.store,
            proposal_id=proposal_id,
            token_hash=hash_secret(token) if token and proposal_id is None else None,
        )
        with tracing.span(
            "writegate.execute", parent, proposal_id=proposal_id, tenant_id=identity.tenant_id
        ):
            return self._execute_traced(identity, token, proposal_id, operation)

    def _execute_traced(
        self,
        identity: Identity,
        token: str | None,
        proposal_id: str | None,
        operation: str | None,
    ) -> Receipt:
        started = time.perf_counter()
        refusal: WritegateError | None = None
        consumed: _Consumed | None = None
        try:
            with self.store.transaction() as tx:
                peek = self._peek(tx, token, proposal_id)
                if peek is None:  # nothing is written yet: say why, in this transaction
                    refusal = self._refuse_unknown(
                        tx, identity, token, proposal_id, operation, started
                    )
                else:
                    try:
                        proposal, spec, execution = self._claim(
                            tx, identity, token, proposal_id, operation, started, peek=peek
                        )
                    except AlreadyConsumed as exc:  # refused before the claim's first write
                        refusal = exc
                if isinstance(refusal, AlreadyConsumed):
                    consumed = self._consumed_in(tx, identity, refusal, started)
        except TokenUnknown:  # replaced after the peek, by a confirm racing this claim
            with self.store.transaction() as tx:
                refusal = self._refuse_unknown(tx, identity, token, proposal_id, operation, started)
                if isinstance(refusal, AlreadyConsumed):
                    consumed = self._consumed_in(tx, identity, refusal, started)
        except WritegateError as exc:
            if not is_database_outage(exc):  # its audit row could not be written either
                self._audit_refusal(identity, proposal_id, operation, exc, started)
            raise
        if isinstance(refusal, AlreadyConsumed):  # audited by _consumed_in, as a duplicate
            return self._answer_consumed(identity, refusal, consumed)
        if refusal is not None:
            raise refusal
        return self._after_claim(identity, spec, proposal, execution, started)

    def _refuse_unknown(
        self,
        tx: LedgerTx,
        identity: Identity,
        token: str | None,
        proposal_id: str | None,
        operation: str | None,
        started: float,
    ) -> WritegateError:
        """Why a token is unknown (purged, replaced, or never issued), audited in `tx`
        unless it is a duplicate of a run, which `_consumed_in` audits."""
        stone = (
            self.tombstones.find_tombstone(tx, token_hash=hash_secret(token))
            if self.tombstones is not None and token
            else None
        )
        refusal = (
            (stone.refusal() if stone is not None else None)
            or self._replaced_in(tx, identity, proposal_id)
            or TokenUnknown(proposal_id=proposal_id)
        )
        if not isinstance(refusal, AlreadyConsumed):
            tx.insert_audit(
                execution_refusal_audit(identity, proposal_id, operation, refusal, started)
            )
        return refusal

    def _after_claim(
        self,
        identity: Identity,
        spec: ToolSpec,
        proposal: Proposal,
        execution: Execution,
        started: float,
    ) -> Receipt:
        tracing.annotate(
            proposal_id=proposal.proposal_id,
            execution_id=execution.execution_id,
            request_key=execution.request_key,
            args_digest=execution.args_digest,
        )
        self.step_hook("claimed")
        if execution.status is ExecutionStatus.SUCCEEDED or _handed_over(execution):
            return execution_outcome(execution)  # a hand-over: in progress, for reconcile
        return self._run_downstream(identity, spec, proposal, execution, started)

    @staticmethod
    def _replaced_in(
        tx: LedgerReads, identity: Identity, proposal_id: str | None
    ) -> WritegateError | None:
        """An unknown token for the caller's own confirmed proposal was replaced by a
        later confirm of the same proposal (a double click, a re-run node). Answer with
        where that proposal's one run stands, not with a bare `token_unknown`."""
        if proposal_id is None:
            return None
        proposal, execution = tx.get_proposal_and_execution(proposal_id)
        if proposal is None or (proposal.subject, proposal.tenant_id) != (
            identity.user_id,
            identity.tenant_id,
        ):
            return None
        if execution is not None:
            return AlreadyConsumed(proposal_id=proposal_id, execution_id=execution.execution_id)
        if proposal.status is ProposalStatus.CONFIRMED:
            return TokenReplaced(proposal_id=proposal_id)
        return None

    # -- T1 ---------------------------------------------------------------------------

    @staticmethod
    def _peek(tx: LedgerTx, secret: str | None, proposal_id: str | None) -> Token | None:
        """The token presented (its row, unlocked), or for `execute_confirmed` (no
        secret) the proposal's own token row; None if there is none."""
        if secret is None:
            return tx.get_token_for_proposal(proposal_id) if proposal_id else None
        return tx.get_token(hash_secret(secret)) if secret else None

    def _claim(
        self,
        tx: LedgerTx,
        identity: Identity,
        secret: str | None,
        proposal_id: str | None,
        operation: str | None,
        started: float,
        *,
        held: Proposal | None = None,
        peek: Token | None = None,
    ) -> tuple[Proposal, ToolSpec, Execution]:
        """T1. `held`: the proposal as this very transaction just confirmed it; its row
        and its token's are locked by this transaction already, so neither is read again.
        `peek`: the token as `_peek` just read it in `tx`, if the caller did.

        It refuses with `AlreadyConsumed` only before its first write, so that a caller
        may answer the duplicate in the same transaction (`_execute_traced`).
        """
        peek = peek or self._peek(tx, secret, proposal_id)
        if peek is None:
            raise TokenUnknown(proposal_id=proposal_id)
        hashed = peek.token_hash
        locked: Proposal | None
        token: Token | None
        if held is not None and held.proposal_id == peek.proposal_id:
            locked, token = held, peek  # written by this transaction: nobody else can
        else:
            # Lock in decide()'s order, the proposal row and then its token, so that a
            # confirm racing this execute waits for it instead of deadlocking with it.
            locked = tx.get_proposal(peek.proposal_id, for_update=True)
            token = tx.get_token(hashed, for_update=True)
        if token is None:  # a concurrent confirm replaced it
            raise TokenUnknown(proposal_id=proposal_id)
        if token.subject != identity.user_id:
            raise SubjectMismatch()
        if token.tenant_id != identity.tenant_id:
            raise TenantMismatch()
        if token.audience != self.service.policy.audience:
            raise AudienceMismatch(audience=token.audience)
        if operation is not None and operation != token.operation:
            raise OperationMismatch(expected=operation, token_operation=token.operation)
        wanted = proposal_id or token.proposal_id
        proposal = locked if wanted == peek.proposal_id else None
        if proposal is None:  # presented for another proposal: lock that one as well
            proposal = tx.get_proposal(wanted, for_update=True)
        if proposal is None or proposal.tenant_id != identity.tenant_id:
            raise NotFound("no such proposal for this user", proposal_id=proposal_id)
        if proposal.operation != token.operation:
            raise OperationMismatch(token_operation=token.operation)
        # Recomputed the way the proposal's digest was written (rows from before JCS).
        executed_digest = digest(proposal.args, proposal.digest_scheme)
        if (
            proposal.proposal_id != token.proposal_id
            or token.digest_scheme != proposal.digest_scheme
            or token.args_digest != executed_digest
            or proposal.args_digest != executed_digest
        ):
            raise ArgsMismatch(
                approved_digest=token.args_digest,
                requested_digest=proposal.args_digest,
                executed_digest=executed_digest,
            )
        if proposal.status is ProposalStatus.SUPERSEDED:
            raise ProposalSuperseded(
                proposal_id=proposal.proposal_id, superseded_by=proposal.superseded_by
            )
        if token.status is TokenStatus.REVOKED or proposal.status is ProposalStatus.REVOKED:
            raise Revoked(proposal_id=proposal.proposal_id)
        if token.status is TokenStatus.CONSUMED:
            raise AlreadyConsumed(proposal_id=proposal.proposal_id, execution_id=token.execution_id)
        if requires_fresh_confirmation(proposal, token.policy_version, self.service.policy):
            raise PolicyChanged(
                token_policy=token.policy_version, current_policy=self.service.policy.version
            )
        if tx.now() >= token.expires_at:  # right-open: at expires_at it is expired
            raise TokenExpired(
                proposal_id=proposal.proposal_id, expired_at=token.expires_at.isoformat()
            )
        spec = self.service.spec_for(proposal.operation)
        if self.tombstones is not None:
            # Rows restored or replayed past a purge must not run the operation again.
            if held is not None:
                # A purge fails this one-transaction confirm at its next round trip; the
                # two-step path it then takes refuses with the tombstone's own answer.
                self.tombstones.refuse_later(tx, request_key=token.request_key)
            else:
                stone = self.tombstones.find_tombstone(tx, request_key=token.request_key)
                if stone is not None:
                    raise stone.refusal()
        existing = tx.get_execution(request_key=token.request_key)
        if existing is not None:
            if existing.fingerprint != proposal.fingerprint:
                raise IdempotencyConflict(request_key=token.request_key)
            raise AlreadyConsumed(execution_id=existing.execution_id)
        # Proposed before this database was promoted: it may have been claimed and sent
        # in commits the failover lost (asynchronous replication). Never send it blindly:
        # claimed with its lease already over, the reconciler looks its key up first.
        hand_over = spec.has_downstream and tx.failed_over_since(proposal.created_at)
        now = tx.now()
        execution = Execution(
            execution_id=new_id("exec"),
            request_key=token.request_key,
            token_hash=token.token_hash,
            proposal_id=proposal.proposal_id,
            tenant_id=proposal.tenant_id,
            subject=proposal.subject,
            operation=proposal.operation,
            resource=proposal.resource,
            args=proposal.args,
            args_digest=executed_digest,
            digest_scheme=proposal.digest_scheme,
            fingerprint=proposal.fingerprint,
            status=ExecutionStatus.RUNNING,
            created_at=now,
            updated_at=now,
            attempts=1,
            lease_owner=self.owner,
            lease_expires_at=now if hand_over else now + self.retry.lease,
        )
        if not tx.consume_token(token.token_hash, execution.execution_id):
            raise AlreadyConsumed(proposal_id=proposal.proposal_id)
        if not tx.insert_execution(execution):
            raise IdempotencyConflict(request_key=token.request_key)
        tx.transition_proposal(
            proposal.proposal_id, ProposalStatus.CONFIRMED, ProposalStatus.EXECUTED
        )
        ctx = ToolContext(identity, tx.conn, proposal.thread_id)
        local = spec.apply(
            ctx,
            proposal.args,
            expected_version=proposal.state_version,
            request_key=execution.request_key,
        )
        if not spec.has_downstream:
            done = tx.transition_execution(
                execution.execution_id,
                RUNNING,
                ExecutionStatus.SUCCEEDED,
                result=local,
                require_owner=self.owner,
            )
            assert done is not None  # we inserted it in this very transaction
            tx.insert_audit(execution_audit(identity, proposal, done, started))
            execution = done
        return proposal, spec, execution

    # -- downstream and T2 ------------------------------------------------------------

    def _run_downstream(
        self,
        identity: Identity,
        spec: ToolSpec,
        proposal: Proposal | None,
        execution: Execution,
        started: float,
    ) -> Receipt:
        outcome: DownstreamResult | WritegateError
        with acting_for(identity), tracing.span("writegate.downstream"):
            outcome = self.call_with_retries(spec, execution.args, execution.request_key)
        self.step_hook("downstream_returned")
        with tracing.span("writegate.record"), self.store.transaction() as tx:
            final = self.record(
                tx, identity, spec, execution, outcome, proposal=proposal, started=started
            )
        self.step_hook("recorded")
        return execution_outcome(final)

    def call_with_retries(
        self, spec: ToolSpec, args: dict[str, Any], request_key: str
    ) -> DownstreamResult | WritegateError:
        """Call the downstream under this executor's retry policy (see approval/downstream)."""
        return call_with_retries(spec, args, request_key, self.retry, self.sleep)

    def record(
        self,
        tx: LedgerTx,
        identity: Identity,
        spec: ToolSpec,
        execution: Execution,
        outcome: DownstreamResult | WritegateError,
        *,
        proposal: Proposal | None = None,
        started: float | None = None,
    ) -> Execution:
        """Write the outcome, guarded by our lease; if we lost it, report what is there."""
        provider_ref, result, error_code = None, None, None
        new = outcome_status(outcome)
        if isinstance(outcome, DownstreamResult):
            provider_ref, result = outcome.provider_ref, outcome.result
        else:
            error_code = outcome.code
        done = tx.transition_execution(
            execution.execution_id,
            RUNNING,
            new,
            require_owner=self.owner,
            provider_ref=provider_ref,
            result=result,
            error_code=error_code,
        )
        if done is None:  # the lease was taken over (reconciliation); don't overwrite it
            current = tx.get_execution(execution_id=execution.execution_id)
            assert current is not None
            return current
        ctx = ToolContext(identity, tx.conn)
        if isinstance(outcome, DownstreamResult):
            spec.on_downstream_success(ctx, execution.args, execution.request_key, outcome)
        elif new is ExecutionStatus.FAILED_TERMINAL:
            spec.compensate(ctx, execution.args, execution.request_key)
        tx.insert_audit(execution_audit(identity, proposal, done, started or time.perf_counter()))
        return done

    # -- replays ----------------------------------------------------------------------

    def _consumed_in(
        self, tx: LedgerTx, identity: Identity, exc: AlreadyConsumed, started: float
    ) -> _Consumed | None:
        """A second use of a consumed token by its own subject, in `tx`: the duplicate's
        audit row (what the duplicate-request metric counts), and the run taken over if it
        failed retryably, to be resumed with the same request key; anything else is
        reported, never re-run (`_answer_consumed`). None, writing nothing, if the run is
        not the caller's to hear about."""
        execution_id = exc.details.get("execution_id")
        execution = tx.get_execution(execution_id=execution_id) if execution_id else None
        if execution is None or execution.subject != identity.user_id:
            return None
        tx.insert_audit(duplicate_audit(identity, execution, started))
        claimed = None
        if execution.status is ExecutionStatus.FAILED_RETRYABLE:
            claimed = tx.transition_execution(
                execution.execution_id,
                (ExecutionStatus.FAILED_RETRYABLE,),
                ExecutionStatus.RUNNING,
                lease_owner=self.owner,
                lease_seconds=self.retry.lease.total_seconds(),
                count_attempt=True,
            )
        return _Consumed(claimed or execution, claimed is not None)

    def _answer_consumed(
        self, identity: Identity, exc: AlreadyConsumed, consumed: _Consumed | None
    ) -> Receipt:
        """After `_consumed_in` committed: the first result, or the run resumed."""
        if consumed is None:
            raise exc
        execution = consumed.execution
        if execution.status is ExecutionStatus.SUCCEEDED:
            exc.details["receipt"] = execution_outcome(execution).to_dict()
            raise exc
        if consumed.taken_over:
            # Only the request that just took it over resumes it. A running execution
            # under our own lease is another thread of this executor, still in flight.
            spec = self.service.spec_for(execution.operation)
            return self._run_downstream(identity, spec, None, execution, time.perf_counter())
        return execution_outcome(execution)

    # -- audit ------------------------------------------------------------------------

    def _audit_refusal(
        self,
        identity: Identity,
        proposal_id: str | None,
        operation: str | None,
        exc: WritegateError,
        started: float,
    ) -> None:
        with self.store.transaction() as tx:
            tx.insert_audit(execution_refusal_audit(identity, proposal_id, operation, exc, started))


def _handed_over(execution: Execution) -> bool:
    """Claimed for the reconciler after a failover (`_claim`): its lease began over."""
    return (
        execution.status is ExecutionStatus.RUNNING
        and execution.lease_expires_at is not None
        and execution.lease_expires_at <= execution.created_at
    )


__all__ = ["ExecutionFailed", "Executor", "OutcomeUnknown", "RetryPolicy", "outcome_status"]
