"""What every scenario works with: the opened Writegate, the recorded tool, the
caller's arguments, effect counter and fault hook, and the protocol's steps.

The steps go through writegate's own service and executor (the same objects the
graph, the HTTP service and the MCP server use), each call on its own pooled
connection; `graph()` is the library's `wg.tool_node()` in the smallest graph.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langgraph.graph import END, START, MessagesState, StateGraph

from writegate.approval.decisions import Confirm
from writegate.approval.errors import WritegateError
from writegate.approval.execution import Executor, RetryPolicy
from writegate.approval.models import Identity, Proposal, Receipt
from writegate.approval.reconcile import ReconcilePolicy, Settled
from writegate.approval.service import ApprovalService, Confirmation
from writegate.runtime.writegate import Writegate
from writegate.testing.recorder import Fault, FaultHook, Recorder
from writegate.testing.report import Violation, expect

# Fast retries: the kit checks which keys retries carry, not how long they wait.
KIT_RETRY = RetryPolicy(max_retries=2, base_delay=0.0, call_timeout=10.0)
KIT_RECONCILE = ReconcilePolicy(backoff=0.0, max_checks=3)


def refusal(exc: WritegateError) -> str:
    return f"{exc.code} ({exc})"


@dataclass
class Harness:
    wg: Writegate
    tool: Recorder
    identity: Identity
    make_args: Callable[[], dict[str, Any]]
    make_edited: Callable[[dict[str, Any]], dict[str, Any]] | None
    effects: Callable[[], int]
    faults: FaultHook
    concurrency: int

    @property
    def service(self) -> ApprovalService:
        return self.wg.runtime.service

    @property
    def executor(self) -> Executor:
        return self.wg.runtime.executor

    @property
    def strangers(self) -> dict[str, Identity]:
        """Another user of the same tenant, and the same user id in another tenant."""
        me = self.identity
        return {
            "another user": Identity(f"{me.user_id}_stranger", me.tenant_id),
            "another tenant": Identity(me.user_id, f"{me.tenant_id}_stranger"),
        }

    @property
    def has_downstream(self) -> bool:
        return bool(self.tool.has_downstream)

    @property
    def has_lookup(self) -> bool:
        return self.tool.has_lookup

    @property
    def dedupes_by_key(self) -> bool:
        """Declared by the tool: its downstream drops a repeated request key, so the
        executor and the reconciler send a call that may have applied again."""
        return self.tool.dedupes_by_key

    # -- the protocol's steps -----------------------------------------------------------

    def propose(self, args: dict[str, Any]) -> Proposal:
        try:
            return self.service.propose(
                self.identity,
                thread_id=f"kit_{secrets.token_hex(6)}",
                tool_call_id=f"call_{secrets.token_hex(6)}",
                tool_name=self.tool.name,
                raw_args=args,
            )
        except WritegateError as exc:
            raise Violation(
                f"valid arguments {args!r} could not be proposed: {refusal(exc)}. "
                "Give arguments this identity may use, fresh for every scenario "
                "(pass `args` as a callable when one write changes what the next may do)."
            ) from exc

    def confirm_decision(self, proposal: Proposal) -> Confirm:
        """The person's confirm, with the key field re-typed when the tier asks for it."""
        confirmation = proposal.preview.get("confirmation", {})
        expect(
            not confirmation.get("second_approver"),
            f"these arguments fall in tier {confirmation.get('tier')!r}, which needs a "
            "second approver; give arguments (or a policy) in a one-person tier",
        )
        return Confirm(
            action="confirm", proposal_id=proposal.proposal_id, retyped=retyped(proposal)
        )

    def confirm(self, proposal: Proposal) -> Confirmation:
        decided = self.service.decide(self.identity, self.confirm_decision(proposal))
        expect(isinstance(decided, Confirmation), f"a confirm gave {decided!r}, not a token")
        assert isinstance(decided, Confirmation)
        return decided

    def execute(self, token: str) -> Receipt:
        return self.executor.execute(self.identity, token, operation=self.tool.name)

    def drain(self) -> list[Settled]:
        """Run the reconciler until nothing is due (fast: no backoff, no sleeping)."""
        reconciler = self.wg.reconciler(policy=KIT_RECONCILE, retry=KIT_RETRY, sleep=lambda _: None)
        return reconciler.drain()

    def reconcile(self, execution_id: str) -> Settled:
        """Run the reconciler until nothing is due; how our execution was settled."""
        settled = [s for s in self.drain() if s.execution_id == execution_id]
        expect(bool(settled), f"the reconciler never picked up execution {execution_id}")
        return settled[-1]

    def lost(self, fault: Fault) -> Any:
        return self.faults(fault)

    # -- the smallest graph around wg.tool_node() ---------------------------------------

    def graph(self) -> Any:
        return smallest_graph(self.wg)

    def run_config(self) -> dict[str, Any]:
        return run_config(self.identity)


def smallest_graph(wg: Writegate) -> Any:
    """START -> `wg.tool_node()` -> END, on the Writegate's checkpointer."""
    builder = StateGraph(MessagesState)
    builder.add_node("tools", wg.tool_node())
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=wg.checkpointer)


def run_config(identity: Identity | None) -> dict[str, Any]:
    """A new thread's run config, naming `identity` as the host would (None: nobody)."""
    configurable = {"thread_id": f"kit_{secrets.token_hex(6)}"}
    if identity is not None:
        configurable.update(user_id=identity.user_id, tenant_id=identity.tenant_id)
    return {"configurable": configurable}


def retyped(proposal: Proposal) -> str | None:
    """What a careful person types when the tier asks to re-type the key field."""
    rule = (proposal.risk or {}).get("retype")
    if not rule:
        return None
    if rule.get("expected"):  # a declared amount or count: as the preview shows it
        return str(rule["expected"]["display"])
    name = rule["field"]
    field: dict[str, Any] = next(
        (f for f in proposal.preview.get("fields", []) if f.get("name") == name), {}
    )
    value = proposal.args.get(name, field.get("value"))
    return str(value) if rule["match"] == "last4" else str(field.get("display", value))
