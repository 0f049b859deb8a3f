"""Approvals whose thread no longer asks them: found from the thread's checkpoints.

A proposal waits for an answer while its thread's newest checkpoint holds the question
(a pending interrupt naming its call). When the thread was ended where writegate does
not run (a state update to `__end__`, Agent Inbox's "Ignore"), or its checkpoints were
deleted, nothing asks it any more and no client shows it again. An operator's command
lists such proposals and ends them (`writegate orphans`).

Only threads checkpointed in writegate's database can be judged: a thread with no
checkpoint here (a server's in-memory checkpointer, a proposal made over HTTP or MCP)
is never counted as orphaned. A proposal younger than `older_than` is left alone: its
question may be about to be checkpointed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from writegate.approval.models import Proposal
from writegate.graph.resolve import waited
from writegate.runtime.wiring import Runtime

ORPHANS_LIMIT = 1000
# Younger than this, a proposal's question may not be checkpointed yet.
ORPHAN_GRACE = timedelta(minutes=5)


def orphaned(
    runtime: Runtime, saver: Any, older_than: timedelta, tenant_id: str | None = None
) -> list[Proposal]:
    """Open proposals (of `tenant_id`, or all) older than `older_than` whose thread,
    checkpointed here, no longer asks them."""
    _, pending = runtime.views.threads_with_pending(
        user_id=None, tenant_id=tenant_id, limit=ORPHANS_LIMIT
    )
    with runtime.store.reading() as reads:
        now = reads.now()
    found: list[Proposal] = []
    heads: dict[str, Any] = {}
    for row in pending:
        if row["created_at"] > now - older_than:
            continue
        thread_id = row["thread_id"]
        if thread_id not in heads:
            root = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            heads[thread_id] = saver.get_tuple(root)
        head = heads[thread_id]
        if head is None:
            continue  # not a thread of this database's checkpointer: cannot judge
        with runtime.store.reading() as reads:
            proposal = reads.get_proposal(row["proposal_id"])
        if proposal is not None and not waited(head.pending_writes or (), proposal.tool_call_id):
            found.append(proposal)
    return found
