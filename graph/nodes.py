"""The graph's nodes: agent, router, read, propose, approval (which executes), join.

A write tool call is a request, never a fact: the router sends it to `propose`, which
freezes a proposal; `approval` pauses on `interrupt()` until a structured decision
arrives; only then does it consume the confirmation token and execute. LangGraph
re-runs a node from its start on resume, so `approval` does nothing with a side effect
before `interrupt()` returns, and every call it makes after is idempotent.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, SystemMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.graph import END
from langgraph.types import Command, Send, interrupt

from approval.canonical import digest
from approval.decisions import Edit, parse_decision
from approval.errors import (
    ProposalNotPending,
    ValidationFailed,
    WritegateError,
)
from approval.models import Identity, Proposal, ProposalStatus
from approval.outcomes import execution_outcome, proposal_error
from approval.service import Confirmation, Ended
from graph.messages import approval_request, receipt_content, tool_error, tool_result
from graph.runtime import Runtime

SYSTEM_PROMPT = (
    "You are a support assistant with tools. Read tools answer at once. Write tools "
    "(refund_order, create_ticket, update_ticket) only PROPOSE a change: a person sees an "
    "exact preview and decides. A write's result tells you what really happened: a "
    "receipt with status 'succeeded', or an error code such as declined, cancelled, "
    "proposal_expired or outcome_unknown. Never claim a write happened without a receipt, "
    "and never re-propose something the user declined or that is being reconciled. "
    "Amounts are integers in minor units with an explicit currency; if the currency is "
    "unclear, ask."
)


# A confirmed proposal is still editable: a node re-run after a crash replays the edit.
_EDITABLE = (ProposalStatus.AWAITING, ProposalStatus.CONFIRMED)


class MissingIdentity(RuntimeError):
    """The host did not say who is acting; writegate never guesses it."""


def identity_of(config: RunnableConfig) -> Identity:
    """User and tenant come from the host's run config, never from the model or a resume."""
    conf = config.get("configurable") or {}
    user, tenant = conf.get("user_id"), conf.get("tenant_id")
    if not isinstance(user, str) or not user or not isinstance(tenant, str) or not tenant:
        raise MissingIdentity(
            "set config['configurable']['user_id'] and ['tenant_id'] from your "
            "authenticated session before running the writegate graph"
        )
    roles = conf.get("roles") or ()
    return Identity(user, tenant, frozenset(roles))


def _request_of(call: Mapping[str, Any]) -> str:
    """A write call's name and arguments as one comparable string (key order aside)."""
    return json.dumps([call["name"], call["args"]], sort_keys=True, default=str)


def thread_of(config: RunnableConfig) -> str:
    thread = (config.get("configurable") or {}).get("thread_id")
    return str(thread) if thread else "no-thread"


