"""Propose, decide and read: everything before the side effect.

Nothing here changes the world outside the ledger. A proposal freezes canonical
arguments, the state version the validator saw and the preview; a confirmation issues
a one-time token bound to all of it. Execution lives in `approval/execution.py`.
"""

from __future__ import annotations

import secrets
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from writegate.approval import review, tracing
from writegate.approval.audit import call_audit, decision_audit
from writegate.approval.canonical import (
    CanonicalizationError,
    check_input,
    digest,
    hash_secret,
    new_secret,
    request_fingerprint,
)
from writegate.approval.decisions import Cancel, Confirm, Decline, Edit
from writegate.approval.errors import (
    AlreadyConsumed,
    ForeignCall,
    IdempotencyConflict,
    InProgress,
    InvalidTransition,
    NotFound,
    OperationMismatch,
    OutcomeUnknown,
    PolicyChanged,
    ProposalExpired,
    ProposalNotPending,
    ValidationFailed,
    WritegateError,
    require_held,
)
from writegate.approval.models import (
    DECIDABLE,
    Execution,
    ExecutionStatus,
    Identity,
    Proposal,
    ProposalStatus,
    Token,
    TokenStatus,
)
from writegate.approval.policy import Policy, load_policy
from writegate.approval.risk import (
    assess,
    check_retyped,
    reassess,
    requires_fresh_confirmation,
    risk_inputs,
    token_ttl,
)
from writegate.approval.spec import ToolContext, ToolLookup, ToolSpec
from writegate.approval.store import CallLookup, LedgerReads, LedgerStore, LedgerTx
from writegate.approval.views import Page, PageArgs

__all__ = ["ApprovalService", "Confirmation", "Ended", "Policy", "new_id"]


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


# -- where a confirm stands: `ApprovalService.confirm_stage`, for both ways a confirm
# arrives (the token's client and the graph's confirm) -----------------------------


@dataclass(frozen=True)
class Executed:
    """The proposal ran (its token was consumed): a confirm now is a replay."""

    proposal: Proposal


@dataclass(frozen=True)
class Waiting:
    """The proposal awaits its second approver: moved there by this confirm (`now`,
    recorded in the transaction) or by an earlier one."""

    proposal: Proposal
    now: bool


@dataclass(frozen=True)
class Reconfirm:
    """The proposal was confirmed before and its token issued (a lost response, or the
    token a second approver's approval released): nothing is decided again."""

    proposal: Proposal


@dataclass(frozen=True)
class Confirming:
    """The proposal awaited this confirm and passed its tier's checks: it is confirmed
    by this call, with `token` (for `secret`), built and not yet written."""

    proposal: Proposal
    token: Token
    secret: str


@dataclass(frozen=True)
class Closed:
    """The proposal ended without running (declined, expired, revoked, ...)."""

    proposal: Proposal


# A recorded refusal (its expiry, written in the transaction) is returned, not raised.
ConfirmStage = Executed | Waiting | Reconfirm | Confirming | Closed | WritegateError


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(12)}"


