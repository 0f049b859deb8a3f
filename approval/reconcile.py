"""Reconciliation: settle executions whose outcome nobody knows, by asking the downstream.

Candidates are `unknown` executions (a timeout, a lost answer), `failed_retryable` ones
(explicit "not applied" refusals) and `running` ones whose lease expired (the worker
died or hangs), of the tools registered with this reconciler: another application's
tools are left to the process that runs them. An execution whose lease is still held
(a call past its deadline, still running in the process that holds it) is not a
candidate. An expired lease proves nothing about the old worker, so a candidate is
never simply re-run: the reconciler claims it with a lease of its own and

- records the success with the provider's reference when the tool's lookup finds it;
- sends it again with the SAME request key when the lookup says it never saw the key,
  when every earlier attempt was refused as "not applied", or when the tool declared
  `dedupes_by_key` (its downstream drops a repeated key) and has no lookup;
- marks it `escalated` for a person when nobody can tell: the lookup keeps failing,
  the provider's record disagrees with ours, the key is older than the downstream
  keeps keys (a "never seen" or a deduplication would then prove nothing), or the tool
  has no lookup and does not deduplicate (`no_lookup`): then it is never re-sent.

After a promotion of the database, each round first checks, once, what the commits the
failover lost had done (approval/failover.py). Every transition, the claim included,
writes an audit row with event `reconcile`.
Storage is behind `BacklogStore` (PostgreSQL: `checkpoints/ops.py`, where several
workers claim with `FOR UPDATE SKIP LOCKED`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypedDict

from writegate.approval import tracing
from writegate.approval.audit import RECONCILER, reconcile_audit
from writegate.approval.downstream import Attempt, Overrun
from writegate.approval.errors import NotFound, WritegateError
from writegate.approval.execution import Executor, RetryPolicy, default_owner, outcome_status
from writegate.approval.failover import FailoverCheck
from writegate.approval.models import AuditRecord, Execution, ExecutionStatus, Identity, Receipt
from writegate.approval.outcomes import execution_outcome
from writegate.approval.service import ApprovalService
from writegate.approval.spec import DownstreamResult, ToolContext, ToolSpec, acting_for
from writegate.approval.store import BacklogItem, BacklogStore, FailoverStore, LedgerStore

ACTOR = RECONCILER


@dataclass(frozen=True)
class ReconcilePolicy:
    lease: timedelta = timedelta(seconds=60)
    max_checks: int = 6  # checks of one execution (not claims) before a person must decide
    backoff: float = 5.0  # seconds before the next check, doubled per check
    max_backoff: float = 600.0
    # How long the downstream remembers idempotency keys: past it, "never seen" is
    # no proof of "never applied", so such an execution is escalated, not re-sent.
    key_retention: timedelta = timedelta(hours=24)
    # After a promotion (approval/failover.py): how far before it the commits it lost may
    # reach. Proposals still open then are looked up, and the downstream's listing of
    # what it applied starts there; a wider window costs only a longer listing.
    failover_lookback: timedelta = timedelta(minutes=10)

    def delay(self, checks: int) -> float:
        return float(min(self.backoff * 2 ** max(checks - 1, 0), self.max_backoff))


@dataclass(frozen=True)
class Settled:
    execution_id: str
    request_key: str
    previous_status: str
    status: str
    action: str  # found | retried | deferred | escalated | lost_lease


def owned_execution(
    store: LedgerStore,
    identity: Identity,
    proposal_id: str | None = None,
    *,
    execution_id: str | None = None,
) -> Execution:
    """An execution (by proposal or execution id) as its subject sees it.

    The one ownership rule for executions: another user's or tenant's looks missing.
    """
    if (proposal_id is None) == (execution_id is None):
        raise ValueError("give exactly one of proposal_id and execution_id")
    with store.transaction() as tx:
        execution = tx.get_execution(proposal_id=proposal_id, execution_id=execution_id)
    if (
        execution is None
        or execution.subject != identity.user_id
        or execution.tenant_id != identity.tenant_id
    ):
        raise NotFound(
            "no such execution for this user", proposal_id=proposal_id, execution_id=execution_id
        )
    return execution


def receipt_for(
    store: LedgerStore,
    identity: Identity,
    proposal_id: str | None = None,
    *,
    execution_id: str | None = None,
) -> Receipt:
    """The final receipt of an execution (by proposal or execution id), for its subject.

    Raises what the execution's state means (OutcomeUnknown while reconciling,
    InProgress, the failure's code); a stranger's execution looks missing. A thread
    that was told `outcome_unknown` calls this on a later turn to show the result.
    """
    return execution_outcome(
        owned_execution(store, identity, proposal_id, execution_id=execution_id)
    )


class ReconcilerOptions(TypedDict, total=False):
    """`Reconciler`'s keyword arguments (and `Writegate.reconciler`'s), each optional."""

    policy: ReconcilePolicy
    """How often it checks, when it escalates, how long keys are kept."""
    retry: RetryPolicy
    """The deadline and retries of a send again (default: the executor's)."""
    owner: str
    """Its name on the leases it takes (default: host, process and a random id)."""
    step_hook: Callable[[str], None]
    """Called at each step; the fault-injection tests stop a process there."""
    sleep: Callable[[float], None]
    """How it waits between retries (default `time.sleep`)."""


class Reconciler:
    def __init__(
        self,
        service: ApprovalService,
        backlog: BacklogStore,
        *,
        policy: ReconcilePolicy | None = None,
        retry: RetryPolicy | None = None,
        owner: str | None = None,
        step_hook: Callable[[str], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.service = service
        self.backlog = backlog
        self.policy = policy or ReconcilePolicy()
        self.owner = owner or "reconciler:" + default_owner()
        # The retry path reuses the executor's rules: same key, transient codes only.
        self.executor = Executor(service, retry=retry, owner=self.owner, sleep=sleep)
        self.step_hook = step_hook or (lambda step: None)
        # Only executions of these tools are claimed: another application's stay its own.
        self.operations = tuple(service.tools.names())
        self.failovers = self._failover_check(backlog.failovers)

    def _failover_check(self, store: FailoverStore) -> FailoverCheck:
        """The check after a promotion, for our tools that call a downstream. It starts
        once a call sent before the promotion has had its deadline: the longest lease."""
        specs = [self.service.spec_for(name) for name in self.operations]
        called = [spec for spec in specs if spec.has_downstream]
        leases = [self.executor.policy_for(spec).lease for spec in called]
        return FailoverCheck(
            self.service,
            store,
            owner=self.owner,
            operations=[spec.name for spec in called],
            settle=max(leases, default=timedelta(0)),
            lease=self.policy.lease,
            lookback=self.policy.failover_lookback,
            max_checks=self.policy.max_checks,
            delay=self.policy.delay,
        )

    def run_once(self, limit: int = 20) -> list[Settled]:
        """After a promotion not checked yet, its check first (approval/failover.py);
        then claim one batch of due candidates and settle each; [] when none is due."""
        found = [
            Settled(o.execution_id, o.request_key, o.previous_status, o.status, o.action)
            for o in self.failovers.run()
        ]
        items = self.backlog.claim_due(
            self.owner,
            operations=self.operations,
            lease_seconds=self.policy.lease.total_seconds(),
            limit=limit,
            audit=self._claim_audit,
        )
        return found + [self.reconcile(item) for item in items]

    def left_to_others(self) -> dict[str, int]:
        """Due executions of tools this reconciler does not run, by tool: left alone."""
        return self.backlog.due_elsewhere(self.operations)

    def drain(self, limit: int = 20, max_batches: int = 1000) -> list[Settled]:
        """Run batches until nothing is due (deferred work waits for its next check)."""
        done: list[Settled] = []
        for _ in range(max_batches):
            batch = self.run_once(limit)
            if not batch:
                break
            done.extend(batch)
        return done

    def reconcile(self, item: BacklogItem) -> Settled:
        execution = item.execution
        parent = tracing.recall(self.service.store, proposal_id=execution.proposal_id)
        with tracing.span(
            "writegate.reconcile",
            parent,
            proposal_id=execution.proposal_id,
            execution_id=execution.execution_id,
            request_key=execution.request_key,
            tenant_id=execution.tenant_id,
            args_digest=execution.args_digest,
        ):
            return self._reconcile(item)

    def _reconcile(self, item: BacklogItem) -> Settled:
        execution = item.execution
        self.step_hook("claimed")
        spec = self.service.spec_for(execution.operation)  # claimed: one of our tools
        if spec.has_lookup:
            try:
                with acting_for(Identity(execution.subject, execution.tenant_id)):
                    found = spec.lookup_downstream(execution.args, execution.request_key)
            except Exception as exc:  # cannot tell: try later, then hand it to a person
                code = exc.code if isinstance(exc, WritegateError) else type(exc).__name__
                return self._defer(item, ExecutionStatus.UNKNOWN, code, "lookup_failed")
            self.step_hook("looked_up")
            if found is not None:
                if not found.agrees_with(execution.args):
                    return self._escalate(
                        item, {"reason": "provider_mismatch", "provider_result": found.result}
                    )
                return self._settle(item, found, "found")
        elif item.previous_status == ExecutionStatus.FAILED_RETRYABLE.value:
            return self._send_again(item, spec)  # every attempt was refused: none applied
        elif not spec.dedupes_by_key:
            # Nobody can tell whether it applied: sending it again could do it twice.
            return self._escalate(item, {"reason": "no_lookup"})
        # From here a second send relies on the downstream's memory of keys: its lookup
        # said "never seen", or it drops a repeated key. Both hold only while it keeps them.
        if item.age_seconds > self.policy.key_retention.total_seconds():
            return self._escalate(item, {"reason": "key_may_have_expired_downstream"})
        return self._send_again(item, spec)

    def _send_again(self, item: BacklogItem, spec: ToolSpec) -> Settled:
        """The same request key, once more; our lease is renewed first, to cover the send."""
        execution = item.execution
        if not self.executor.renew(execution, self.executor.policy_for(spec)):
            return self._lost(item)
        identity = Identity(execution.subject, execution.tenant_id)
        with acting_for(identity):
            outcome = self.executor.send(spec, execution)
        self.step_hook("downstream_returned")
        if isinstance(outcome, Overrun):  # still running: kept by us until it answers
            held = (spec, outcome.attempt)
            return self._defer(item, ExecutionStatus.UNKNOWN, outcome.code, "still_running", held)
        return self._settle(item, outcome, "retried", spec)

    # -- transitions, each guarded by our lease and audited -----------------------------

    def _settle(
        self,
        item: BacklogItem,
        outcome: DownstreamResult | WritegateError,
        action: str,
        spec: ToolSpec | None = None,
    ) -> Settled:
        new = outcome_status(outcome)
        if new in (ExecutionStatus.UNKNOWN, ExecutionStatus.FAILED_RETRYABLE):
            assert isinstance(outcome, WritegateError)
            return self._defer(item, new, outcome.code, action)
        execution = item.execution
        with self.service.store.transaction() as tx:
            if isinstance(outcome, DownstreamResult):
                done = self.backlog.settle(
                    tx,
                    execution.execution_id,
                    self.owner,
                    new,
                    provider_ref=outcome.provider_ref,
                    result=outcome.result,
                )
            else:
                done = self.backlog.settle(
                    tx, execution.execution_id, self.owner, new, error_code=outcome.code
                )
            if done is None:
                return self._lost(item)
            spec = spec or self.service.spec_for(execution.operation)
            ctx = ToolContext(Identity(execution.subject, execution.tenant_id), tx.conn)
            if isinstance(outcome, DownstreamResult):
                spec.on_downstream_success(ctx, execution.args, execution.request_key, outcome)
            elif new is ExecutionStatus.FAILED_TERMINAL:
                spec.compensate(ctx, execution.args, execution.request_key)
            tx.insert_audit(self._audit(item, done, action))
        self.step_hook("recorded")
        return self._result(item, done, action)

    def _defer(
        self,
        item: BacklogItem,
        status: ExecutionStatus,
        error_code: str | None,
        action: str,
        held: tuple[ToolSpec, Attempt] | None = None,
    ) -> Settled:
        """Check again later, or past `max_checks` hand it to a person. `held`: our send,
        still running past its deadline; we keep the lease while it runs and record its
        answer when it ends (approval/straggler.py); the next check comes after that."""
        if held is None and item.checks >= self.policy.max_checks:
            return self._escalate(
                item, {"reason": "still_ambiguous", "checks": item.checks, "last_error": error_code}
            )
        execution = item.execution
        hold_seconds = self.executor.policy_for(held[0]).lease.total_seconds() if held else 0.0
        with self.service.store.transaction() as tx:
            done = self.backlog.defer(
                tx,
                execution.execution_id,
                self.owner,
                status,
                delay_seconds=self.policy.delay(item.checks),
                error_code=error_code,
                hold_seconds=hold_seconds,
            )
            if done is None:
                return self._lost(item)
            tx.insert_audit(self._audit(item, done, f"deferred:{action}"))
        if held is not None:
            identity = Identity(execution.subject, execution.tenant_id)
            self.executor.hold(identity, held[0], done, held[1])
        return self._result(item, done, "deferred")

    def _escalate(self, item: BacklogItem, reason: dict[str, Any]) -> Settled:
        with self.service.store.transaction() as tx:
            done = self.backlog.escalate(tx, item.execution.execution_id, self.owner, reason)
            if done is None:
                return self._lost(item)
            tx.insert_audit(self._audit(item, done, "escalated", reason))
        return self._result(item, done, "escalated")

    def _lost(self, item: BacklogItem) -> Settled:
        """Someone took the execution over after our lease ran out: write nothing."""
        e = item.execution
        return Settled(e.execution_id, e.request_key, item.previous_status, "?", "lost_lease")

    @staticmethod
    def _result(item: BacklogItem, done: Execution, action: str) -> Settled:
        return Settled(
            done.execution_id, done.request_key, item.previous_status, done.status.value, action
        )

    def _claim_audit(self, item: BacklogItem) -> AuditRecord:
        return self._audit(item, item.execution, "claimed")

    def _audit(
        self,
        item: BacklogItem,
        execution: Execution,
        action: str,
        reason: dict[str, Any] | None = None,
    ) -> AuditRecord:
        detail: dict[str, Any] = {
            "action": action,
            "from": item.previous_status,
            "check": item.checks,
            "worker": self.owner,
        }
        if execution.provider_ref:
            detail["provider_ref"] = execution.provider_ref
        if reason:
            detail["escalation"] = reason
        return reconcile_audit(execution, ACTOR, detail)
