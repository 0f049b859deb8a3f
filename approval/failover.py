"""After a promotion: what the commits a failover lost had done, found again by key.

With asynchronous replication a promoted standby may lack the old primary's last
commits: a person's confirm, the claim and the downstream call of an operation can be
gone from the ledger while the downstream applied it. A confirm that comes again is
looked up first by the claim itself (approval/execution.py hands it to the
reconciler). What nobody asks about again is found here, by the reconciler, once per
promotion and tool:

- P: the proposal is here, its confirm and claim were lost, and nobody answers it
  again; it waits (or lapsed, or was decided again since). Its key is looked up.
  Applied downstream: recorded as it happened, executed and succeeded with the
  downstream's reference, in one claim by `system:reconciler` (a token issued and
  consumed at once, the tool's local part made again, then its success bookkeeping),
  audited with why. A later confirm, the thread's next turn and the approvals page
  then show that receipt, and nothing is sent again. Never seen: it stays as it is (a
  later confirm is looked up first anyway). A tool without a lookup: its listing (V)
  decides if it has one, else a person is asked (`no_lookup`).
- V: the proposal was lost too, and only the downstream has the effect. A tool whose
  downstream can list what it applied (`write_tool(applied_since=...)`) is asked for
  everything since shortly before the promotion (`ReconcilePolicy.failover_lookback`);
  each of the tool's own request keys the ledger has no record of is escalated to a
  person with what the downstream says.

A check starts once calls sent before the promotion have had their deadline (the
longest lease of the reconciler's tools): a claim the failover lost may still have its
call on the way. What a person must settle and no execution row carries is a failover
escalation (`writegate escalations`), said once. A lookup or a listing that fails has
the check made again later, with the reconciler's backoff; at the last of `max_checks`
attempts what is still unknown goes to a person too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from writegate.approval.audit import RECONCILER, failover_audit, reconcile_audit
from writegate.approval.canonical import new_secret
from writegate.approval.errors import WritegateError, is_database_outage
from writegate.approval.execution import execution_of
from writegate.approval.models import (
    ExecutionStatus,
    Identity,
    Proposal,
    ProposalStatus,
    TokenStatus,
)
from writegate.approval.service import ApprovalService
from writegate.approval.spec import DownstreamResult, ToolContext, ToolSpec, acting_for
from writegate.approval.store import Claim, FailoverEscalation, FailoverStore, Promotion

FOUND = "found_after_failover"
# What each reason tells the person who reads the escalation (and the audit row).
WHY = {
    FOUND: "its confirm and claim were in the commits the failover lost; the downstream "
    "had applied its request key, so that is recorded, and nothing is sent again",
    "applied_downstream_not_in_ledger": "the downstream applied this writegate request "
    "key, and the ledger has no record of it: the failover lost its proposal whole",
    "applied_downstream": "the downstream lists this key as applied, but its confirm "
    "and claim were lost and the tool has no lookup to record the result with",
    "no_lookup": "it may have been confirmed and sent in the commits the failover lost; "
    "the tool has no lookup and its downstream cannot list what it applied",
    "lookup_failed": "it may have been confirmed and sent in the commits the failover "
    "lost, and the lookup of its key kept failing",
    "downstream_disagrees": "the downstream lists this key as applied, but its lookup "
    "says it never saw it",
    "provider_mismatch": "the downstream applied this key, with arguments that differ "
    "from the proposal's",
    "local_part_refused": "the downstream applied it, but the tool's local part cannot "
    "be made again as the person saw it (the state changed here since)",
    "ended_here": "the downstream applied it, but here its confirmation was revoked",
    "listing_failed": "the downstream's listing of what it applied kept failing: "
    "compare its records since `since` with the ledger by hand",
}


@dataclass(frozen=True)
class Outcome:
    """What a check did about one request key."""

    request_key: str
    previous_status: str  # the proposal's here; "" for a key the ledger does not know
    status: str  # succeeded | escalated
    action: str  # found_after_failover | escalated
    execution_id: str = ""


class _Unanswered(Exception):
    """A lookup or a listing failed: the check is made again later."""


class _Unrecordable(Exception):
    """Applied downstream, but the ledger here cannot take the record: for a person."""

    def __init__(self, reason: dict[str, Any]) -> None:
        super().__init__(reason["reason"])
        self.reason = reason


def key_tenant(request_key: str, operation: str) -> str | None:
    """The tenant named in one of `operation`'s request keys (`operation:tenant:...`)."""
    rest = request_key[len(operation) + 1 :]
    return rest.split(":", 1)[0] or None


