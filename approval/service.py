"""Propose, decide and read: everything before the side effect.

Nothing here changes the world outside the ledger. A proposal freezes canonical
arguments, the state version the validator saw and the preview; a confirmation issues
a one-time token bound to all of it. Execution lives in `approval/execution.py`.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from approval.canonical import digest, hash_secret, request_fingerprint
from approval.decisions import Cancel, Confirm, Decline, Edit
from approval.errors import (
    AlreadyConsumed,
    IdempotencyConflict,
    InProgress,
    NotFound,
    OutcomeUnknown,
    ProposalExpired,
    ProposalNotPending,
    ValidationFailed,
    WritegateError,
)
from approval.models import (
    AuditRecord,
    ExecutionStatus,
    Identity,
    Proposal,
    ProposalStatus,
    Token,
    TokenStatus,
)
from approval.spec import ToolContext, ToolLookup, ToolSpec
from approval.store import LedgerStore, LedgerTx


@dataclass(frozen=True)
class Policy:
    """Audience and lifetimes. Tokens and proposals record the version they were made under."""

    version: str = "v1"
    audience: str = "writegate"
    proposal_ttl: timedelta = timedelta(minutes=15)
    token_ttl: timedelta = timedelta(minutes=5)


@dataclass(frozen=True)
class Confirmation:
    """A confirm's result. `token` is shown once; the ledger keeps only its hash."""

    proposal: Proposal
    token: str
    expires_at: Any


@dataclass(frozen=True)
class Ended:
    """A decline or cancel: the proposal's final state."""

    proposal: Proposal


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(12)}"


def _elapsed_ms(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)


