"""One error class per outcome.

Each class carries a stable `code` and a `retryable` flag. Callers (the model, an HTTP
client, an MCP client) only ever see `to_dict()`: code, message, retryable and a
request id, plus structured details where they help the caller decide what to do next.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from writegate.approval.inert import inert_text

# Details a person reads as text (a person's reason): made inert like the message.
_SHOWN_DETAILS = ("person_said",)


class WritegateError(RuntimeError):
    """Every refusal writegate makes. Its message is written for the person and the model
    (never a secret, never a trace), so servers that show a `RuntimeError`'s message to
    their client (LangGraph Server does) show it."""

    code: ClassVar[str] = "internal_error"
    retryable: ClassVar[bool] = False
    default_message: ClassVar[str] = "the request could not be completed"

    def __init__(self, message: str | None = None, **details: Any) -> None:
        # Messages may quote the application's data or a person's words: made inert
        # here, once, so every way in (and a server printing str(exc)) shows them inert.
        self.message = inert_text(message or self.default_message)
        for key in _SHOWN_DETAILS:
            if isinstance(details.get(key), str):
                details[key] = inert_text(details[key])
        self.details = details
        super().__init__(self.message)

    def to_dict(self, request_id: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
            "request_id": request_id or "req_" + uuid.uuid4().hex[:16],
        }
        if self.details:
            body["details"] = self.details
        return body


# Input and authorization: the caller must change something before trying again.


class ValidationFailed(WritegateError):
    """Bad input (arguments, an edit, a decision's fields): nothing was proposed or changed;
    raise it from `validate` for arguments your tool refuses."""

    code = "validation_failed"
    default_message = "the arguments are not valid"


class CanonicalizationError(ValidationFailed, ValueError):
    """A value has no single canonical form (a float, NaN, a naive time, a control
    character, a lone surrogate, nesting too deep): bad input like any other."""


class MissingIdentity(WritegateError):
    """The run has no identity writegate may act as; writegate never guesses one.

    Raised before anything runs, so the run fails and nothing is proposed or audited.
    """

    code = "identity_missing"
    default_message = (
        "set user_id and tenant_id from your authenticated session before running writegate"
    )


class IdentityConflict(MissingIdentity):
    """The run claims a user, tenant, roles or trust that its host did not give it."""

    code = "identity_conflict"
    default_message = "the run names someone its host did not authenticate"


class ClarificationNeeded(WritegateError):
    """Something only the user can say is missing (an amount, a currency): the model asks
    the user instead of guessing (`write_tool(clarify=...)`); nothing is proposed."""

    code = "clarification_needed"
    default_message = "the request is ambiguous; ask the user"


class NotFound(WritegateError):
    """No such resource for this user: also what another user's or tenant's record looks
    like, so that a refusal names nothing of it. Raise it from `validate`."""

    code = "not_found"
    default_message = "no such resource for this user"


class ForeignCall(NotFound):
    """A run reached a tool call whose proposal is someone else's: another user, or the
    same user id in another tenant, resuming the owner's thread. Answered like any
    proposal that is not one's own, and naming nothing of it; the run stops there, so
    the owner's question stands."""

    default_message = "no such tool call for this user"


class Forbidden(WritegateError):
    """The user may not do this (a second approval without the `approver` role, say)."""

    code = "forbidden"
    default_message = "this user may not do that"


class Unprotected(WritegateError):
    """A write tool called outside writegate (`.invoke` directly, a plain `ToolNode`), or
    one a `Writegate` was not given: it never runs unapproved."""

    code = "unprotected"
    default_message = (
        "this tool runs only under writegate: register it with Writegate.open(tools=[...]) "
        "and call it through wg.tool_node(), wg.build_agent() or wg.middleware(); "
        "nothing was executed"
    )


class InvalidTransition(WritegateError):
    """A status change the resource does not allow (a ticket closed twice, say); raise it
    from `validate`."""

    code = "invalid_transition"
    default_message = "that status change is not allowed"


def guard_gone(what: str) -> InvalidTransition:
    """A guarded write made under its row's lock found its guard gone: someone changed
    the row behind the lock, which never happens; the transaction fails, nothing of it
    commits, and the error names the write."""
    return InvalidTransition(f"{what} found its guard gone; nothing was committed")


def require_held(won: bool, what: str) -> None:
    """Raise `guard_gone(what)` unless a guarded write made under its row's lock won."""
    if not won:
        raise guard_gone(what)


class InvalidDecision(WritegateError):
    code = "invalid_decision"
    default_message = "not a structured decision for this proposal"


# Proposal and token lifecycle.


class ProposalExpired(WritegateError):
    code = "proposal_expired"
    default_message = "the proposal expired; propose again"


class ProposalNotPending(WritegateError):
    code = "proposal_not_pending"
    default_message = "the proposal was already decided"


class ProposalSuperseded(WritegateError):
    code = "proposal_superseded"
    default_message = "the proposal was replaced by an edit"


class Declined(WritegateError):
    code = "declined"
    default_message = "the user declined this operation; do not retry it"


class Cancelled(WritegateError):
    code = "cancelled"
    default_message = "the user cancelled without deciding; do not retry it"


class TokenExpired(WritegateError):
    code = "token_expired"
    default_message = "the confirmation expired; confirm again"


class TokenUnknown(WritegateError):
    code = "token_unknown"
    default_message = "no such confirmation token"


class TokenReplaced(WritegateError):
    code = "token_replaced"
    default_message = (
        "a later confirmation of this proposal replaced this token; its run uses the newer one"
    )


class SubjectMismatch(WritegateError):
    code = "subject_mismatch"
    default_message = "the token belongs to another user"


class TenantMismatch(WritegateError):
    code = "tenant_mismatch"
    default_message = "the token belongs to another tenant"


class AudienceMismatch(WritegateError):
    code = "audience_mismatch"
    default_message = "the token is for another service"


class OperationMismatch(WritegateError):
    code = "operation_mismatch"
    default_message = "the token is for another operation"


class ArgsMismatch(WritegateError):
    code = "args_mismatch"
    default_message = "the arguments differ from those confirmed"


class PolicyChanged(WritegateError):
    code = "policy_changed"
    default_message = "the approval policy changed; confirm again"


class AlreadyConsumed(WritegateError):
    code = "already_consumed"
    default_message = "the confirmation was already used"


class Revoked(WritegateError):
    code = "revoked"
    default_message = "the approval was revoked; do not retry it"


# Execution.


class StateChanged(WritegateError):
    """The resource changed since the preview (its version moved): nothing ran; the model
    proposes again on fresh state. Raise it from `validate` or a guarded write."""

    code = "state_changed"
    default_message = "the resource changed since the preview; propose again"


class IdempotencyConflict(WritegateError):
    """The request key was already used for other arguments, or its write was already
    applied: nothing ran again. Raise it from a write whose own table refuses a second
    row for the same key (a unique request key), so a replay is refused, not repeated."""

    code = "idempotency_conflict"
    default_message = "the request key was already used for different arguments"


class InProgress(WritegateError):
    code = "in_progress"
    retryable = True
    default_message = "the operation is being executed"


class OutcomeUnknown(WritegateError):
    code = "outcome_unknown"
    default_message = (
        "the outcome is not known yet and is being reconciled; do not propose it again"
    )


class ExecutionFailed(WritegateError):
    """The downstream refused the operation for good: not applied, never sent again
    (`failed_terminal`); `compensate` runs."""

    code = "execution_failed"
    default_message = "the downstream refused the operation"


class UpstreamTimeout(WritegateError):
    """The downstream's client gave up, or the connection broke, after the request was
    sent: it may have applied."""

    code = "upstream_timeout"
    retryable = True
    default_message = "the downstream did not answer"


class DeadlineExceeded(WritegateError):
    """No answer within writegate's own deadline (`RetryPolicy.call_timeout`): the call
    may have applied, and it may still be running."""

    code = "deadline_exceeded"
    retryable = True
    default_message = "no answer within the deadline; the call may still be running"


class TemporarilyUnavailable(WritegateError):
    """The downstream said it did not apply the request and may later (its 503): sent again
    with the same request key, with backoff. Raise it from your client only when the
    request was not applied."""

    code = "temporarily_unavailable"
    retryable = True
    default_message = "the downstream is unavailable"


class RateLimited(WritegateError):
    """The downstream is rate limiting and did not apply the request (its 429): sent again
    with the same request key, with backoff."""

    code = "rate_limited"
    retryable = True
    default_message = "the downstream is rate limiting"


class Unavailable(WritegateError):
    code = "unavailable"
    retryable = True
    default_message = "a dependency is unavailable"


# Confirmation tiers, batches and revocation.


class RetypeMismatch(WritegateError):
    code = "retype_mismatch"
    default_message = "the re-typed key field does not match the preview"


class RetypeUnavailable(WritegateError):
    """The proposal's tier asks for a re-typed key field and there is none to ask for:
    the policy must name one (or the tool declare its amount or scope). Nothing was
    proposed; asking again changes nothing until an operator changes the policy."""

    code = "retype_unavailable"
    default_message = "this confirmation tier asks for a re-typed field the policy does not name"


class SelfApproval(WritegateError):
    code = "self_approval"
    default_message = "the requester cannot be their own second approver"


class ScopeChanged(WritegateError):
    """The set of records a batch froze at proposal time grew or shrank before it ran:
    nothing ran; propose again."""

    code = "scope_changed"
    default_message = "the set of records changed since the preview; propose again"


class RevokeTooLate(WritegateError):
    code = "revoke_too_late"
    default_message = "execution already started; a revocation cannot undo it"


def database_unavailable() -> TemporarilyUnavailable:
    """The database is out of reach for the moment (a cut, a restart): retry the same call."""
    return TemporarilyUnavailable(
        "the database is unavailable for the moment; retry shortly", dependency="database"
    )


def is_database_outage(exc: WritegateError) -> bool:
    """True for `database_unavailable()`, as opposed to a downstream's 503."""
    return isinstance(exc, TemporarilyUnavailable) and exc.details.get("dependency") == "database"


# The downstream said it did not apply the request (an explicit 429 or 503, raised by the
# tool's client as writegate's error): sent again with the same key.
NOT_APPLIED_CODES = frozenset({"temporarily_unavailable", "rate_limited"})
# The downstream may have applied it: never sent again blindly (approval/downstream.py).
MAY_HAVE_APPLIED_CODES = frozenset({"upstream_timeout", "deadline_exceeded"})
# An execution that answered with one of these is not over: the executor's retries or
# the reconciler finish it with the same request key. Proposing it again could pay twice.
UNSETTLED_CODES = NOT_APPLIED_CODES | MAY_HAVE_APPLIED_CODES | {"outcome_unknown", "in_progress"}


# -- records, surfaces and sessions ---------------------------------------------------


class RecordExpired(WritegateError):
    code = "record_expired"
    default_message = (
        "this operation's record expired under the retention policy; it will not run again"
    )


class Unauthorized(WritegateError):
    code = "unauthorized"
    default_message = "send a valid API key as 'Authorization: Bearer <key>'"


class ApprovalPending(WritegateError):
    code = "approval_pending"
    default_message = "this thread waits for a decision on a pending approval; decide it first"


class NotResumable(WritegateError):
    code = "not_resumable"
    default_message = "this proposal waits in no thread this service can resume"


class SessionMismatch(WritegateError):
    code = "session_mismatch"
    default_message = (
        "this proposal was confirmed for another MCP session; request a confirmation here"
    )


def _by_code() -> dict[str, type[WritegateError]]:
    """Each code with the class that defines it, however deep: a subclass that only
    reuses its parent's code (`ForeignCall`, `CanonicalizationError`) does not take it."""
    found: dict[str, type[WritegateError]] = {}
    pending = list(WritegateError.__subclasses__())
    while pending:
        cls = pending.pop(0)
        if "code" in vars(cls):
            found.setdefault(cls.code, cls)
        pending.extend(cls.__subclasses__())
    return found


_BY_CODE = _by_code()  # every class above is defined by now


def error_for_code(code: str, message: str | None = None, **details: Any) -> WritegateError:
    """Rebuild a stored outcome (e.g. a failed execution's code) as its error."""
    return _BY_CODE.get(code, WritegateError)(message, **details)
