"""Execute a confirmed proposal at most once: one path, whichever way the confirm came.

    claim   one transaction, under the proposal's lock: the person's confirm (the graph)
            or the token a client presents (HTTP, MCP, the CLI) is checked against the
            stored snapshot (owner, binding, digest, expiry, policy); the tool's validator
            runs again, then its local part (a reservation, or the whole write when it
            commits with the ledger); then one statement (`LedgerTx.claim`) moves the
            proposal to executed, consumes the token, claims the request key under a
            lease and writes the audit rows;
    call    the downstream with the request key, outside any transaction;
    record  the outcome and the receipt, guarded by the lease.

A confirm may end before the claim, recorded: a proposal past its expiry, a tier that
waits for a second approver. A replay (a second confirm, the token again, a re-run
node) finds the execution and answers with its receipt or its state, audited as a
duplicate. A lost or ambiguous downstream answer leaves the execution `unknown`: it is
never re-run blindly here; `approval/reconcile.py` looks it up by key. A call still
running at its deadline is held by this process until it answers (approval/straggler.py).
The words (claim, lease, straggler, ...) are defined in docs/glossary.md.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from writegate.approval import tracing
from writegate.approval.audit import (
    decision_audit,
    duplicate_audit,
    execution_audit,
    execution_refusal_audit,
)
from writegate.approval.canonical import digest, hash_secret
from writegate.approval.decisions import Confirm
from writegate.approval.downstream import (
    Attempt,
    Overrun,
    RetryPolicy,
    call_with_retries,
    outcome_status,
)
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
    ProposalNotPending,
    ProposalSuperseded,
    Revoked,
    SubjectMismatch,
    TenantMismatch,
    TokenExpired,
    TokenReplaced,
    TokenUnknown,
    WritegateError,
    database_unavailable,
    is_database_outage,
)
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
from writegate.approval.outcomes import execution_outcome, proposal_error
from writegate.approval.risk import requires_fresh_confirmation
from writegate.approval.service import (
    ApprovalService,
    Closed,
    Confirming,
    Executed,
    Reconfirm,
    Waiting,
    new_id,
)
from writegate.approval.spec import DownstreamResult, ToolContext, ToolSpec, acting_for
from writegate.approval.store import Claim, LedgerTx, Locked
from writegate.approval.straggler import Straggler

RUNNING = (ExecutionStatus.RUNNING,)
UNKNOWN = (ExecutionStatus.UNKNOWN,)
# Not settled and not held: the reconciler may claim it at once (its lease is released).
RELEASED = frozenset({ExecutionStatus.UNKNOWN, ExecutionStatus.FAILED_RETRYABLE})


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{new_id('w')}"


@dataclass(frozen=True)
class AwaitingSecond:
    """A confirm at a tier with a second approver: recorded, and nothing runs until an
    approver of the tenant approves; that approval executes it (`approve_as_second`)."""

    proposal: Proposal


@dataclass(frozen=True)
class SecondApproval:
    """A second approver's approval, and the run it finished: `outcome` is the receipt,
    or why the write did not run (`state_changed`, ...) or is not settled yet
    (`outcome_unknown`, `in_progress`); the approval stands either way."""

    proposal: Proposal
    outcome: Receipt | WritegateError

    def outcome_body(self) -> dict[str, Any]:
        """The receipt, or the error's structured body, as every way in shows them."""
        return self.outcome.to_dict()


@dataclass(frozen=True)
class _Confirm:
    """The person's confirm, taken by server-side code (the graph's write node).

    `replayed`, asked only if the confirm is refused: True when this answer was given
    and refused before (a re-run node replays it), so that refusal is not audited twice."""

    decision: Confirm
    operation: str | None = None
    replayed: Callable[[], bool] | None = None

    @property
    def proposal_id(self) -> str:
        return self.decision.proposal_id

    def refused_before(self) -> bool:
        return self.replayed is not None and self.replayed()