def _code(exc: Exception) -> str:
    return exc.code if isinstance(exc, WritegateError) else type(exc).__name__


class FailoverCheck:
    """The check after a promotion, for the tools `operations` (see the module docstring)."""

    def __init__(
        self,
        service: ApprovalService,
        store: FailoverStore,
        *,
        owner: str,
        operations: Sequence[str],
        settle: timedelta,
        lease: timedelta,
        lookback: timedelta,
        max_checks: int,
        delay: Callable[[int], float],
    ) -> None:
        self.service = service
        self.store = store
        self.owner = owner
        self.operations = tuple(operations)
        self.settle, self.lease, self.lookback = settle, lease, lookback
        self.max_checks = max_checks
        self.delay = delay

    def run(self) -> list[Outcome]:
        """Check the promotions due a check, if any; [] when there are none."""
        if not self.operations:
            return []
        promotion = self.store.claim_check(
            self.owner,
            operations=self.operations,
            settle_seconds=self.settle.total_seconds(),
            lease_seconds=self.lease.total_seconds(),
        )
        if promotion is None:
            return []
        since = promotion.first_began - self.lookback
        final = promotion.attempt >= self.max_checks
        done: list[Outcome | None] = []
        try:
            listed = self._listings(promotion, since, final)
            for proposal in self.store.open_before(promotion, since):
                done.append(self._proposal(promotion, proposal, listed, final))
            for operation, records in listed.items():
                done.extend(self._lost_whole(promotion, operation, records))
        except _Unanswered:
            retry = self.delay(promotion.attempt)
            self.store.end_check(promotion, self.owner, retry_seconds=retry)
        else:
            self.store.end_check(promotion, self.owner, retry_seconds=None)
        return [outcome for outcome in done if outcome is not None]

    def _listings(
        self, promotion: Promotion, since: datetime, final: bool
    ) -> dict[str, dict[str, dict[str, Any]]]:
        """Per tool that can list, its own keys its downstream applied since `since`."""
        listed: dict[str, dict[str, dict[str, Any]]] = {}
        for operation in promotion.operations:
            spec = self.service.spec_for(operation)
            if not spec.has_applied_since:
                continue
            try:
                records = spec.applied_downstream_since(since)
            except Exception as exc:
                if not final:
                    raise _Unanswered from exc
                reason = {"reason": "listing_failed", "since": since.isoformat()}
                self._escalate(
                    promotion, operation, None, None, {**reason, "last_error": _code(exc)}
                )
                continue
            prefix = operation + ":"  # another client's keys at the same downstream: not ours
            listed[operation] = {k: v for k, v in records.items() if k.startswith(prefix)}
        return listed

    def _proposal(
        self,
        promotion: Promotion,
        proposal: Proposal,
        listed: dict[str, dict[str, dict[str, Any]]],
        final: bool,
    ) -> Outcome | None:
        """Case P: look the proposal's key up, and record or escalate what it says."""
        spec = self.service.spec_for(proposal.operation)
        records = listed.get(proposal.operation)
        record = None if records is None else records.get(proposal.request_key)
        reason: dict[str, Any]
        if not spec.has_lookup:
            if records is None:
                return self._escalate_proposal(promotion, proposal, {"reason": "no_lookup"})
            if record is None:
                return None  # its downstream lists no such effect: it never ran
            reason = {"reason": "applied_downstream", "downstream": record}
            return self._escalate_proposal(promotion, proposal, reason)
        try:
            with acting_for(Identity(proposal.subject, proposal.tenant_id)):
                found = spec.lookup_downstream(proposal.args, proposal.request_key)
        except Exception as exc:
            if not final:
                raise _Unanswered from exc
            reason = {
                "reason": "lookup_failed",
                "last_error": _code(exc),
                "checks": promotion.attempt,
            }
            return self._escalate_proposal(promotion, proposal, reason)
        if found is None:
            if record is None:
                return None  # never applied: it waits for the person, as it is
            reason = {"reason": "downstream_disagrees", "downstream": record}
            return self._escalate_proposal(promotion, proposal, reason)
        if not found.agrees_with(proposal.args):
            reason = {"reason": "provider_mismatch", "provider_result": found.result}
            return self._escalate_proposal(promotion, proposal, reason)
        try:
            return self._record(promotion, spec, proposal, found)
        except _Unrecordable as exc:
            return self._escalate_proposal(promotion, proposal, exc.reason)

    def _record(
        self, promotion: Promotion, spec: ToolSpec, proposal: Proposal, found: DownstreamResult
    ) -> Outcome | None:
        """What the downstream applied, recorded as the claim the failover lost would
        have ended: one transaction under the proposal's lock. None: claimed meanwhile
        (a person's confirm, another reconciler), so it is theirs to finish."""
        try:
            with self.service.store.transaction() as tx:
                locked = tx.lock_proposal(proposal.proposal_id)
                here = locked.proposal
                if here is None or locked.purged or locked.execution is not None:
                    return None
                if here.status is ProposalStatus.EXECUTED:
                    return None
                token, issue = locked.token, locked.token is None
                if token is None:
                    token = self.service.new_token(tx, here, new_secret())
                elif token.status is not TokenStatus.ISSUED:
                    state = {"state": here.status.value, "provider_result": found.result}
                    raise _Unrecordable({"reason": "ended_here", **state})
                ctx = ToolContext(Identity(here.subject, here.tenant_id), tx.conn, here.thread_id)
                key = here.request_key
                spec.apply(ctx, here.args, expected_version=here.state_version, request_key=key)
                now = tx.now()
                execution = execution_of(
                    here,
                    token,
                    now,
                    status=ExecutionStatus.SUCCEEDED,
                    provider_ref=found.provider_ref,
                    result=found.result,
                    completed_at=now,
                )
                detail = {
                    "action": FOUND,
                    "why": WHY[FOUND],
                    "from": here.status.value,
                    "provider_ref": found.provider_ref,
                    "timeline": promotion.timeline,
                    "worker": self.owner,
                }
                # A person's own confirm stays theirs (a token issued, or a second
                # approver awaited); any other state was not a confirm that reached here.
                confirmed = here.status in (
                    ProposalStatus.CONFIRMED,
                    ProposalStatus.AWAITING_SECOND,
                )
                tx.claim(
                    Claim(
                        proposal_id=here.proposal_id,
                        from_status=here.status,
                        decided_by=None if confirmed else RECONCILER,
                        token=token,
                        issue=issue,
                        execution=execution,
                        audit=(reconcile_audit(execution, RECONCILER, detail),),
                    )
                )
                spec.on_downstream_success(ctx, here.args, key, found)
        except WritegateError as exc:
            if is_database_outage(exc):
                raise
            reason = {"error": exc.to_dict(), "provider_result": found.result}
            raise _Unrecordable({"reason": "local_part_refused", **reason}) from exc
        return Outcome(
            key, here.status.value, execution.status.value, FOUND, execution.execution_id
        )

    def _lost_whole(
        self, promotion: Promotion, operation: str, records: dict[str, dict[str, Any]]
    ) -> list[Outcome | None]:
        """Case V: each key the downstream applied that the ledger has no record of."""
        unknown = self.store.unknown_keys(list(records))
        return [
            self._escalate(
                promotion,
                operation,
                key,
                None,
                {"reason": "applied_downstream_not_in_ledger", "downstream": records[key]},
            )
            for key in sorted(unknown)
        ]

    def _escalate_proposal(
        self, promotion: Promotion, proposal: Proposal, reason: dict[str, Any]
    ) -> Outcome | None:
        return self._escalate(promotion, proposal.operation, proposal.request_key, proposal, reason)

    def _escalate(
        self,
        promotion: Promotion,
        operation: str,
        request_key: str | None,
        proposal: Proposal | None,
        reason: dict[str, Any],
    ) -> Outcome | None:
        """For a person, once; None if it was escalated already (or names no key)."""
        reason = {**reason, "why": WHY[reason["reason"]]}
        if proposal is not None:
            tenant: str | None = proposal.tenant_id
        elif request_key is not None:
            tenant = key_tenant(request_key, operation)
        else:
            tenant = None
        escalation = FailoverEscalation(
            request_key,
            operation,
            tenant,
            proposal.proposal_id if proposal else None,
            promotion.timeline,
            reason,
        )
        if request_key is None or tenant is None:  # the check itself: no tenant's trail
            self.store.escalate(escalation, None)
            return None
        detail = {"action": "escalated", "escalation": reason, "worker": self.owner}
        audit = failover_audit(
            tenant, operation, request_key, proposal, {**detail, "timeline": promotion.timeline}
        )
        if not self.store.escalate(escalation, audit):
            return None
        previous = proposal.status.value if proposal else ""
        return Outcome(request_key, previous, "escalated", "escalated")


__all__ = ["FOUND", "FailoverCheck", "Outcome", "key_tenant"]