class Nodes:
    def __init__(self, runtime: Runtime, model: Runnable[Any, Any]) -> None:
        self.rt = runtime
        self.model = model

    # -- agent and routing ------------------------------------------------------------

    def agent(self, state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        identity_of(config)  # fail before the model runs if the host forgot identity
        messages: list[AnyMessage] = [SystemMessage(SYSTEM_PROMPT), *state["messages"]]
        reply = self.model.invoke(messages, config)
        return {"messages": [reply]}

    def route(self, state: dict[str, Any]) -> list[Send] | str:
        last = state["messages"][-1]
        if not isinstance(last, AIMessage) or not last.tool_calls:
            return END
        counts = Counter(call["id"] for call in last.tool_calls)
        writes: dict[str, str | None] = {}  # (name, arguments) -> the first call that asked for it
        sends = []
        for call in last.tool_calls:
            name = call["name"]
            if counts[call["id"]] > 1:
                sends.append(Send("refuse", {"call": call}))
            elif name in self.rt.registry and not self.rt.registry.get(name).requires_approval:
                sends.append(Send("read", {"call": call}))
            elif (same := writes.setdefault(_request_of(call), call["id"])) != call["id"]:
                # The same write twice in one turn: the parallel branches would race for
                # one proposal. Only the first is proposed; the twin is told why not.
                sends.append(Send("refuse", {"call": call, "twin_of": same}))
            else:  # writes, and unknown names (propose refuses them with a clear error)
                sends.append(Send("propose", {"call": call}))
        return sends

    def refuse(self, branch: dict[str, Any]) -> Command[str]:
        """Two calls sharing one id would share one approval: refuse them both.

        A second call asking for exactly the same write as an earlier one of its turn is
        refused too; the earlier one carries the request.
        """
        call, twin = branch["call"], branch.get("twin_of")
        if twin:
            exc = ValidationFailed(
                f"the same write was already requested in this turn by call {twin}; "
                "nothing was proposed for this duplicate",
                tool_call_id=call["id"],
                duplicate_of=twin,
            )
        else:
            exc = ValidationFailed(
                "two tool calls in one turn share this id; nothing was proposed for either",
                tool_call_id=call["id"],
            )
        return Command(
            update={"messages": [tool_error(call["id"], call["name"], exc)]}, goto="join"
        )

    def read(self, branch: dict[str, Any], config: RunnableConfig) -> Command[str]:
        call = branch["call"]
        try:
            result = self.rt.service.read(
                identity_of(config), call["name"], call["args"], thread_id=thread_of(config)
            )
            content = result if "status" in result else {"status": "ok", **result}
            message = tool_result(call["id"], call["name"], content)
        except WritegateError as exc:
            message = tool_error(call["id"], call["name"], exc)
        return Command(update={"messages": [message]}, goto="join")

    # -- the write path ---------------------------------------------------------------

    def propose(self, branch: dict[str, Any], config: RunnableConfig) -> Command[Any]:
        call = branch["call"]
        try:
            proposal = self.rt.service.propose(
                identity_of(config),
                thread_id=thread_of(config),
                tool_call_id=call["id"],
                tool_name=call["name"],
                raw_args=call["args"],
            )
        except WritegateError as exc:
            return Command(
                update={"messages": [tool_error(call["id"], call["name"], exc)]}, goto="join"
            )
        return Command(goto=Send("approval", {"call": call, "proposal_id": proposal.proposal_id}))

    def approval(self, branch: dict[str, Any], config: RunnableConfig) -> Command[Any]:
        """Ask, and keep asking until a valid structured decision for this proposal.

        Before `interrupt()` this node only reads. A refused answer (free text, another
        proposal's id) is shown back with its error, and the same question stands.
        """
        call, identity = branch["call"], identity_of(config)
        proposal = self.rt.service.get_proposal(identity, branch["proposal_id"])
        error: WritegateError | None = None
        while True:
            ended = self._ended(call, identity, proposal)
            if ended is not None:
                return ended
            answer = interrupt(approval_request(proposal, error))
            try:
                decision = parse_decision(answer, asked_proposal_id=proposal.proposal_id)
                outcome = self._decide(identity, proposal, decision)
            except WritegateError as exc:
                if exc.code in ("proposal_expired", "proposal_not_pending", "already_consumed"):
                    return self._finish(call, exc)
                error = exc  # ask again, showing why the answer was refused
                continue
            if isinstance(outcome, Confirmation):
                # Executed here, not in a node of its own: that node would only run once
                # every sibling write of this turn was answered too (one superstep), so a
                # confirmed write would wait on unrelated questions while its token
                # expired. This also keeps the one-time token out of the checkpoint.
                return self._execute(call, identity, proposal.proposal_id, outcome.token)
            if isinstance(outcome, Ended):
                return self._finish(
                    call, proposal_error(outcome.proposal.status, proposal.proposal_id)
                )
            proposal, error = outcome, None  # an edit: a new proposal, a fresh preview

    def _decide(
        self, identity: Identity, proposal: Proposal, decision: Any
    ) -> Confirmation | Ended | Proposal:
        """Decide; a node re-run after an edit finds the edit already made and reuses it."""
        if isinstance(decision, Edit) and proposal.status is ProposalStatus.SUPERSEDED:
            current = self.rt.service.get_proposal(identity, proposal.superseded_by or "")
            return current
        if isinstance(decision, Edit) and proposal.status in _EDITABLE:
            # An edit that changes nothing keeps the question as it is. The ledger would
            # otherwise find this very proposal as the "open one" for the edited
            # arguments and mark it superseded by itself, so it could never be confirmed.
            spec = self.rt.registry.get(proposal.operation)
            if digest(spec.normalize(decision.args)) == proposal.args_digest:
                return proposal
        return self.rt.service.decide(identity, decision)

    def _ended(
        self, call: dict[str, Any], identity: Identity, proposal: Proposal
    ) -> Command[Any] | None:
        """A proposal that is already past its question (a re-run after a crash)."""
        if proposal.status is ProposalStatus.EXECUTED:
            return self._execute(call, identity, proposal.proposal_id, "")
        exc = proposal_error(proposal.status, proposal.proposal_id)
        if proposal.status is ProposalStatus.SUPERSEDED or exc is None:
            return None
        return self._finish(call, exc)

    @staticmethod
    def _finish(call: dict[str, Any], exc: WritegateError | None) -> Command[Any]:
        exc = exc or ProposalNotPending()
        return Command(
            update={"messages": [tool_error(call["id"], call["name"], exc)]}, goto="join"
        )

    def _execute(
        self, call: dict[str, Any], identity: Identity, proposal_id: str, token: str
    ) -> Command[str]:
        try:
            if token:
                receipt = self.rt.executor.execute(
                    identity, token, proposal_id=proposal_id, operation=call["name"]
                )
            else:  # re-run after the token was consumed: report, never re-execute
                receipt = self._existing_receipt(proposal_id, identity)
            message = tool_result(call["id"], call["name"], receipt_content(receipt))
        except WritegateError as exc:
            receipt_dict = exc.details.get("receipt")
            if exc.code == "already_consumed" and receipt_dict:
                message = tool_result(call["id"], call["name"], {**receipt_dict})
            else:
                message = tool_error(call["id"], call["name"], exc)
        return Command(update={"messages": [message]}, goto="join")

    def _existing_receipt(self, proposal_id: str, identity: Identity) -> Any:
        with self.rt.store.transaction() as tx:
            execution = tx.get_execution(proposal_id=proposal_id)
        if execution is None or execution.subject != identity.user_id:
            raise ProposalNotPending(proposal_id=proposal_id)
        return execution_outcome(execution)

    def join(self, state: dict[str, Any]) -> Command[str]:
        """Back to the model once every call of its last turn has a result."""
        last_ai = next(m for m in reversed(state["messages"]) if isinstance(m, AIMessage))
        answered = {m.tool_call_id for m in state["messages"] if isinstance(m, ToolMessage)}
        if all(call["id"] in answered for call in last_ai.tool_calls):
            return Command(goto="agent")
        return Command(goto=END)