@dataclass(frozen=True)
class _Presented:
    """A confirmation token a client presents (HTTP, MCP, the CLI), for its proposal."""

    secret: str
    proposal_id: str | None = None
    operation: str | None = None

    def refused_before(self) -> bool:
        return False  # every presentation is a request of its own, audited


_Entry = _Confirm | _Presented


@dataclass(frozen=True)
class _Run:
    """The claim's result when something runs: a new execution (running, or succeeded
    already for a write that commits with the ledger), or a duplicate that took over a
    run refused for the moment, to call again with its request key."""

    spec: ToolSpec
    execution: Execution
    proposal: Proposal | None


@dataclass(frozen=True)
class _Answer:
    """The claim's result when nothing (more) runs: what the caller is told, after the
    transaction committed what it recorded (an expiry, a duplicate's audit row)."""

    result: Receipt | AwaitingSecond | WritegateError


class Executor:
    def __init__(
        self,
        service: ApprovalService,
        *,
        retry: RetryPolicy | None = None,
        owner: str | None = None,
        step_hook: Callable[[str], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.service = service
        self.store = service.store
        self.retry = retry or RetryPolicy()
        self.owner = owner or default_owner()
        # Called at each step boundary ("claimed", "downstream_returned", "recorded"; and
        # "approved" inside a second approval's transaction, before it commits);
        # the fault-injection suite uses it to kill the process at a precise point.
        self.step_hook = step_hook or (lambda step: None)
        self.sleep = sleep

    def confirm(
        self,
        identity: Identity,
        decision: Confirm,
        operation: str | None = None,
        *,
        replayed: Callable[[], bool] | None = None,
    ) -> Receipt | AwaitingSecond:
        """A person's confirm, taken by server-side code (the graph's write node), and
        the execution it allows, in one chain: no token ever leaves the server.

        `replayed`, asked only if the confirm is refused: True when this answer was
        given and refused before (a re-run node replays its earlier answers), so its
        refusal, audited then, is not audited again."""
        return self._run(identity, _Confirm(decision, operation, replayed))

    def execute(
        self,
        identity: Identity,
        token: str,
        *,
        proposal_id: str | None = None,
        operation: str | None = None,
    ) -> Receipt:
        """Execute with the confirmation token a client presents (HTTP, MCP, CLI)."""
        result = self._run(identity, _Presented(token, proposal_id, operation))
        assert isinstance(result, Receipt)  # a token is issued after any second approval
        return result

    def approve_as_second(self, approver: Identity, proposal_id: str) -> SecondApproval:
        """The last approval finishes the write. In the approval's transaction the write
        is claimed for its requester through the one path (the token just issued is
        consumed at once, the execution held under this process's lease); after the
        commit it is called and recorded here. A process that dies in between leaves a
        claimed execution whose lease runs out: the reconciler looks it up by its key and
        finishes it, once. A claim refused (the state moved while the approver thought)
        is undone alone: the approval stands, and the refusal is the outcome."""
        started = time.perf_counter()
        claimed: list[tuple[Identity, _Run | _Answer]] = []

        def claim_in(tx: LedgerTx, approved: Proposal) -> None:
            requester = Identity(approved.subject, approved.tenant_id)
            claimed.append((requester, self._claim_approved(tx, requester, approved, started)))
            self.step_hook("approved")  # claimed with the approval, not committed yet

        parent = tracing.recall(self.store, proposal_id=proposal_id)
        with tracing.span(
            "writegate.execute", parent, proposal_id=proposal_id, tenant_id=approver.tenant_id
        ):
            approved = self.service.approve_as_second(
                approver, proposal_id, then=claim_in, runs_in=self.owner
            )
            outcome: Receipt | WritegateError
            try:
                ((requester, claim),) = claimed
                done = self._proceed(requester, claim, started)
                assert isinstance(done, Receipt)  # approved: it waits for nobody else
                outcome = done
            except WritegateError as exc:  # committed: the approval stands, this is the run's
                outcome = exc
        with self.store.reading() as tx:
            now = tx.get_proposal(proposal_id, for_update=False)
        return SecondApproval(now or approved, outcome)

    def _claim_approved(
        self, tx: LedgerTx, requester: Identity, approved: Proposal, started: float
    ) -> _Run | _Answer:
        """`approve_as_second`'s claim: the requester's confirm of their proposal, whose
        token the approval issued, under a savepoint, so that a refusal undoes only the
        claim; it is audited and returned, for after the commit."""
        entry = _Confirm(Confirm(action="confirm", proposal_id=approved.proposal_id))
        try:
            with tx.savepoint():
                return self._claim_confirm(tx, requester, entry, started)
        except WritegateError as exc:
            if is_database_outage(exc):
                raise
            refusal = execution_refusal_audit(
                requester, approved.proposal_id, approved.operation, exc, started
            )
            tx.insert_audit(refusal)
            return _Answer(exc)

    # -- the one path -----------------------------------------------------------------

    def _run(self, identity: Identity, entry: _Entry) -> Receipt | AwaitingSecond:
        pid = entry.proposal_id
        by_token = (
            hash_secret(entry.secret) if isinstance(entry, _Presented) and pid is None else None
        )
        parent = tracing.recall(self.store, proposal_id=pid, token_hash=by_token)
        with tracing.span(
            "writegate.execute", parent, proposal_id=pid, tenant_id=identity.tenant_id
        ):
            started = time.perf_counter()
            try:
                with self.store.transaction() as tx:
                    claimed = (
                        self._claim_confirm(tx, identity, entry, started)
                        if isinstance(entry, _Confirm)
                        else self._claim_presented(tx, identity, entry, started)
                    )
            except WritegateError as exc:
                # An outage's audit row could not be written either; a replay's was written.
                if not is_database_outage(exc) and not entry.refused_before():
                    self._audit_refusal(identity, pid, entry.operation, exc, started)
                raise
            return self._proceed(identity, claimed, started)

    def _proceed(
        self, identity: Identity, claimed: _Run | _Answer, started: float
    ) -> Receipt | AwaitingSecond:
        """After the claim committed: its answer, or the call and the record."""
        if isinstance(claimed, _Answer):
            if isinstance(claimed.result, WritegateError):
                raise claimed.result
            return claimed.result
        execution = claimed.execution
        tracing.annotate(
            proposal_id=execution.proposal_id,
            execution_id=execution.execution_id,
            request_key=execution.request_key,
            args_digest=execution.args_digest,
        )
        self.step_hook("claimed")
        if execution.status is ExecutionStatus.SUCCEEDED or _handed_over(execution):
            return execution_outcome(execution)  # a hand-over: in progress, for reconcile
        return self._run_downstream(identity, claimed.spec, claimed.proposal, execution, started)

    def _claim_confirm(
        self, tx: LedgerTx, identity: Identity, entry: _Confirm, started: float
    ) -> _Run | _Answer:
        """The claim of the person's confirm: where the confirm stands (the service's one
        status switch), then the run it allows, or what the caller is told instead."""
        locked = tx.lock_proposal(entry.proposal_id)
        with tracing.span(
            "writegate.decide",
            proposal_id=entry.proposal_id,
            tenant_id=identity.tenant_id,
            action="confirm",
        ):
            stage = self.service.confirm_stage(
                tx, identity, locked.proposal, entry.decision, started, operation=entry.operation
            )
        if isinstance(stage, Confirming):  # issued and consumed by this claim, never shown
            confirmed = decision_audit(identity, stage.proposal, "confirmed", started)
            return self._claim_with(
                tx, identity, stage.proposal, stage.token, locked, started, confirmed
            )
        if isinstance(stage, Reconfirm):  # its token issued before (a second approval)
            token = locked.token
            if token is None or token.status is not TokenStatus.ISSUED:
                return self._duplicate(tx, identity, stage.proposal, locked.execution, started)
            proposal = self._check_token(
                tx, identity, token, locked, entry.proposal_id, entry.operation
            )
            return self._claim_confirmed(tx, identity, proposal, token, locked, started)
        if isinstance(stage, Executed):
            return self._duplicate(tx, identity, stage.proposal, locked.execution, started)
        if isinstance(stage, Waiting):  # confirmed; the approver is next
            if stage.now:
                return _Answer(AwaitingSecond(stage.proposal))
            expired = self.service.expire_if_due(tx, identity, stage.proposal, started)
            return _Answer(expired or AwaitingSecond(stage.proposal))
        if isinstance(stage, Closed):
            status, pid = stage.proposal.status, stage.proposal.proposal_id
            ended = proposal_error(status, pid, stage.proposal.decision_reason)
            raise ended or ProposalNotPending(proposal_id=pid, state=status.value)
        return _Answer(stage)  # expired, recorded

    def _claim_presented(
        self, tx: LedgerTx, identity: Identity, entry: _Presented, started: float
    ) -> _Run | _Answer:
        """The claim of a presented token: checked against its caller and the stored
        snapshot, then the run it allows (or its replay's answer)."""
        presented = tx.get_token(hash_secret(entry.secret))
        if presented is None:
            return self._unknown_token(tx, identity, entry, started)
        proposal_id = entry.proposal_id or presented.proposal_id
        locked = tx.lock_proposal(proposal_id)
        replaced = locked.token is None or locked.token.token_hash != presented.token_hash
        if replaced and presented.proposal_id == proposal_id:
            # Replaced by a later confirm of its proposal after it was read.
            return self._unknown_token(tx, identity, entry, started)
        proposal = self._check_token(tx, identity, presented, locked, proposal_id, entry.operation)
        return self._claim_confirmed(tx, identity, proposal, presented, locked, started)

    def _claim_confirmed(
        self,
        tx: LedgerTx,
        identity: Identity,
        proposal: Proposal,
        token: Token,
        locked: Locked,
        started: float,
    ) -> _Run | _Answer:
        """The claim of a proposal confirmed earlier, with the token issued then."""
        if token.status is TokenStatus.CONSUMED or proposal.status is ProposalStatus.EXECUTED:
            return self._duplicate(tx, identity, proposal, locked.execution, started)
        return self._claim_with(tx, identity, proposal, token, locked, started, None)

    def _claim_with(
        self,
        tx: LedgerTx,
        identity: Identity,
        proposal: Proposal,
        token: Token,
        locked: Locked,
        started: float,
        confirmed: Any,
    ) -> _Run | _Answer:
        """Claim the request key for `token` (issued now when `confirmed`, the confirm's
        audit row, is given), after the tool's validator and local part ran again."""
        if locked.purged:  # rows restored or replayed past a purge never run again
            stone = tx.find_tombstone(request_key=proposal.request_key)
            assert stone is not None
            raise stone.refusal()
        if locked.execution is not None:
            if locked.execution.fingerprint != proposal.fingerprint:
                raise IdempotencyConflict(request_key=proposal.request_key)
            return self._duplicate(tx, identity, proposal, locked.execution, started)
        spec = self.service.spec_for(proposal.operation)
        # Proposed before this database was promoted: it may have been claimed and sent
        # in commits the failover lost (asynchronous replication). Never send it blindly:
        # claimed with its lease already over, the reconciler looks its key up first.
        hand_over = spec.has_downstream and tx.failed_over_since(proposal.created_at)
        now = tx.now()
        execution = execution_of(
            proposal,
            token,
            now,
            status=ExecutionStatus.RUNNING,
            attempts=1,
            lease_owner=self.owner,
            lease_expires_at=now if hand_over else now + self.policy_for(spec).lease,
        )
        # The state must still be what the person saw: the validator runs again, then the
        # local part, in this transaction; a refusal rolls everything back.
        ctx = ToolContext(identity, tx.conn, proposal.thread_id)
        local = spec.apply(
            ctx,
            proposal.args,
            expected_version=proposal.state_version,
            request_key=proposal.request_key,
        )
        audit = [] if confirmed is None else [confirmed]
        if confirmed is not None:  # decided by this very call: its rows name the person
            proposal = replace(proposal, decided_by=identity.user_id, decided_at=now)
        if not spec.has_downstream:  # a write that commits with the ledger: done now
            execution = replace(
                execution, status=ExecutionStatus.SUCCEEDED, result=local, completed_at=now
            )
            audit.append(execution_audit(identity, proposal, execution, started))
        from_status = ProposalStatus.AWAITING if confirmed is not None else ProposalStatus.CONFIRMED
        tx.claim(
            Claim(
                proposal_id=proposal.proposal_id,
                from_status=from_status,
                decided_by=identity.user_id if confirmed is not None else None,
                token=token,
                issue=confirmed is not None,
                execution=execution,
                audit=tuple(audit),
            )
        )
        return _Run(spec, execution, proposal)

    # -- checks -----------------------------------------------------------------------

    def _check_token(
        self,
        tx: LedgerTx,
        identity: Identity,
        token: Token,
        locked: Locked,
        proposal_id: str,
        operation: str | None,
    ) -> Proposal:
        """A token against its caller and the stored snapshot, in the order a refusal
        says the most without naming anything of someone else's; the proposal it was
        presented for. What a token is bound to is its own proposal's (the foreign key
        holds it, nothing is copied to compare back): presented for another proposal, it
        allows nothing there."""
        policy = self.service.policy
        proposal = locked.proposal
        bound = (
            proposal
            if proposal is not None and proposal.proposal_id == token.proposal_id
            else tx.get_proposal(token.proposal_id)
        )
        assert bound is not None  # a token's proposal: the foreign key
        if bound.subject != identity.user_id:
            raise SubjectMismatch()
        if bound.tenant_id != identity.tenant_id:
            raise TenantMismatch()
        if token.audience != policy.audience:
            raise AudienceMismatch(audience=token.audience)
        if operation is not None and operation != bound.operation:
            raise OperationMismatch(expected=operation, token_operation=bound.operation)
        if proposal is None or proposal.tenant_id != identity.tenant_id:
            raise NotFound("no such proposal for this user", proposal_id=proposal_id)
        if proposal.operation != bound.operation:
            raise OperationMismatch(token_operation=bound.operation)
        # Recomputed the way the proposal's digest was written (rows from before JCS).
        executed_digest = digest(proposal.args, proposal.digest_scheme)
        if proposal is not bound or proposal.args_digest != executed_digest:
            raise ArgsMismatch(
                approved_digest=bound.args_digest,
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
            return proposal  # a replay: answered as a duplicate, with the one run's state
        if requires_fresh_confirmation(proposal, token.policy_version, policy):
            raise PolicyChanged(token_policy=token.policy_version, current_policy=policy.version)
        if tx.now() >= token.expires_at:  # right-open: at expires_at it is expired
            raise TokenExpired(
                proposal_id=proposal.proposal_id, expired_at=token.expires_at.isoformat()
            )
        return proposal

    # -- replays and unknown tokens ---------------------------------------------------

    def _duplicate(
        self,
        tx: LedgerTx,
        identity: Identity,
        proposal: Proposal,
        execution: Execution | None,
        started: float,
    ) -> _Run | _Answer:
        """A second use of a confirm or token whose run exists: audited as a duplicate;
        a run refused for the moment (failed_retryable) is taken over, to call again with
        its request key; anything else is reported, never run again."""
        refusal = AlreadyConsumed(
            proposal_id=proposal.proposal_id,
            execution_id=execution.execution_id if execution else None,
        )
        if execution is None or execution.subject != identity.user_id:
            return _Answer(refusal)
        tx.insert_audit(duplicate_audit(identity, proposal, execution, started))
        if execution.status is ExecutionStatus.FAILED_RETRYABLE:
            # Every attempt was refused explicitly ("not applied"): it may be sent again.
            spec = self.service.spec_for(execution.operation)
            policy = self.policy_for(spec)
            taken = tx.transition_execution(
                execution.execution_id,
                (ExecutionStatus.FAILED_RETRYABLE,),
                ExecutionStatus.RUNNING,
                lease_owner=self.owner,
                lease_seconds=policy.lease.total_seconds(),
                count_attempt=True,
            )
            if taken is not None:
                return _Run(spec, taken, None)
        if execution.status is ExecutionStatus.SUCCEEDED:
            refusal.details["receipt"] = execution_outcome(execution).to_dict()
            return _Answer(refusal)
        try:
            return _Answer(execution_outcome(execution))
        except WritegateError as where:  # in progress, unknown, failed: where it stands
            return _Answer(where)

    def _unknown_token(
        self, tx: LedgerTx, identity: Identity, entry: _Presented, started: float
    ) -> _Run | _Answer:
        """Why a presented token is unknown: purged (its tombstone says), replaced by a
        later confirm of the caller's own proposal (answered with where that proposal's
        one run stands), or never issued. Audited in this transaction."""
        stone = tx.find_tombstone(token_hash=hash_secret(entry.secret))
        refusal: WritegateError = (
            stone.refusal() if stone is not None else TokenUnknown(proposal_id=entry.proposal_id)
        )
        if stone is None and entry.proposal_id is not None:
            locked = tx.lock_proposal(entry.proposal_id)
            proposal = locked.proposal
            if proposal is not None and (proposal.subject, proposal.tenant_id) == (
                identity.user_id,
                identity.tenant_id,
            ):
                if locked.execution is not None:
                    return self._duplicate(tx, identity, proposal, locked.execution, started)
                if proposal.status is ProposalStatus.CONFIRMED:
                    refusal = TokenReplaced(proposal_id=proposal.proposal_id)
        tx.insert_audit(
            execution_refusal_audit(identity, entry.proposal_id, entry.operation, refusal, started)
        )
        return _Answer(refusal)

    # -- downstream and record --------------------------------------------------------

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
            outcome = self.send(spec, execution)
        self.step_hook("downstream_returned")
        final = self.finish(identity, spec, execution, outcome, proposal=proposal, started=started)
        self.step_hook("recorded")
        return execution_outcome(final)

    def policy_for(self, spec: ToolSpec) -> RetryPolicy:
        """The tool's own retry policy (`write_tool(retry=...)`), else this executor's."""
        return spec.retry if spec.retry is not None else self.retry

    def send(self, spec: ToolSpec, execution: Execution) -> DownstreamResult | WritegateError:
        """Call the downstream for `execution` under the tool's retry policy (see
        approval/downstream.py); our lease is renewed to cover each second send."""
        policy = self.policy_for(spec)
        return call_with_retries(
            spec,
            execution.args,
            execution.request_key,
            policy,
            hold=lambda: self.renew(execution, policy),
            sleep=self.sleep,
        )

    def renew(self, execution: Execution, policy: RetryPolicy) -> bool:
        """Extend our lease on a running execution by `policy.lease`, right before a
        send; False if it is not ours any more (then nothing may be sent)."""
        with self.store.transaction() as tx:
            kept = tx.transition_execution(
                execution.execution_id,
                RUNNING,
                ExecutionStatus.RUNNING,
                require_owner=self.owner,
                lease_seconds=policy.lease.total_seconds(),
            )
        return kept is not None

    def finish(
        self,
        identity: Identity,
        spec: ToolSpec,
        execution: Execution,
        outcome: DownstreamResult | WritegateError,
        *,
        proposal: Proposal | None = None,
        started: float | None = None,
    ) -> Execution:
        """T2: record the outcome of our running execution; if we lost the lease, report
        what is there. An attempt still running (`Overrun`) is held until it answers.
        Our claim gone altogether means a promotion lost its commit: the database we
        claimed on is away for us, as in an outage; the retry's claim is looked up first
        (a hand-over), so what the downstream did is found by its key."""
        with tracing.span("writegate.record"), self.store.transaction() as tx:
            done = self.record(
                tx, identity, spec, execution, outcome, RUNNING, proposal=proposal, started=started
            )
            final = done or tx.get_execution(execution_id=execution.execution_id)
        if final is None:
            raise database_unavailable()
        if done is not None and isinstance(outcome, Overrun):
            self.hold(identity, spec, done, outcome.attempt)
        return final

    def record(
        self,
        tx: LedgerTx,
        identity: Identity,
        spec: ToolSpec,
        execution: Execution,
        outcome: DownstreamResult | WritegateError,
        expected: tuple[ExecutionStatus, ...],
        *,
        proposal: Proposal | None = None,
        started: float | None = None,
    ) -> Execution | None:
        """Write the outcome, guarded by our lease and `expected`; None if either changed
        (someone else took it over: don't overwrite what they wrote).

        A call still running keeps the lease; one that ended unsettled releases it, so
        the reconciler may take it at once."""
        provider_ref, result, error_code = None, None, None
        new = outcome_status(outcome)
        if isinstance(outcome, DownstreamResult):
            provider_ref, result = outcome.provider_ref, outcome.result
        else:
            error_code = outcome.code
        lease: float | None = None
        if isinstance(outcome, Overrun):
            lease = self.policy_for(spec).lease.total_seconds()
        elif new in RELEASED:
            lease = 0.0
        # The audit row says what the change makes of the execution, and is written by
        # the same statement, only if the change is made: one statement records it all.
        recorded = replace(
            execution,
            status=new,
            result=result if result is not None else execution.result,
            error_code=error_code,
        )
        done = tx.transition_execution(
            execution.execution_id,
            expected,
            new,
            require_owner=self.owner,
            lease_seconds=lease,
            provider_ref=provider_ref,
            result=result,
            error_code=error_code,
            audit=execution_audit(identity, proposal, recorded, started or time.perf_counter()),
        )
        if done is None:
            return None
        ctx = ToolContext(identity, tx.conn)
        if isinstance(outcome, DownstreamResult):
            spec.on_downstream_success(ctx, execution.args, execution.request_key, outcome)
        elif new is ExecutionStatus.FAILED_TERMINAL:
            spec.compensate(ctx, execution.args, execution.request_key)
        return done

    def hold(
        self, identity: Identity, spec: ToolSpec, execution: Execution, attempt: Attempt
    ) -> None:
        """Keep `execution` (unknown, under our lease) while `attempt` runs past its
        deadline, and record the attempt's answer when it ends (approval/straggler.py)."""

        def settle(tx: LedgerTx, outcome: DownstreamResult | WritegateError) -> Execution | None:
            # An answer that settles nothing leaves an escalated execution with the person.
            ended_ambiguous = outcome_status(outcome) is ExecutionStatus.UNKNOWN
            late = UNKNOWN if ended_ambiguous else (*UNKNOWN, ExecutionStatus.ESCALATED)
            return self.record(tx, identity, spec, execution, outcome, late)

        Straggler(self.store, execution, self.owner, attempt, self.policy_for(spec), settle).start()

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


def execution_of(proposal: Proposal, token: Token, now: datetime, **state: Any) -> Execution:
    """The execution a claim of `proposal` with `token` makes at `now`; `state`: its
    status, attempts, lease, and for one recorded settled at once, its result."""
    return Execution(
        execution_id=new_id("exec"),
        request_key=proposal.request_key,
        token_hash=token.token_hash,
        proposal_id=proposal.proposal_id,
        tenant_id=proposal.tenant_id,
        subject=proposal.subject,
        operation=proposal.operation,
        resource=proposal.resource,
        args=proposal.args,
        args_digest=proposal.args_digest,
        digest_scheme=proposal.digest_scheme,
        fingerprint=proposal.fingerprint,
        created_at=now,
        updated_at=now,
        **state,
    )


def _handed_over(execution: Execution) -> bool:
    """Claimed for the reconciler after a failover (`_claim_with`): its lease began over."""
    return (
        execution.status is ExecutionStatus.RUNNING
        and execution.lease_expires_at is not None
        and execution.lease_expires_at <= execution.created_at
    )


__all__ = [
    "AwaitingSecond",
    "ExecutionFailed",
    "Executor",
    "OutcomeUnknown",
    "RetryPolicy",
    "SecondApproval",
    "outcome_status",
]
