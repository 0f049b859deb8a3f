"""The conversation about one proposal, apart from any framework: ask, answer, ask again.

Every way in asks the person about a proposal and reads their answer; what an answer
does to the question is decided here, once:

- where a question stands before anything is asked (`Conversation.start`): a proposal
  that ran, or that its second approver approved, has only its one receipt left; one
  that ended without running is told as its error; any other is asked about;
- what an answer does (`Conversation.answer`): a confirm runs through the executor, or
  parks the proposal for its second approver (the same question, one step on); a
  decline or cancel ends the question; an edit is a new proposal with its own preview;
- which refusals end the question (`FINAL_CODES`) and which ask it again with the
  reason shown (everything else: free text, another proposal's id, a mistyped field);
- the edit replay: an adapter that re-runs from the top (LangGraph re-runs a node on
  resume) replays each answer in order, and an edit already made is found, not made
  twice;
- a question left unanswered (`Conversation.resolve`): the latest edit is cancelled;
- a second approver's answer (`Conversation.answer_as_second`): an approval runs the
  write once, a decline ends it with their words; an edit or a cancel is the
  requester's, never theirs.

An adapter keeps only its plumbing: how it asks (an interrupt, an elicitation, a
deferred call), how it knows a question reached a person (`presented`) or an answer
was given before (`replayed`), and how it shows a `Step` (a tool message, a JSON body).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from writegate.approval.decisions import Cancel, Confirm, Decline, Edit, parse_decision
from writegate.approval.errors import (
    Cancelled,
    InvalidDecision,
    ProposalNotPending,
    SelfApproval,
    WritegateError,
    is_database_outage,
)
from writegate.approval.execution import AwaitingSecond, Executor
from writegate.approval.models import Identity, Proposal, ProposalStatus, Receipt
from writegate.approval.outcomes import proposal_error
from writegate.approval.service import ApprovalService, Confirmation, Ended

# Answers after which the question is over: report, do not ask again.
FINAL_CODES = frozenset(
    {"proposal_expired", "proposal_not_pending", "already_consumed", "policy_changed"}
)
# A confirm refused for what the person can fix in their answer: the same question stands.
ASK_AGAIN_CODES = frozenset({"invalid_decision", "retype_mismatch"})
# A confirmed proposal is still editable: a re-run after a crash replays the edit.
_EDITABLE = (ProposalStatus.AWAITING, ProposalStatus.CONFIRMED)
# Said with the question while the proposal waits for its second approver.
AWAITING_SECOND_NOTE = {
    "what": "second_approval",
    "message": "You confirmed; an approver of your tenant must approve this exact preview. "
    "Their approval runs it; this question then resolves with its receipt.",
}


def awaiting_second(proposal: Proposal) -> bool:
    """The requester confirmed; an approver of the tenant is next (no token yet)."""
    return proposal.status is ProposalStatus.AWAITING_SECOND


def approved_by_second(proposal: Proposal) -> bool:
    """The second approver approved: their approval runs it, nobody is asked again."""
    return proposal.status is ProposalStatus.CONFIRMED and proposal.second_approver is not None


def ends_question(exc: WritegateError) -> bool:
    """Whether a refused answer ends the question (else it is asked again, with why)."""
    return exc.code in FINAL_CODES


def second_decision(answer: Any, proposal_id: str) -> Confirm | Decline:
    """A second approver's answer to `proposal_id`'s question, read as every answer is
    (`parse_decision`: Agent Inbox's accept or response, LangChain's approve or reject,
    writegate's confirm or decline); `InvalidDecision` for anything else: an edit or a
    cancel is the requester's, never the approver's."""
    decision = parse_decision(answer, asked_proposal_id=proposal_id, presented=lambda: True)
    if not isinstance(decision, Confirm | Decline):
        raise InvalidDecision(
            "a second approver approves or declines the request as it was confirmed: "
            "accept, or respond with a reason",
            proposal_id=proposal_id,
        )
    return decision


def latest(get: Callable[[str], Proposal], proposal: Proposal) -> Proposal:
    """The newest of a proposal's edits (itself when it was never edited); `get` reads
    a proposal by its id."""
    while proposal.superseded_by:
        proposal = get(proposal.superseded_by)
    return proposal


@dataclass(frozen=True)
class Ask:
    """Ask about `proposal` (again): `refused` says why the last answer was refused."""

    proposal: Proposal
    refused: WritegateError | None = None

    @property
    def note(self) -> dict[str, Any] | None:
        """What to say with the question besides its preview: the second approval."""
        return dict(AWAITING_SECOND_NOTE) if awaiting_second(self.proposal) else None


@dataclass(frozen=True)
class Ran:
    """The call ran: its one receipt (a re-run, or a second approval, finds the same)."""

    receipt: Receipt


@dataclass(frozen=True)
class Over:
    """Nothing (more) runs: why. A confirm answered twice reports the first receipt."""

    error: WritegateError

    @property
    def first_receipt(self) -> dict[str, Any] | None:
        first = self.error.details.get("receipt")
        if self.error.code == "already_consumed" and first:
            return {**first}
        return None


Step = Ask | Ran | Over


def _over(proposal: Proposal) -> Over:
    ended = proposal_error(proposal.status, proposal.proposal_id, proposal.decision_reason)
    return Over(ended or ProposalNotPending())


class Conversation:
    """The rules of one question, over the service and the executor."""

    def __init__(self, service: ApprovalService, executor: Executor) -> None:
        self.service = service
        self.executor = executor

    def start(self, identity: Identity, proposal: Proposal, operation: str) -> Step:
        """Where a question about `proposal` stands before anything is asked."""
        return self._standing(identity, Ask(proposal), operation)

    def _standing(self, identity: Identity, ask: Ask, operation: str) -> Step:
        proposal = ask.proposal
        if proposal.status is ProposalStatus.EXECUTED or approved_by_second(proposal):
            # A re-run after the execution (the second approval runs it), or after an
            # approval whose run has not happened: the one run's receipt, never a question.
            return self._receipt(identity, proposal, operation)
        if proposal.status is ProposalStatus.SUPERSEDED:
            return ask  # asked again, the replayed edit finds its successor
        ended = proposal_error(proposal.status, proposal.proposal_id, proposal.decision_reason)
        return ask if ended is None else Over(ended)

    def answer(
        self,
        identity: Identity,
        asked: Ask,
        answer: Any,
        *,
        operation: str,
        presented: Callable[[], bool],
        replayed: Callable[[], bool],
    ) -> Step:
        """What `answer` does to the question `asked`. `presented`: whether the question
        reached a client before the answer (an answer naming no proposal counts only
        then); `replayed`: whether this answer was given and refused before (its refusal
        was audited then). The next step is an `Ask` again until the question is over."""
        proposal = asked.proposal
        try:
            decision = parse_decision(
                answer,
                asked_proposal_id=proposal.proposal_id,
                presented=presented,
                arg_schema=self.service.tools.get(proposal.operation).json_schema,
                operation=proposal.operation,
            )
            outcome: Ran | Over | Ended | Proposal
            if isinstance(decision, Confirm) and awaiting_second(proposal) and not replayed():
                # Confirmed already; what is left is a second approver's, never theirs.
                raise SelfApproval(proposal_id=proposal.proposal_id)
            if isinstance(decision, Confirm):
                outcome = self._confirm(identity, decision, operation, replayed)
            else:
                outcome = self._decide(identity, proposal, decision)
        except WritegateError as exc:
            if ends_question(exc):
                return Over(exc)
            return Ask(proposal, exc)  # ask again, showing why the answer was refused
        if isinstance(outcome, (Ran, Over)):
            return outcome
        if isinstance(outcome, Ended):
            return _over(outcome.proposal)
        # An edit (a fresh preview), or a confirm awaiting its second approver (the same
        # question, one step on).
        return self._standing(identity, Ask(outcome), operation)

    def _confirm(
        self, identity: Identity, decision: Confirm, operation: str, replayed: Callable[[], bool]
    ) -> Ran | Over | Proposal:
        """Decide and execute in one chain (approval/execution.py). A confirm that cannot
        run (the record moved, the policy changed, it ran already) ends the question; one
        the person can fix in their answer (a mistyped field), or that met the database
        away (nothing of it committed, or its answer was lost: a second confirm finds
        out which), raises, and the same question stands. A proposal back: it awaits
        its second approver."""
        try:
            done = self.executor.confirm(identity, decision, operation, replayed=replayed)
        except WritegateError as exc:
            if is_database_outage(exc) or exc.code in ASK_AGAIN_CODES:
                raise
            return Over(exc)
        if isinstance(done, AwaitingSecond):
            return done.proposal
        return Ran(done)

    def _receipt(self, identity: Identity, proposal: Proposal, operation: str) -> Step:
        """A question asked after its execution: the one execution's receipt, or where it
        stands, never a second run."""
        again = Confirm(action="confirm", proposal_id=proposal.proposal_id)
        try:
            done = self.executor.confirm(identity, again, operation)
        except WritegateError as exc:
            if is_database_outage(exc):
                # Not an answer for the model: the caller stops, and asking again runs
                # this again (idempotent).
                raise
            return Over(exc)
        assert not isinstance(done, AwaitingSecond)  # it was executed
        return Ran(done)

    def _decide(
        self, identity: Identity, proposal: Proposal, decision: Decline | Cancel | Edit
    ) -> Ended | Proposal:
        """Decline, cancel or edit; an edit replayed finds the edit already made."""
        if isinstance(decision, Edit) and proposal.status is ProposalStatus.SUPERSEDED:
            return self.service.get_proposal(identity, proposal.superseded_by or "")
        if (
            isinstance(decision, Edit)
            and proposal.status in _EDITABLE
            and self.service.edit_changes_nothing(proposal, decision.args)
        ):
            return proposal
        outcome = self.service.decide(identity, decision)
        assert not isinstance(outcome, Confirmation)  # a confirm goes to the executor
        return outcome

    def answer_as_second(self, approver: Identity, proposal: Proposal, answer: Any) -> Ran | Over:
        """A second approver's answer to the question `proposal` waits on: an approval
        runs the write, once (`Executor.approve_as_second`), a decline ends it with their
        words. Anything else raises `InvalidDecision` and decides nothing."""
        decision = second_decision(answer, proposal.proposal_id)
        if isinstance(decision, Confirm):
            outcome = self.executor.approve_as_second(approver, proposal.proposal_id).outcome
            return Ran(outcome) if isinstance(outcome, Receipt) else Over(outcome)
        declined = self.service.decline_as_second(
            approver, proposal.proposal_id, reason=decision.reason
        )
        return _over(declined)

    def resolve(self, identity: Identity, proposal: Proposal, why: str) -> Over:
        """The person left the question without deciding: cancel its proposal (the
        latest of its edits), and say `why`; or how it ended meanwhile."""
        proposal = latest(partial(self.service.get_proposal, identity), proposal)
        exc: WritegateError = Cancelled(
            why, proposal_id=proposal.proposal_id, state=ProposalStatus.CANCELLED.value
        )
        try:
            self.service.decide(identity, Cancel(action="cancel", proposal_id=proposal.proposal_id))
        except WritegateError as refused:  # it ended some other way meanwhile: say which
            exc = refused
        return Over(exc)
