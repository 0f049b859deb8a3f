"""The synchronous work behind each MCP tool, over the shared runtime.

Request ids: the JSON-RPC id of a `tools/call` is transport bookkeeping and changes on
every retry, so nothing here uses it. A proposal is keyed by the thread (the MCP
session of the authenticated user) and a tool-call id derived from the business
request: the client's `client_request_id` if it sent one, otherwise the digest of the
canonical arguments. A retried request therefore finds its proposal, and a retried
execution its token, whose consumption returns the first receipt.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic import ValidationError as PydanticValidationError

from writegate.approval.canonical import check_input, digest, to_rfc3339
from writegate.approval.conversation import Ask, Conversation, Over, Ran
from writegate.approval.errors import (
    AlreadyConsumed,
    NotFound,
    ProposalExpired,
    ProposalSuperseded,
    SessionMismatch,
    ValidationFailed,
    WritegateError,
)
from writegate.approval.models import Identity, Proposal, ProposalStatus
from writegate.approval.outcomes import proposal_error
from writegate.approval.service import Confirmation, new_id
from writegate.approval.spec import ToolSpec
from writegate.runtime.wiring import Runtime
from writegate.surfaces.mcp_server.tools import CLIENT_REQUEST_ID, execute_name

# A confirmation tier with a second approver parks a confirmed proposal here (no token yet).
SECOND_APPROVAL = "awaiting_second_approval"


class ExecuteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, str_strip_whitespace=True)
    proposal_id: str = Field(min_length=1, max_length=200)
    confirmation_token: str = Field(min_length=1, max_length=500)

    @field_validator("proposal_id", "confirmation_token")
    @classmethod
    def _storable(cls, value: str) -> str:
        check_input(value)  # no NUL or other control character reaches a query
        return value


def request_call_id(spec: ToolSpec, args: dict[str, Any], client_request_id: Any) -> str:
    """The business key of one request within a session (never the JSON-RPC id)."""
    if client_request_id is not None:
        if not isinstance(client_request_id, str) or not 0 < len(client_request_id) <= 200:
            raise ValidationFailed(f"{CLIENT_REQUEST_ID} must be a string of 1 to 200 characters")
        check_input({CLIENT_REQUEST_ID: client_request_id})
        return f"mcp:client:{client_request_id}"
    try:
        return f"mcp:args:{digest(spec.normalize(args))}"
    except (WritegateError, ValueError):
        # Invalid arguments: the service refuses (and audits) them under a throwaway id.
        return new_id("mcp:invalid")


def proposal_view(proposal: Proposal) -> dict[str, Any]:
    return {
        "proposal_id": proposal.proposal_id,
        "operation": proposal.operation,
        "resource": proposal.resource,
        "args": proposal.args,
        "args_digest": proposal.args_digest,
        "preview": proposal.preview,
        "expires_at": to_rfc3339(proposal.expires_at),
    }


class Calls:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.service = runtime.service
        self.talk = Conversation(runtime.service, runtime.executor)

    def read(self, identity: Identity, thread: str, name: str, args: dict[str, Any]) -> Any:
        return self.service.read(identity, name, args, thread_id=thread)

    def propose(
        self, identity: Identity, thread: str, spec: ToolSpec, raw: dict[str, Any]
    ) -> tuple[Proposal, dict[str, Any] | None]:
        """The proposal for this request, and a final answer if nobody needs asking."""
        args = dict(raw)
        call_id = request_call_id(spec, args, args.pop(CLIENT_REQUEST_ID, None))
        proposal = self.service.propose(
            identity, thread_id=thread, tool_call_id=call_id, tool_name=spec.name, raw_args=args
        )
        # Where the question stands is the conversation's rule, as on every way in: a
        # proposal that ran (or that its second approver approved) has its one receipt,
        # one that ended is told as its error, one parked for its approver says so.
        step = self.talk.start(identity, proposal, spec.name)
        if isinstance(step, Over) and step.first_receipt is None:
            raise step.error
        if not isinstance(step, Ask):  # its receipt: run once, or its token used before
            receipt = step.receipt.to_dict() if isinstance(step, Ran) else step.first_receipt
            return proposal, {**proposal_view(proposal), "status": "executed", "receipt": receipt}
        if step.note is not None:
            return proposal, self.waiting_for_second(proposal)
        if proposal.status is ProposalStatus.SUPERSEDED:
            # Edited elsewhere: this request's arguments are not what the person approved.
            raise ProposalSuperseded(proposal_id=proposal.proposal_id, state=proposal.status.value)
        if self.service.has_expired(proposal):
            raise ProposalExpired(
                proposal_id=proposal.proposal_id,
                advice=f"pass a new {CLIENT_REQUEST_ID} to propose it again",
            )
        return proposal, None

    def decide(self, identity: Identity, decision: Any) -> dict[str, Any]:
        outcome = self.service.decide(identity, decision)
        if isinstance(outcome, Proposal):  # a tier that needs a second approver first
            return self.waiting_for_second(outcome)
        if not isinstance(outcome, Confirmation):
            error = proposal_error(outcome.proposal.status, outcome.proposal.proposal_id)
            raise error or ValidationFailed("the decision did not confirm the proposal")
        proposal = outcome.proposal
        return {
            **proposal_view(proposal),
            "status": "confirmed",
            "confirmation_token": outcome.token,
            "token_expires_at": to_rfc3339(outcome.expires_at),
            "next_step": {
                "tool": execute_name(proposal.operation),
                "arguments": {
                    "proposal_id": proposal.proposal_id,
                    "confirmation_token": outcome.token,
                },
            },
        }

    @staticmethod
    def waiting_for_second(proposal: Proposal) -> dict[str, Any]:
        return {
            **proposal_view(proposal),
            "status": SECOND_APPROVAL,
            "requires_user_confirmation": True,
            "message": (
                "Nothing was executed yet. The person confirmed; this operation's tier "
                "also needs a second approver, whose approval runs it. Call this tool "
                "again with the same arguments to read its receipt, or how it ended."
            ),
        }

    def awaiting(self, identity: Identity, proposal: Proposal) -> dict[str, Any]:
        command = (
            f"writegate confirm {proposal.proposal_id} "
            f"--user {identity.user_id} --tenant {identity.tenant_id}"
        )
        return {
            **proposal_view(proposal),
            "status": "awaiting_confirmation",
            "requires_user_confirmation": True,
            "confirm_with": command,
            "message": (
                "Nothing was executed. Show this preview to the person; this client cannot "
                f"ask them directly, so they confirm by running `{command}` and give you "
                "the one-time token it prints. Never confirm on their behalf."
            ),
        }

    def execute(
        self, identity: Identity, thread: str, spec: ToolSpec, raw: dict[str, Any]
    ) -> dict[str, Any]:
        try:
            args = ExecuteArgs.model_validate(raw)
        except PydanticValidationError as exc:
            fields = [
                {"field": ".".join(map(str, e["loc"])) or "(arguments)", "problem": e["msg"]}
                for e in exc.errors(include_url=False, include_input=False)
            ]
            raise ValidationFailed(
                f"invalid arguments for {execute_name(spec.name)}", fields=fields
            ) from None
        self._check_session(identity, thread, args.proposal_id)
        replayed = False
        try:
            receipt = self.runtime.executor.execute(
                identity,
                args.confirmation_token,
                proposal_id=args.proposal_id,
                operation=spec.name,
            ).to_dict()
        except AlreadyConsumed as exc:
            # The same subject using its consumed token again: the first receipt, not a rerun.
            if "receipt" not in exc.details:
                raise
            receipt, replayed = exc.details["receipt"], True
        return {
            "status": receipt["status"],
            "execution_id": receipt["execution_id"],
            "proposal_id": args.proposal_id,
            "receipt": receipt,
            "replayed": replayed,
        }

    def _check_session(self, identity: Identity, thread: str, proposal_id: str) -> None:
        """A confirmed, unexecuted proposal of this user runs only from its own session.

        Anything else (another user's, a consumed one) is left to the executor, which
        answers with its own codes (subject_mismatch, args_mismatch, the first receipt).
        """
        try:
            proposal = self.service.get_proposal(identity, proposal_id)
        except NotFound:
            return  # not this user's: the executor refuses it with its own code
        if proposal.status is ProposalStatus.CONFIRMED and proposal.thread_id != thread:
            raise SessionMismatch(proposal_id=proposal_id)
