"""A second approver's answer, given on the requester's own thread (Agent Inbox).

Under a tier with a second approver, the requester's confirm leaves their question open
with an `awaiting: {"what": "second_approval"}` block. An approver of the same tenant
who can read that thread (the example auth handler lets them while it waits for them,
`examples/server_auth.py`) answers it there, as Agent Inbox answers any question: a run
on the thread whose `command.resume` is their answer. The run is theirs (the server's
authenticated user), so the gate meets a proposal that is not the run's user's; where
it is one the ledger lists for that approver (`awaiting_second_approval`: their tenant,
the role, never their own request), their answer decides it:

- an approval (Agent Inbox's accept, LangChain's approve, writegate's confirm) runs the
  write once, through `Executor.approve_as_second`, audited as theirs;
- a decline (Agent Inbox's response with its text, LangChain's reject, writegate's
  decline) ends it, audited as theirs; the text goes to the requester's thread.

The call's ToolMessage (the receipt, or why nothing ran) is the thread's answer, marked
`BY_SECOND_APPROVER`: the turn ends there, with no model turn under the approver's
name, and the model reads it with the requester's next message. Anything else from the
approver fails the run before anything is decided; the question stands as it was.

Only the approver's own answer is read: the requester's earlier answers to the same
question, which LangGraph replays first, are theirs and are skipped.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import CONFIG_KEY_SCRATCHPAD
from langgraph.types import interrupt

from writegate.approval.conversation import (
    AWAITING_SECOND_NOTE,
    Ask,
    Conversation,
    Ran,
    Step,
    second_decision,
)
from writegate.approval.errors import InvalidDecision
from writegate.approval.models import Identity, Proposal
from writegate.approval.review import APPROVER_ROLE
from writegate.approval.views import PageArgs
from writegate.approval.wire import approval_request, receipt_content
from writegate.graph.identity import identity_of, thread_of
from writegate.graph.messages import tool_error, tool_result
from writegate.runtime.wiring import Runtime

# The artifact of a ToolMessage a second approver's answer wrote: the run ends there.
BY_SECOND_APPROVER = {"answered_by": "second_approver"}


def second_approval_run(run: dict[str, Any], proposal_id: str) -> None:
    """Refuse (`InvalidDecision`) a run on someone else's thread that is anything but
    a second approver's answer to `proposal_id`: `command={"resume": answer}` at the
    thread's head, no input, no goto or update, no webhook or breakpoints. `run`:
    LangGraph Server's run (an auth handler's `create_run` value's `kwargs`,
    `examples/server_auth.py`): the approver answers there and does nothing else."""
    command = run.get("command")
    configurable = (run.get("config") or {}).get("configurable") or {}
    extras = ("input", "webhook", "interrupt_before", "interrupt_after")
    if (
        not (isinstance(command, dict) and set(command) == {"resume"})
        or any(run.get(key) for key in extras)
        or configurable.get("checkpoint_id")
    ):
        raise InvalidDecision(
            "on a thread that is not yours, a second approver only answers its waiting "
            "approval: a run at the thread's head with command.resume and nothing else",
            proposal_id=proposal_id,
        )
    second_decision(command["resume"], proposal_id)


class SecondApprover:
    """The gate's way for a second approver's answer (see the module docstring)."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime

    @property
    def talk(self) -> Conversation:
        """The question's rules, read per use (the runtime may open on the first run)."""
        return Conversation(self.rt.service, self.rt.executor)

    def waiting(self, approver: Identity, thread_id: str, tool_call_id: str) -> Proposal | None:
        """The proposal of this call that waits for `approver`, or None: not an approver,
        not their tenant's, their own request, or not (or no longer) waiting for one."""
        if APPROVER_ROLE not in approver.roles:
            return None
        page = self.rt.service.awaiting_second_approval(approver, PageArgs(thread_id=thread_id))
        found = [p for p in page.items if p.tool_call_id == tool_call_id]
        return found[0] if found else None

    def answer(self, call: dict[str, Any], config: RunnableConfig) -> ToolMessage | None:
        """The call's ToolMessage once this run's approver has decided it, or None when
        the run's user is no second approver of it (the caller then refuses the run)."""
        approver = identity_of(config, self.rt.server_user)
        proposal = self.waiting(approver, thread_of(config), str(call["id"]))
        if proposal is None:
            return None
        request = approval_request(proposal, None)
        request["awaiting"] = dict(AWAITING_SECOND_NOTE)
        message = _message(
            call, self.talk.answer_as_second(approver, proposal, _their_answer(config, request))
        )
        message.artifact = BY_SECOND_APPROVER
        return message


def _their_answer(config: RunnableConfig, request: Any) -> Any:
    """The answer this run brought: LangGraph replays the task's earlier answers (the
    requester's) to its first interrupts, in order; the one after them is this run's."""
    scratchpad = (config.get("configurable") or {})[CONFIG_KEY_SCRATCHPAD]
    for _ in range(len(scratchpad.resume)):
        interrupt(request)  # the requester's own answer, replayed: not the approver's
    return interrupt(request)  # none brought: the same question stands


def _message(call: dict[str, Any], step: Step) -> ToolMessage:
    if isinstance(step, Ran):
        return tool_result(call["id"], call["name"], receipt_content(step.receipt))
    assert not isinstance(step, Ask)  # a second approver's answer ends the question
    return tool_error(call["id"], call["name"], step.error)
