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

from functools import partial
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphInterrupt
from langgraph.graph.message import add_messages
from langgraph.types import interrupt

from writegate.approval.contract import ApprovalRequest
from writegate.approval.conversation import Ask, Conversation, Over, Ran
from writegate.approval.errors import ForeignCall, WritegateError
from writegate.approval.models import Identity, Proposal
from writegate.approval.wire import approval_request, receipt_content, without_refusal_field
from writegate.graph.identity import identity_of, thread_of
from writegate.graph.messages import tool_error, tool_result
from writegate.graph.resolve import RESOLVE, RESOLVED, resolved_by_command
from writegate.graph.second import SecondApprover
from writegate.runtime.wiring import Runtime


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
        self.second = SecondApprover(runtime)

    @property
    def talk(self) -> Conversation:
        """The question's rules (stateless), read per use: compiling the graph touches
        no runtime field, so a runtime opened on the first run (`server_agent`) stays
        closed until then."""
        return Conversation(self.rt.service, self.rt.executor)

    def run(
        self, call: dict[str, Any], config: RunnableConfig, message_id: str | None = None
    ) -> ToolMessage:
        """The call's ToolMessage: a receipt, or why nothing ran. `message_id`: the
        model message that made the call (with the call's id, the key of the call)."""
        state: WriteState = {"call": call, "message_id": message_id or ""}
        try:
            update = self.propose(state, config)
        except ForeignCall:
            # Not the run's user's call: a second approver's answer, or refused as before.
            answered = self.second.answer(call, config)
            if answered is None:
                raise
            return answered
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
        """Ask, and keep asking until a valid structured decision for this proposal
        (the rules: approval/conversation.py).

        Before `interrupt()` this node only reads. A refused answer (free text, another
        proposal's id, an answer naming no proposal to a question nobody was shown yet)
        is shown back with its error, and the same question stands.
        """
        call, identity = state["call"], identity_of(config, self.rt.server_user)
        proposal = state.get("proposal") or self.rt.service.get_proposal(
            identity, state["proposal_id"]
        )
        # LangGraph matches answers to this node's interrupts by their order.
        where = (thread_of(config), str(config.get("configurable", {}).get("checkpoint_ns", "")))
        index = -1
        step = self.talk.start(identity, proposal, call["name"])
        while isinstance(step, Ask):
            asked = step.proposal
            request = approval_request(asked, step.refused)
            if step.note is not None:
                request["awaiting"] = step.note  # the same question, one step on
            index += 1
            question = (*where, index, asked.proposal_id)
            answer = without_refusal_field(self._ask(request, question, config), asked.args)
            if answer == RESOLVE:
                return self._resolve(call, identity, asked)
            # Asked again after this answer: it was refused then, and audited.
            again = (*where, index + 1, asked.proposal_id)
            step = self.talk.answer(
                identity,
                step,
                answer,
                operation=call["name"],
                presented=partial(self.rt.presented.was_presented, *question),
                replayed=partial(self.rt.presented.was_presented, *again),
            )
        return {"messages": [_message(call, step)]}

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
        why = "the user marked the conversation resolved without deciding; do not retry it"
        message = tool_error(
            call["id"], call["name"], self.talk.resolve(identity, proposal, why).error
        )
        message.artifact = RESOLVED
        return {"messages": [message]}


def _message(call: dict[str, Any], step: Ran | Over) -> ToolMessage:
    """The call's message when the question is over: the receipt, the first receipt of
    a confirm answered twice, or why nothing ran."""
    if isinstance(step, Ran):
        return tool_result(call["id"], call["name"], receipt_content(step.receipt))
    first = step.first_receipt
    if first is not None:
        return tool_result(call["id"], call["name"], first)
    return tool_error(call["id"], call["name"], step.error)
