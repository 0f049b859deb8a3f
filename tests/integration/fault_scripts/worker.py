"""A child process for the fault-injection suite: executes, approves as the second
approver (which executes), reconciles or runs the graph.

    python -m tests.integration.fault_scripts.worker     (one JSON job on stdin)

The job says what to do and at which step to die: the step hook sends SIGKILL to this
very process, so nothing after that point runs (no cleanup, no `finally`, no flush).
With `"barrier": true` the child prints `ready` once it is fully set up and waits for
a `go` line, so several children can be released at the same moment. It ends by
printing one JSON line: `{"status": ...}` for a receipt or `{"code": ...}` for an error.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import timedelta
from typing import Any

from tests.demo_registry import default_registry
from writegate.approval.decisions import Confirm
from writegate.approval.errors import WritegateError
from writegate.approval.execution import Executor, RetryPolicy
from writegate.approval.models import Identity
from writegate.approval.reconcile import ReconcilePolicy, Reconciler
from writegate.approval.service import ApprovalService, Confirmation
from writegate.checkpoints.ledger import PgLedgerStore
from writegate.checkpoints.ops import PgBacklog
from writegate.checkpoints.pool import open_pool
from writegate.demo.provider_http import HttpProvider


def kill_at(step: str | None) -> Any:
    def hook(reached: str) -> None:
        if reached == step:
            print(json.dumps({"killed_at": reached}), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def short_lease(job: dict[str, Any]) -> RetryPolicy:
    """A killed worker's executions are due soon; the deadline stays within the lease."""
    lease = job.get("lease_s", 1.0)
    return RetryPolicy(base_delay=0.01, call_timeout=0.8 * lease, lease=timedelta(seconds=lease))


def _barrier(job: dict[str, Any]) -> None:
    if job.get("barrier"):
        print("ready", flush=True)
        sys.stdin.readline()


def run_ledger_job(job: dict[str, Any]) -> dict[str, Any]:
    pool = open_pool(job["db"], max_size=4)
    service = ApprovalService(
        PgLedgerStore(pool), default_registry(HttpProvider(job["provider"], timeout=1.0))
    )
    retry = short_lease(job)
    hook = kill_at(job.get("kill_at"))
    if job["mode"] == "reconcile":
        policy = ReconcilePolicy(lease=retry.lease)
        backlog = PgBacklog(pool)
        reconciler = Reconciler(service, backlog, policy=policy, retry=retry, step_hook=hook)
        _barrier(job)
        return {"settled": [s.__dict__ for s in reconciler.drain()]}
    executor = Executor(service, retry=retry, step_hook=hook)
    identity = Identity(job["user"], job["tenant"])
    _barrier(job)
    if job["mode"] == "second_approve":  # the approver's process: the approval runs it
        approver = Identity(job["approver"], job["tenant"], frozenset({"approver"}))
        approved = executor.approve_as_second(approver, job["proposal_id"])
        return approved.outcome_body()
    token = job.get("token", "")
    if job["mode"] == "confirm_execute":
        confirmation = service.decide(
            identity, Confirm(action="confirm", proposal_id=job["proposal_id"])
        )
        assert isinstance(confirmation, Confirmation)
        token = confirmation.token
    receipt = executor.execute(identity, token, proposal_id=job["proposal_id"])
    return receipt.to_dict()


def run_graph_job(job: dict[str, Any]) -> dict[str, Any]:
    """Propose, pause and confirm a refund in the real graph; die where told."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.types import Command

    from writegate.demo.runtime import open_demo
    from writegate.graph.build import build_graph
    from writegate.graph.scripted import ScriptedChatModel

    retry = short_lease(job)
    rt = open_demo(
        job["db"],
        setup=False,
        provider=HttpProvider(job["provider"], timeout=1.0),
        retry=retry,
        step_hook=kill_at(job.get("kill_at")),
    ).runtime
    args = {"order_id": job["order_id"], "amount_minor": job["amount"], "currency": "CNY"}
    call = {"name": "refund_order", "args": {**args, "reason": "broken"}, "id": job["call_id"]}
    model = ScriptedChatModel(script=[AIMessage("", tool_calls=[call]), AIMessage("done")])
    graph = build_graph(rt, model=model, checkpointer=rt.checkpointer)
    config: Any = {"configurable": {**job["configurable"]}}
    out = graph.invoke({"messages": [HumanMessage("refund it")]}, config)
    (asked,) = out["__interrupt__"]
    decision = {"action": "confirm", "proposal_id": asked.value["proposal_id"]}
    out = graph.invoke(Command(resume=decision), config)
    return {"status": "finished", "messages": len(out["messages"])}


def main() -> None:
    job = json.loads(sys.stdin.readline())
    try:
        report = run_graph_job(job) if job["mode"] == "graph" else run_ledger_job(job)
    except WritegateError as exc:
        report = {"code": exc.code, "details": exc.details}
    print(json.dumps(report, default=str), flush=True)


if __name__ == "__main__":
    main()