class ApprovalService:
    def __init__(self, store: LedgerStore, tools: ToolLookup, policy: Policy | None = None):
        self.store = store
        self.tools = tools
        self.policy = policy or Policy()

    # -- reads ------------------------------------------------------------------------

    def read(
        self,
        identity: Identity,
        tool_name: str,
        raw_args: dict[str, Any],
        *,
        thread_id: str | None = None,
    ) -> dict[str, Any]:
        """Run a read tool directly; it is audited like every other call."""
        started = time.perf_counter()
        try:
            spec = self._spec(tool_name)
            if spec.requires_approval:
                raise ValidationFailed(f"{tool_name} changes state and needs a proposal")
            args = spec.normalize(raw_args)
            with self.store.transaction() as tx:
                result = spec.read(ToolContext(identity, tx.conn, thread_id), args)
                tx.insert_audit(
                    self._audit(
                        identity,
                        thread_id,
                        tool_name,
                        "read",
                        args,
                        "succeeded",
                        started,
                        result=result,
                    )
                )
            return result
        except WritegateError as exc:
            self._audit_failure(identity, thread_id, tool_name, "read", raw_args, exc, started)
            raise

    # -- propose ----------------------------------------------------------------------

    def propose(
        self,
        identity: Identity,
        *,
        thread_id: str,
        tool_call_id: str,
        tool_name: str,
        raw_args: dict[str, Any],
    ) -> Proposal:
        """Freeze one write request as a proposal awaiting a person's confirmation.

        Idempotent per (thread, tool call): a re-run node gets the same proposal back.
        A retried call with a new tool-call id but the same arguments gets the proposal
        that is still open for them, so a retry never asks for (and runs) a second one.
        """
        started = time.perf_counter()
        try:
            spec = self._spec(tool_name)
            if not spec.requires_approval:
                raise ValidationFailed(f"{tool_name} is a read tool; call it directly")
            args = spec.normalize(raw_args)
            fingerprint = request_fingerprint(identity.tenant_id, tool_name, args)
            with self.store.transaction() as tx:
                proposal = self._propose_in(
                    tx, identity, spec, thread_id, tool_call_id, args, fingerprint, started
                )
            return proposal
        except WritegateError as exc:
            self._audit_failure(identity, thread_id, tool_name, "propose", raw_args, exc, started)
            raise

    def _propose_in(
        self,
        tx: LedgerTx,
        identity: Identity,
        spec: ToolSpec,
        thread_id: str,
        tool_call_id: str,
        args: dict[str, Any],
        fingerprint: str,
        started: float,
    ) -> Proposal:
        same_call = tx.find_proposal_by_call(thread_id, tool_call_id)
        if same_call is not None:
            if same_call.fingerprint != fingerprint or same_call.subject != identity.user_id:
                raise IdempotencyConflict(
                    "this tool-call id was already used for a different request",
                    tool_call_id=tool_call_id,
                    proposal_id=same_call.proposal_id,
                )
            return same_call
        running = tx.find_open_execution(identity.tenant_id, fingerprint)
        if running is not None:
            cls = InProgress if running.status is ExecutionStatus.RUNNING else OutcomeUnknown
            raise cls(execution_id=running.execution_id, request_key=running.request_key)
        seen = spec.validate(ToolContext(identity, tx.conn, thread_id), args)
        open_one = tx.find_open_proposal(thread_id, fingerprint)
        if (
            open_one is not None
            and open_one.subject == identity.user_id
            and open_one.state_version == seen.state_version
        ):
            return open_one
        now = tx.now()
        proposal_id = new_id("prop")
        preview = spec.preview(args, seen).to_dict()
        proposal = Proposal(
            proposal_id=proposal_id,
            thread_id=thread_id,
            tool_call_id=tool_call_id,
            subject=identity.user_id,
            tenant_id=identity.tenant_id,
            operation=spec.name,
            resource=seen.resource,
            args=args,
            args_digest=digest(args),
            fingerprint=fingerprint,
            state_version=seen.state_version,
            preview=preview,
            policy_version=self.policy.version,
            request_key=f"{spec.name}:{identity.tenant_id}:{seen.resource}:{proposal_id}",
            status=ProposalStatus.AWAITING,
            created_at=now,
            expires_at=now + self.policy.proposal_ttl,
        )
        stored = tx.insert_proposal(proposal)
        if stored is None:  # a concurrent twin of this node won the insert
            twin = tx.find_proposal_by_call(thread_id, tool_call_id)
            if twin is None or twin.fingerprint != fingerprint:
                raise IdempotencyConflict(tool_call_id=tool_call_id)
            return twin
        tx.insert_audit(
            self._audit(
                identity,
                thread_id,
                spec.name,
                "propose",
                args,
                "awaiting_confirmation",
                started,
                proposal=stored,
                requested_digest=stored.args_digest,
            )
        )
        return stored

    # -- decide -----------------------------------------------------------------------

    def get_proposal(self, identity: Identity, proposal_id: str) -> Proposal:
        with self.store.transaction() as tx:
            return self._owned(tx, identity, proposal_id, for_update=False)

    def decide(
        self, identity: Identity, decision: Confirm | Decline | Cancel | Edit
    ) -> Confirmation | Ended | Proposal:
        """Apply a person's decision. Only the proposal's subject, in its tenant, decides.

        Returns a Confirmation (confirm), Ended (decline/cancel) or the new Proposal
        (edit). Expiry is judged on the server clock with a right-open interval.
        """
        started = time.perf_counter()
        expired: WritegateError | None = None
        with self.store.transaction() as tx:
            proposal = self._owned(tx, identity, decision.proposal_id, for_update=True)
            now = tx.now()
            if proposal.status is ProposalStatus.AWAITING and now >= proposal.expires_at:
                tx.transition_proposal(
                    proposal.proposal_id, ProposalStatus.AWAITING, ProposalStatus.EXPIRED
                )
                tx.insert_audit(self._decision_audit(identity, proposal, "expired", started))
                expired = ProposalExpired(
                    proposal_id=proposal.proposal_id, expired_at=proposal.expires_at.isoformat()
                )
            elif isinstance(decision, Confirm):
                return self._confirm(tx, identity, proposal, started)
            elif isinstance(decision, Edit):
                return self._edit(tx, identity, proposal, decision.args, started)
            else:
                new = (
                    ProposalStatus.DECLINED
                    if isinstance(decision, Decline)
                    else ProposalStatus.CANCELLED
                )
                self._require_pending(proposal)
                tx.transition_proposal(
                    proposal.proposal_id, ProposalStatus.AWAITING, new, decided_by=identity.user_id
                )
                tx.insert_audit(self._decision_audit(identity, proposal, new.value, started))
                return Ended(replace(proposal, status=new))
        raise expired or ProposalExpired(proposal_id=decision.proposal_id)

    def _confirm(
        self, tx: LedgerTx, identity: Identity, proposal: Proposal, started: float
    ) -> Confirmation:
        now = tx.now()
        secret = "wgt_" + secrets.token_urlsafe(32)
        expires_at = min(now + self.policy.token_ttl, proposal.expires_at)
        if proposal.status is ProposalStatus.CONFIRMED:
            # The same person confirming again (a re-run node, a lost response): the
            # old secret is unreadable, so it is replaced; the approval stays one.
            if not tx.replace_token_hash(proposal.proposal_id, hash_secret(secret), expires_at):
                raise AlreadyConsumed(proposal_id=proposal.proposal_id)
            return Confirmation(replace(proposal), secret, expires_at)
        if proposal.status is ProposalStatus.EXECUTED:
            token = tx.get_token_for_proposal(proposal.proposal_id)
            raise AlreadyConsumed(
                proposal_id=proposal.proposal_id, execution_id=token.execution_id if token else None
            )
        self._require_pending(proposal)
        tx.transition_proposal(
            proposal.proposal_id,
            ProposalStatus.AWAITING,
            ProposalStatus.CONFIRMED,
            decided_by=identity.user_id,
        )
        tx.insert_token(
            Token(
                token_hash=hash_secret(secret),
                proposal_id=proposal.proposal_id,
                subject=proposal.subject,
                tenant_id=proposal.tenant_id,
                audience=self.policy.audience,
                operation=proposal.operation,
                resource=proposal.resource,
                args_digest=proposal.args_digest,
                policy_version=proposal.policy_version,
                request_key=proposal.request_key,
                issued_at=now,
                expires_at=expires_at,
                status=TokenStatus.ISSUED,
            )
        )
        tx.insert_audit(self._decision_audit(identity, proposal, "confirmed", started))
        return Confirmation(replace(proposal, status=ProposalStatus.CONFIRMED), secret, expires_at)

    def _edit(
        self,
        tx: LedgerTx,
        identity: Identity,
        proposal: Proposal,
        raw_args: dict[str, Any],
        started: float,
    ) -> Proposal:
        if proposal.status not in (ProposalStatus.AWAITING, ProposalStatus.CONFIRMED):
            self._require_pending(proposal)
        spec = self._spec(proposal.operation)
        args = spec.normalize(raw_args)
        fingerprint = request_fingerprint(identity.tenant_id, spec.name, args)
        new_call = f"{proposal.tool_call_id}#edit:{proposal.proposal_id}"
        edited = self._propose_in(
            tx, identity, spec, proposal.thread_id, new_call, args, fingerprint, started
        )
        if not tx.transition_proposal(
            proposal.proposal_id,
            proposal.status,
            ProposalStatus.SUPERSEDED,
            decided_by=identity.user_id,
            superseded_by=edited.proposal_id,
        ):
            raise ProposalNotPending(proposal_id=proposal.proposal_id)
        tx.revoke_token(proposal.proposal_id)
        tx.insert_audit(self._decision_audit(identity, proposal, "superseded", started))
        return edited

    # -- helpers ----------------------------------------------------------------------

    def _spec(self, tool_name: str) -> ToolSpec:
        try:
            return self.tools.get(tool_name)
        except KeyError as exc:
            raise ValidationFailed(f"unknown tool {tool_name!r}") from exc

    @staticmethod
    def _owned(tx: LedgerTx, identity: Identity, proposal_id: str, *, for_update: bool) -> Proposal:
        proposal = tx.get_proposal(proposal_id, for_update=for_update)
        # Someone else's proposal looks exactly like a missing one: no existence leak.
        if (
            proposal is None
            or proposal.tenant_id != identity.tenant_id
            or proposal.subject != identity.user_id
        ):
            raise NotFound("no such proposal for this user", proposal_id=proposal_id)
        return proposal

    @staticmethod
    def _require_pending(proposal: Proposal) -> None:
        if proposal.status is not ProposalStatus.AWAITING:
            raise ProposalNotPending(proposal_id=proposal.proposal_id, state=proposal.status.value)

    def _audit(
        self,
        identity: Identity,
        thread_id: str | None,
        tool_name: str,
        event: str,
        args: dict[str, Any] | None,
        status: str,
        started: float,
        *,
        result: dict[str, Any] | None = None,
        error_code: str | None = None,
        proposal: Proposal | None = None,
        **digests: str | None,
    ) -> AuditRecord:
        return AuditRecord(
            tenant_id=identity.tenant_id,
            user_id=identity.user_id,
            thread_id=thread_id,
            tool_name=tool_name,
            event=event,
            arguments=args,
            arguments_hash=_safe_digest(args),
            status=status,
            result=result,
            error_code=error_code,
            duration_ms=_elapsed_ms(started),
            request_key=proposal.request_key if proposal else None,
            proposal_id=proposal.proposal_id if proposal else None,
            **digests,
        )

    def _decision_audit(
        self, identity: Identity, proposal: Proposal, status: str, started: float
    ) -> AuditRecord:
        return replace(
            self._audit(
                identity,
                proposal.thread_id,
                proposal.operation,
                "decide",
                proposal.args,
                status,
                started,
                proposal=proposal,
                requested_digest=proposal.args_digest,
                approved_digest=proposal.args_digest if status == "confirmed" else None,
            ),
            approver=identity.user_id,
        )

    def _audit_failure(
        self,
        identity: Identity,
        thread_id: str | None,
        tool_name: str,
        event: str,
        raw_args: Any,
        exc: WritegateError,
        started: float,
    ) -> None:
        args = raw_args if isinstance(raw_args, dict) else {"_raw": repr(raw_args)}
        with self.store.transaction() as tx:
            tx.insert_audit(
                self._audit(
                    identity,
                    thread_id,
                    tool_name,
                    event,
                    args,
                    "rejected",
                    started,
                    error_code=exc.code,
                    result=exc.to_dict(),
                )
            )


def _safe_digest(args: dict[str, Any] | None) -> str | None:
    if args is None:
        return None
    try:
        return digest(args)
    except ValueError:  # a malformed argument (e.g. a float) is audited, not hashed
        return None
