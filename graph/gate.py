"""The gate for one write tool call: propose, ask until a valid decision, execute.

The agent graph, the tool node and the middleware run one gate per write call, each in
its own task (the parent fans the calls out with `Send`), so each asks its own question.
LangGraph re-runs a node from its start on resume; every step is safe to repeat: the
proposal is found again by its call's key, answers already given replay in order, and a
second execution reports the first receipt. So `approval` does nothing with a side
effect before `interrupt()` returns, and the gate simply runs again from the top.

An answer naming no proposal (LangChain's shape) may only answer a question that reached
a client: an interrupt that ended an earlier run, recorded as it ends the run
(`presented`). LangGraph hands a resume value to whichever interrupt comes first, even
one raised in the same run (after the thread's state was changed, say), and that
question nobody has seen.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphInterrupt
from langgraph.graph.message import add_messages
from langgraph.types import interrupt

from writegate.approval.contract import ApprovalRequest
from writegate.approval.decisions import Cancel, Confirm, Edit, parse_decision
from writegate.approval.errors import (
    Cancelled,
    ForeignCall,
    ProposalNotPending,
    WritegateError,
    is_database_outage,
)
from writegate.approval.execution import AwaitingSecond
from writegate.approval.models import Identity, Proposal, ProposalStatus
from writegate.approval.outcomes import proposal_error
from writegate.approval.service import Confirmation, Ended
from writegate.approval.wire import approval_request, receipt_content, without_refusal_field
from writegate.graph.identity import identity_of, thread_of
from writegate.graph.messages import tool_error, tool_result
from writegate.graph.resolve import RESOLVE, RESOLVED, resolved_by_command
from writegate.runtime.wiring import Runtime

# A confirmed proposal is still editable: a node re-run after a crash replays the edit.
_EDITABLE = (ProposalStatus.AWAITING, ProposalStatus.CONFIRMED)
# Answers after which the question is over: report, do not ask again.
_FINAL_CODES = ("proposal_expired", "proposal_not_pending", "already_consumed", "policy_changed")
# A confirm refused for what the person can fix in their answer: the same question stands.
_ASK_AGAIN = ("invalid_decision", "retype_mismatch")
_AWAITING_SECOND = {
    "what": "second_approval",
    "message": "You confirmed; an approver of your tenant must approve this exact preview. "
    "Their approval runs it; this question then resolves with its receipt.",
}


def _approved_by_second(proposal: Proposal) -> bool:
    return proposal.status is ProposalStatus.CONFIRMED and proposal.second_approver is not None


class WriteState(TypedDict, total=False):
    call: dict[str, Any]
    message_id: str  # the model message that made the call ("" if unknown)
    proposal_id: str
    proposal: Proposal
    messages: Annotated[list[AnyMessage], add_messages]


class ToolCallGate:
    """One write tool call through writegate: propose, ask until a valid decision,
    execute; `run` does all three, `node` is the graph node a `Send` reaches."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime

    def run(
        self, call: dict[str, Any], config: RunnableConfig, message_id: str | None = None
    ) -> ToolMessage:
        """The call's ToolMessage: a receipt, or why nothing ran. `message_id`: the
        model message that made the call (with the call's id, the key of the call)."""
        state: WriteState = {"call": call, "message_id": message_id or ""}
        update = self.propose(state, config)
        if not update.get("messages"):
            state.update(update)  # type: ignore[typeddict-item]
            update = self.approval(state, config)
        message: ToolMessage = update["messages"][-1]
        return message

    def node(self, task: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        """A graph node for one call sent to it (`Send(node, {"call": call,
        "message_id": id})`)."""
        return {"messages": [self.run(task["call"], config, task.get("message_id"))]}

    def propose(self, state: WriteState, config: RunnableConfig) -> dict[str, Any]:
        call = state["call"]
        identity = identity_of(config, self.rt.server_user)  # none: the run fails, unasked
        try:
            proposal = self.rt.service.propose(
                identity,
                thread_id=thread_of(config),
                tool_call_id=call["id"],
                tool_name=call["name"],
                raw_args=call["args"],
                message_id=state.get("message_id", ""),
            )
        except ForeignCall:
            # This call's proposal is someone else's: a resume by another user or tenant.
            # The run stops, the question stands, and nothing answers it for the owner.
            raise
        except WritegateError as exc:
            return {"messages": [tool_error(call["id"], call["name"], exc)]}
        # The proposal travels on to `approval`, which need not read it again.
        return {"proposal_id": proposal.proposal_id, "proposal": proposal}

    def approval(self, state: WriteState, config: RunnableConfig) -> dict[str, Any]:
        """Ask, and keep asking until a valid structured decision for this proposal.

        Before `interrupt()` this node only reads. A refused answer (free text, another
        proposal's id, an answer naming no proposal to a question nobody was shown yet)
        is shown back with its error, and the same question stands.
        """
        call, identity = state["call"], identity_of(config, self.rt.server_user)
        proposal = state.get("proposal") or self.rt.service.get_proposal(
            identity, state["proposal_id"]
        )
        error: WritegateError | None = None
        # LangGraph matches answers to this node's interrupts by their order.
        where = (thread_of(config), str(config.get("configurable", {}).get("checkpoint_ns", "")))
        index = -1
        while True:
            if proposal.status is ProposalStatus.EXECUTED or _approved_by_second(proposal):
                # A re-run after the execution (the second approval runs it), or after an
                # approval whose run has not happened: the one run's receipt, never a question.
                return self._confirmed(call, identity, proposal)
            ended = proposal_error(proposal.status, proposal.proposal_id, proposal.decision_reason)
            if ended is not None and proposal.status is not ProposalStatus.SUPERSEDED:
                return self._finish(call, ended)
            request = approval_request(proposal, error)
            if proposal.status is ProposalStatus.AWAITING_SECOND:
                request["awaiting"] = dict(_AWAITING_SECOND)  # the same question, one step on
            index += 1
            question = (*where, index, proposal.proposal_id)
            answer = without_refusal_field(self._ask(request, question, config), proposal.args)
            if answer == RESOLVE:
                return self._resolve(call, identity, proposal)
            try:
                decision = parse_decision(
                    answer,
                    asked_proposal_id=proposal.proposal_id,
                    presented=partial(self.rt.presented.was_presented, *question),
                    arg_schema=self.rt.registry.get(proposal.operation).json_schema,
                    operation=proposal.operation,
                )
                if isinstance(decision, Confirm):
                    # Asked again after this answer: it was refused then, and audited.
                    (thread, ns, at, pid) = question
                    again = partial(self.rt.presented.was_presented, thread, ns, at + 1, pid)
                    confirmed = self._confirm(call, identity, decision, again)
                    if not isinstance(confirmed, Proposal):
                        return confirmed
                    proposal, error = confirmed, None  # awaiting its second approver
                    continue
                outcome = self._decide(identity, proposal, decision)
            except WritegateError as exc:
                if exc.code in _FINAL_CODES:
                    return self._finish(call, exc)
                error = exc  # ask again, showing why the answer was refused
                continue
            if isinstance(outcome, Ended):
                ended_as = outcome.proposal
                return self._finish(
                    call,
                    proposal_error(ended_as.status, ended_as.proposal_id, ended_as.decision_reason),
                )
            proposal, error = outcome, None  # an edit: a new proposal, a fresh preview

    def _confirm(
        self,
        call: dict[str, Any],
        identity: Identity,
        decision: Confirm,
        replayed: Callable[[], bool],
    ) -> dict[str, Any] | Proposal:
        """Decide and execute in one chain (approval/execution.py): the call's message,
        or the proposal now awaiting its second approver (the same question, one step
        on). A confirm that cannot run (the record moved, the policy changed, it ran
        already) ends the question and tells the model why; one the person can fix in
        their answer (a mistyped field), or that met the database away (nothing of it
        committed, or its answer was lost: a second confirm finds out which), raises, and
        the same question stands."""
        try:
            done = self.rt.executor.confirm(identity, decision, call["name"], replayed=replayed)
        except WritegateError as exc:
            if is_database_outage(exc) or exc.code in _ASK_AGAIN:
                raise
            return self._finish(call, exc)
        if isinstance(done, AwaitingSecond):
            return done.proposal
        return {"messages": [tool_result(call["id"], call["name"], receipt_content(done))]}

    def _confirmed(
        self, call: dict[str, Any], identity: Identity, proposal: Proposal
    ) -> dict[str, Any]:
        """A node re-run after its execution: the one execution's receipt, or where it
        stands, never a second run."""
        again = Confirm(action="confirm", proposal_id=proposal.proposal_id)
        try:
            done = self.rt.executor.confirm(identity, again, call["name"])
        except WritegateError as exc:
            if is_database_outage(exc):
                # Not an answer for the model: the run stops here, the thread keeps its
                # last checkpoint, and invoking it again re-runs this node (idempotent).
                raise
            return self._finish(call, exc)
        assert not isinstance(done, AwaitingSecond)  # it was executed
        return {"messages": [tool_result(call["id"], call["name"], receipt_content(done))]}

    def _ask(
        self,
        request: ApprovalRequest,
        question: tuple[str, str, int, str],
        config: RunnableConfig,
    ) -> Any:
        try:
            return interrupt(request)
        except GraphInterrupt:
            if resolved_by_command(config, str(request["tool_call_id"])):
                return RESOLVE  # "Mark as Resolved" (graph/resolve.py): not asked again
            # The question ends this run: from now on a client can read it.
            self.rt.presented.record(*question)
            raise

    def _resolve(
        self, call: dict[str, Any], identity: Identity, proposal: Proposal
    ) -> dict[str, Any]:
        """The thread was marked resolved: cancel this question's proposal (the latest
        of its edits: a forked run asks from the first), end the turn."""
        while proposal.superseded_by:
            proposal = self.rt.service.get_proposal(identity, proposal.superseded_by)
        exc: WritegateError = Cancelled(
            "the user marked the conversation resolved without deciding; do not retry it",
            proposal_id=proposal.proposal_id,
            state=ProposalStatus.CANCELLED.value,
        )
        try:
            self.rt.service.decide(
                identity, Cancel(action="cancel", proposal_id=proposal.proposal_id)
            )
        except WritegateError as refused:  # it ended some other way meanwhile: say which
            exc = refused
        message = tool_error(call["id"], call["name"], exc)
        message.artifact = RESOLVED
        return {"messages": [message]}

    def _decide(self, identity: Identity, proposal: Proposal, decision: Any) -> Ended | Proposal:
        """Decline, cancel or edit; a node re-run after an edit finds the edit already
        made and reuses it."""
        if isinstance(decision, Edit) and proposal.status is ProposalStatus.SUPERSEDED:
            return self.rt.service.get_proposal(identity, proposal.superseded_by or "")
        if (
            isinstance(decision, Edit)
            and proposal.status in _EDITABLE
            and self.rt.service.edit_changes_nothing(proposal, decision.args)
        ):
            return proposal
        outcome = self.rt.service.decide(identity, decision)
        assert not isinstance(outcome, Confirmation)  # a confirm goes to the executor
        return outcome

    @staticmethod
    def _finish(call: dict[str, Any], exc: WritegateError | None) -> dict[str, Any]:
        """The call's message when nothing (more) runs: why, or the first receipt of a
        confirm answered twice."""
        exc = exc or ProposalNotPending()
        first = exc.details.get("receipt")
        if exc.code == "already_consumed" and first:
            return {"messages": [tool_result(call["id"], call["name"], {**first})]}
        return {"messages": [tool_error(call["id"], call["name"], exc)]}