class ApprovalService:
    def __init__(self, store: LedgerStore, tools: ToolLookup, policy: Policy | None = None):
        self.store = store
        self.tools = tools
        # Without an explicit policy, the versioned policy file decides the tiers.
        self.policy = policy or load_policy()

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
            spec = self.spec_for(tool_name)
            if spec.requires_approval:
                raise ValidationFailed(f"{tool_name} changes state and needs a proposal")
            check_input(raw_args)  # before anything is stored or even parsed
            args = spec.normalize(raw_args)
            with self.store.transaction() as tx:
                result = spec.read(ToolContext(identity, tx.conn, thread_id), args)
                tx.insert_audit(
                    call_audit(
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
        message_id: str = "",
    ) -> Proposal:
        """Freeze one write request as a proposal awaiting a person's confirmation.

        Idempotent per call (thread, model message, tool-call id): a re-run node gets
        the same proposal back; the same id in a later message is a new request.
        A retried call with a new tool-call id but the same arguments gets the proposal
        that is still open for them, so a retry never asks for (and runs) a second one.
        """
        started = time.perf_counter()
        with tracing.span("writegate.propose", root=True, tenant_id=identity.tenant_id):
            try:
                spec = self.spec_for(tool_name)
                if not spec.requires_approval:
                    raise ValidationFailed(f"{tool_name} is a read tool; call it directly")
                check_input(raw_args)  # before anything is stored or even parsed
                args = spec.normalize(raw_args)
                fingerprint = request_fingerprint(identity.tenant_id, tool_name, args)
                # No transaction: a re-run (every resume re-runs the gate) finds its
                # proposal in one statement; a new call's tool reads see what they would
                # in a transaction at read committed, and its one write is one statement.
                call = (identity.tenant_id, thread_id, tool_call_id, fingerprint)
                with self.store.statements() as tx:
                    found = tx.look_up_call(*call, message_id=message_id)
                    try:
                        proposal = self._propose_in(
                            tx,
                            identity,
                            spec,
                            thread_id,
                            tool_call_id,
                            args,
                            fingerprint,
                            found,
                            started,
                            message_id=message_id,
                        )
                    except InvalidTransition:
                        # A concurrent twin of this node inserted the call's proposal
                        # first: nothing was written; the twin's is the answer.
                        twin = tx.look_up_call(*call, message_id=message_id).same_call
                        if twin is None:
                            raise  # not a twin: the failure as it was
                        proposal = self._same_call(identity, twin, tool_call_id, fingerprint)
                tracing.annotate(
                    proposal_id=proposal.proposal_id,
                    request_key=proposal.request_key,
                    args_digest=proposal.args_digest,
                )
                return proposal
            except WritegateError as exc:
                # Someone else's call: its arguments are the owner's, not the caller's to keep.
                args = (
                    {"_withheld": "another user's call"}
                    if isinstance(exc, ForeignCall)
                    else raw_args
                )
                self._audit_failure(identity, thread_id, tool_name, "propose", args, exc, started)
                raise

    @staticmethod
    def _same_call(
        identity: Identity, same_call: Proposal, tool_call_id: str, fingerprint: str
    ) -> Proposal:
        """The proposal already made for this tool call, if it is this request's."""
        if (same_call.subject, same_call.tenant_id) != (identity.user_id, identity.tenant_id):
            # Someone else's question (another user, or the same user id in another
            # tenant, resuming the thread): refused naming nothing of it.
            raise ForeignCall()
        if same_call.fingerprint != fingerprint:
            raise IdempotencyConflict(
                "this tool-call id was already used for a different request",
                tool_call_id=tool_call_id,
                proposal_id=same_call.proposal_id,
            )
        return same_call

    def _propose_in(
        self,
        tx: LedgerTx,
        identity: Identity,
        spec: ToolSpec,
        thread_id: str,
        tool_call_id: str,
        args: dict[str, Any],
        fingerprint: str,
        found: CallLookup,
        started: float,
        *,
        message_id: str = "",
    ) -> Proposal:
        """The call's proposal, after `found`, its lookup: the one found, or a new one.
        Should a concurrent twin insert one meanwhile, the insert writes nothing and
        raises `InvalidTransition`."""
        if found.same_call is not None:
            return self._same_call(identity, found.same_call, tool_call_id, fingerprint)
        running, open_one = found.running, found.open_one
        if running is not None:
            # Running or due for a retry with its own key: wait. Unknown or escalated:
            # a person or the reconciler decides; a second proposal could pay twice.
            waiting = (ExecutionStatus.RUNNING, ExecutionStatus.FAILED_RETRYABLE)
            cls = InProgress if running.status in waiting else OutcomeUnknown
            raise cls(execution_id=running.execution_id, request_key=running.request_key)
        ctx = ToolContext(identity, tx.conn, thread_id)
        args = spec.freeze_scope(ctx, args)  # a batch: its exact resource set joins them
        seen = spec.validate(ctx, args)
        if (
            open_one is not None
            and open_one.subject == identity.user_id
            and open_one.state_version == seen.state_version
            and open_one.args_digest == digest(args, open_one.digest_scheme)
            and open_one.policy_version == self.policy.version
        ):
            return open_one
        now = found.now or tx.now()  # the clock the lookup read, if the store has one
        proposal_id = new_id("prop")
        preview = spec.preview(args, seen).to_dict()
        declared = spec.risk_inputs(args)
        risk = assess(self.policy.risk, risk_inputs(spec.name, args, preview, identity, declared))
        # the policy's word on this operation, else the tool's own, its tier's, the default
        waits = self.policy.proposal_ttl_for(spec.name, risk.tier, spec.expires_in)
        # Added beside the fields, never instead of one: the person still sees everything.
        preview["confirmation"] = risk.confirmation(self.policy, waits)
        proposal = Proposal(
            proposal_id=proposal_id,
            thread_id=thread_id,
            tool_call_id=tool_call_id,
            message_id=message_id,
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
            expires_at=now + waits,
            tier=risk.tier.name,
            risk=risk.to_dict(),
        )
        audit = call_audit(
            identity,
            thread_id,
            spec.name,
            "propose",
            proposal.args,  # hashed once already
            "awaiting_confirmation",
            started,
            proposal=proposal,
            requested_digest=proposal.args_digest,
        )
        if not tx.insert_proposal(proposal, audit):
            # The call had no proposal when it was looked up; a concurrent twin of this
            # node inserted one since. Nothing was written; the caller reads the twin's.
            raise InvalidTransition("the call's proposal was made by a twin meanwhile")
        tracing.remember(tx, proposal.proposal_id)
        return proposal

    # -- decide -----------------------------------------------------------------------

    def get_proposal(self, identity: Identity, proposal_id: str) -> Proposal:
        with self.store.reading() as tx:
            return self._owned(tx, identity, proposal_id, for_update=False)

    def has_expired(self, proposal: Proposal) -> bool:
        """Past its expiry on the database clock (right-open: at `expires_at` it has)."""
        with self.store.reading() as tx:
            return tx.now() >= proposal.expires_at

    def proposal_and_execution(
        self, identity: Identity, proposal_id: str
    ) -> tuple[Proposal, Execution | None]:
        """One's own proposal and its execution, if it ran, read together."""
        proposal, execution, _ = self.proposal_execution_and_now(identity, proposal_id)
        return proposal, execution

    def proposal_execution_and_now(
        self, identity: Identity, proposal_id: str, reads: LedgerReads | None = None
    ) -> tuple[Proposal, Execution | None, datetime]:
        """`proposal_and_execution`, and the ledger's clock as of that read (brought
        along with it, without a statement of its own). `reads`: made there (a session
        in a transaction of the caller's) instead of on a connection of their own."""
        with nullcontext(reads) if reads is not None else self.store.reading() as tx:
            proposal, execution = tx.get_proposal_and_execution(proposal_id)
            mine = self.mine(identity, proposal, proposal_id)
            return mine, execution, tx.now()

    def decide(
        self, identity: Identity, decision: Confirm | Decline | Cancel | Edit
    ) -> Confirmation | Ended | Proposal:
        """Apply a person's decision. Only the proposal's subject, in its tenant, decides.

        Returns a Confirmation (confirm), Ended (decline/cancel) or a Proposal: the new
        one after an edit, or this one while it awaits its second approver (a confirm at
        that tier issues no token). Expiry is judged on the server clock, right-open.
        """
        parent = tracing.recall(self.store, proposal_id=decision.proposal_id)
        with tracing.span(
            "writegate.decide",
            parent,
            proposal_id=decision.proposal_id,
            tenant_id=identity.tenant_id,
            action=type(decision).__name__.lower(),
        ):
            return self._decide(identity, decision)

    def _decide(
        self, identity: Identity, decision: Confirm | Decline | Cancel | Edit
    ) -> Confirmation | Ended | Proposal:
        started = time.perf_counter()
        with self.store.transaction() as tx:
            outcome = self.decide_in(tx, identity, decision, started)
        if isinstance(outcome, WritegateError):
            raise outcome  # after the commit: its proposal's move is recorded (expired)
        return outcome

    def decide_in(
        self,
        tx: LedgerTx,
        identity: Identity,
        decision: Confirm | Decline | Cancel | Edit,
        started: float,
    ) -> Confirmation | Ended | Proposal | WritegateError:
        """`decide` inside the caller's transaction. A refusal that is recorded (an
        expiry: the proposal moves to expired) is returned, not raised: the caller
        commits it, then raises it."""
        check_input(decision.model_dump())  # an edit's arguments, a reason: before any row
        # Every move below is of this row, locked here and seen in its status.
        proposal = self.mine(identity, tx.lock_proposal(decision.proposal_id).proposal,
                              decision.proposal_id)  # fmt: skip
        if isinstance(decision, Confirm):
            return self._confirm(tx, identity, proposal, decision, started)
        expired = self.expire_if_due(tx, identity, proposal, started)
        if expired is not None:
            return expired
        if isinstance(decision, Edit):
            return self._edit(tx, identity, proposal, decision.args, started)
        new = ProposalStatus.DECLINED if isinstance(decision, Decline) else ProposalStatus.CANCELLED
        reason = decision.reason if isinstance(decision, Decline) else None
        self._require_pending(proposal)
        moved = tx.transition_proposal(
            proposal.proposal_id, proposal.status, new, decided_by=identity.user_id, reason=reason
        )
        require_held(moved, "the proposal's move")
        said = {"person_said": reason} if reason else None
        tx.insert_audit(decision_audit(identity, proposal, new.value, started, result=said))
        return Ended(replace(proposal, status=new, decision_reason=reason))

    def expire_if_due(
        self, tx: LedgerTx, identity: Identity, proposal: Proposal, started: float
    ) -> ProposalExpired | None:
        """A proposal waiting on a person past its expiry (right-open, on the database
        clock) moves to expired, audited; the refusal is returned for after the commit."""
        if proposal.status not in DECIDABLE or tx.now() < proposal.expires_at:
            return None
        require_held(
            tx.transition_proposal(proposal.proposal_id, proposal.status, ProposalStatus.EXPIRED),
            "the proposal's move",
        )
        tx.insert_audit(decision_audit(identity, proposal, "expired", started))
        return ProposalExpired(
            proposal_id=proposal.proposal_id, expired_at=proposal.expires_at.isoformat()
        )

    def confirming(
        self,
        tx: LedgerTx,
        identity: Identity,
        proposal: Proposal,
        decision: Confirm,
        started: float,
    ) -> Proposal | WritegateError | None:
        """A confirm's checks at the proposal's tier, for a proposal awaiting it. None:
        it is confirmed now. Otherwise what happened instead, written in `tx`: the
        proposal awaiting its second approver (a confirm at that tier issues no token;
        the approver's approval does), or its expiry (a refusal, for after the commit).
        A policy change or a wrong retyped field raises, writing nothing."""
        expired = self.expire_if_due(tx, identity, proposal, started)
        if expired is not None:
            return expired
        self.require_current_requirements(proposal)
        check_retyped(proposal, decision.retyped)
        if not (proposal.risk or {}).get("tier", {}).get("second_approver"):
            return None
        moved = tx.transition_proposal(
            proposal.proposal_id,
            ProposalStatus.AWAITING,
            ProposalStatus.AWAITING_SECOND,
            decided_by=identity.user_id,
        )
        require_held(moved, "the proposal's move")
        tx.insert_audit(decision_audit(identity, proposal, "awaiting_second_approval", started))
        return replace(proposal, status=ProposalStatus.AWAITING_SECOND, decided_by=identity.user_id)

    def confirm_stage(
        self,
        tx: LedgerTx,
        identity: Identity,
        proposal: Proposal | None,
        decision: Confirm,
        started: float,
        *,
        operation: str | None = None,
    ) -> ConfirmStage:
        """The confirm's status switch, written once for both ways a confirm arrives:
        `proposal` (locked in `tx`, None if missing) is the caller's own or NotFound,
        for `operation` if one is named; then where the confirm stands. Awaiting it, the
        checks at its tier run (`confirming`) and its token is built, not written."""
        proposal = self.mine(identity, proposal, decision.proposal_id)
        if operation is not None and operation != proposal.operation:
            raise OperationMismatch(expected=operation, token_operation=proposal.operation)
        status = proposal.status
        if status is ProposalStatus.EXECUTED:
            return Executed(proposal)
        if status is ProposalStatus.AWAITING_SECOND:
            return Waiting(proposal, now=False)
        if status is ProposalStatus.CONFIRMED:
            return Reconfirm(proposal)
        if status is not ProposalStatus.AWAITING:
            return Closed(proposal)
        instead = self.confirming(tx, identity, proposal, decision, started)
        if isinstance(instead, Proposal):
            return Waiting(instead, now=True)
        if instead is not None:
            return instead
        secret = new_secret()
        return Confirming(proposal, self.new_token(tx, proposal, secret), secret)

    def _confirm(
        self,
        tx: LedgerTx,
        identity: Identity,
        proposal: Proposal,
        decision: Confirm,
        started: float,
    ) -> Confirmation | Proposal | WritegateError:
        """Confirm and hand out the token, for a client that presents it later (HTTP,
        MCP, the CLI); the graph confirms and executes at once (`Executor.confirm`)."""
        stage = self.confirm_stage(tx, identity, proposal, decision, started)
        if isinstance(stage, Executed):
            token = tx.get_token_for_proposal(proposal.proposal_id)
            raise AlreadyConsumed(
                proposal_id=proposal.proposal_id, execution_id=token.execution_id if token else None
            )
        if isinstance(stage, Waiting):
            return stage.proposal  # the second approver is next
        if isinstance(stage, Reconfirm):
            # The same person confirming again (a lost response, or the token a second
            # approver released): the old secret is unreadable, so it is replaced; the
            # approval stays one. A token no longer issued was used (or revoked) since.
            self.require_current_requirements(proposal)
            secret = new_secret()
            expires_at = self.token_expiry(tx, proposal)
            if not tx.replace_token_hash(proposal.proposal_id, hash_secret(secret), expires_at):
                token = tx.get_token_for_proposal(proposal.proposal_id)
                raise AlreadyConsumed(
                    proposal_id=proposal.proposal_id,
                    execution_id=token.execution_id if token else None,
                )
            return Confirmation(replace(proposal), secret, expires_at)
        if isinstance(stage, Closed):
            raise ProposalNotPending(proposal_id=proposal.proposal_id, state=proposal.status.value)
        if isinstance(stage, WritegateError):
            return stage  # expired: recorded, raised after the commit
        require_held(
            tx.transition_proposal(
                proposal.proposal_id,
                ProposalStatus.AWAITING,
                ProposalStatus.CONFIRMED,
                decided_by=identity.user_id,
            ),
            "the proposal's move",
        )
        tx.insert_token(stage.token)
        tx.insert_audit(decision_audit(identity, proposal, "confirmed", started))
        confirmed = replace(proposal, status=ProposalStatus.CONFIRMED, decided_by=identity.user_id)
        return Confirmation(confirmed, stage.secret, stage.token.expires_at)

    def require_current_requirements(self, proposal: Proposal) -> None:
        """A policy change that would ask more (or less) of this proposal needs a new one."""
        if requires_fresh_confirmation(proposal, proposal.policy_version, self.policy):
            now = reassess(proposal, self.policy)
            raise PolicyChanged(
                proposal_id=proposal.proposal_id,
                made_under=proposal.policy_version,
                current_policy=self.policy.version,
                tier_then=proposal.tier,
                tier_now=now.tier.name if now else None,
            )

    def token_expiry(self, tx: LedgerTx, proposal: Proposal) -> datetime:
        return min(tx.now() + token_ttl(proposal, self.policy), proposal.expires_at)

    def new_token(self, tx: LedgerTx, proposal: Proposal, secret: str) -> Token:
        """The one-time token for `secret`, bound to the requester, under the current
        policy version (not yet written)."""
        return Token(
            token_hash=hash_secret(secret),
            proposal_id=proposal.proposal_id,
            audience=self.policy.audience,
            policy_version=self.policy.version,
            issued_at=tx.now(),
            expires_at=self.token_expiry(tx, proposal),
            status=TokenStatus.ISSUED,
        )

    def edit_changes_nothing(self, proposal: Proposal, raw_args: dict[str, Any]) -> bool:
        """Whether an edit's arguments, normalized, are the proposal's own. Such an edit
        keeps the question as it is: no new proposal, nothing decided."""
        args = self.spec_for(proposal.operation).normalize(raw_args)
        return digest(args, proposal.digest_scheme) == proposal.args_digest

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
        spec = self.spec_for(proposal.operation)
        args = spec.normalize(raw_args)
        fingerprint = request_fingerprint(identity.tenant_id, spec.name, args)
        new_call = f"{proposal.tool_call_id}#edit:{proposal.proposal_id}"
        found = tx.look_up_call(
            identity.tenant_id,
            proposal.thread_id,
            new_call,
            fingerprint,
            message_id=proposal.message_id,
        )
        edited = self._propose_in(
            tx,
            identity,
            spec,
            proposal.thread_id,
            new_call,
            args,
            fingerprint,
            found,
            started,
            message_id=proposal.message_id,
        )
        if edited.proposal_id == proposal.proposal_id:
            return proposal  # an edit that changes nothing keeps the question as it is
        if not tx.transition_proposal(
            proposal.proposal_id,
            proposal.status,
            ProposalStatus.SUPERSEDED,
            decided_by=identity.user_id,
            superseded_by=edited.proposal_id,
        ):
            raise ProposalNotPending(proposal_id=proposal.proposal_id)
        tx.revoke_token(proposal.proposal_id)
        tx.insert_audit(decision_audit(identity, proposal, "superseded", started))
        return edited

    # -- second approval and revocation (approval/review.py) --------------------------

    def approve_as_second(
        self,
        identity: Identity,
        proposal_id: str,
        *,
        then: review.Then | None = None,
        runs_in: str | None = None,
    ) -> Proposal:
        """A different approver of the same tenant approves. Alone this only records the
        approval (the requester's thread runs it when it next runs); the ways in call
        `Executor.approve_as_second`, which also runs the write (`then`, see review)."""
        return review.approve_as_second(self, identity, proposal_id, then=then, runs_in=runs_in)

    def decline_as_second(
        self, identity: Identity, proposal_id: str, *, reason: str | None = None
    ) -> Proposal:
        """A different approver of the same tenant declines; `reason`, their words."""
        return review.approve_as_second(self, identity, proposal_id, approve=False, reason=reason)

    def revoke(self, identity: Identity, proposal_id: str) -> Proposal:
        """Approver, admin or requester stops an approval that has not executed."""
        return review.revoke(self, identity, proposal_id)

    def proposal_for_review(self, identity: Identity, proposal_id: str) -> Proposal:
        return review.for_review(self, identity, proposal_id)

    def awaiting_second_approval(
        self, identity: Identity, args: PageArgs | None = None
    ) -> Page[Proposal]:
        """A page of what this approver may approve (`review.awaiting_second`)."""
        return review.awaiting_second(self, identity, args or PageArgs())

    # -- helpers ----------------------------------------------------------------------

    def spec_for(self, tool_name: str) -> ToolSpec:
        """The registered tool, or validation_failed naming the unknown name."""
        try:
            return self.tools.get(tool_name)
        except KeyError as exc:
            raise ValidationFailed(f"unknown tool {tool_name!r}") from exc

    @staticmethod
    def _owned(
        tx: LedgerReads, identity: Identity, proposal_id: str, *, for_update: bool
    ) -> Proposal:
        proposal = tx.get_proposal(proposal_id, for_update=for_update)
        return ApprovalService.mine(identity, proposal, proposal_id)

    @staticmethod
    def mine(identity: Identity, proposal: Proposal | None, proposal_id: str) -> Proposal:
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
        if proposal.status not in DECIDABLE:
            raise ProposalNotPending(proposal_id=proposal.proposal_id, state=proposal.status.value)

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
        try:
            check_input(args)
        except CanonicalizationError as refused:  # unstorable as given: audit why instead
            args = {"_refused": refused.message}
        with self.store.transaction() as tx:
            tx.insert_audit(
                call_audit(
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
