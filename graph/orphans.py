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

from dataclasses import replace
from datetime import timedelta
from typing import Any

from writegate.approval.models import Proposal
from writegate.approval.views import Page, PageArgs, created_after, created_key
from writegate.graph.resolve import waited
from writegate.runtime.wiring import Runtime

MAX_ORPHANS = 1000  # one page, at most
PENDING_CHUNK = 500  # pending proposals read at a time while a page fills
# Younger than this, a proposal's question may not be checkpointed yet.
ORPHAN_GRACE = timedelta(minutes=5)


def _key(proposal: Proposal) -> list[Any]:
    return created_key(proposal.created_at, proposal.proposal_id)


def orphaned(
    runtime: Runtime,
    saver: Any,
    older_than: timedelta,
    tenant_id: str | None = None,
    args: PageArgs | None = None,
) -> Page[Proposal]:
    """A page of the open proposals (of `tenant_id`, or all) older than `older_than`
    whose thread, checkpointed here, no longer asks them, `args.order` first by when
    each was proposed (keyset on `(created_at, proposal_id)`, which never changes); all
    of them, oldest first, when `args` is None. The page fills: pending proposals are
    read in chunks until `limit` orphans are found or none are left."""
    if args is None:
        found: list[Proposal] = []
        args = PageArgs(limit=MAX_ORPHANS)
        while True:
            page = orphaned(runtime, saver, older_than, tenant_id, args)
            found += page
            if page.next_cursor is None:
                return Page(found)
            args = replace(args, cursor=page.next_cursor)
    limit, key = args.checked("orphans", MAX_ORPHANS)
    after = created_after(key)
    found = []
    heads: dict[str, Any] = {}
    while len(found) <= limit:
        rows = runtime.views.pending_page(
            args.order, after, PENDING_CHUNK, older_than=older_than, tenant_id=tenant_id
        )
        for row in rows:
            proposal = _orphan(runtime, saver, heads, row)
            if proposal is not None:
                found.append(proposal)
                if len(found) > limit:
                    break
        if len(rows) < PENDING_CHUNK:
            break
        after = (rows[-1]["created_at"], rows[-1]["proposal_id"])
    return args.page(found, "orphans", _key)


def _orphan(
    runtime: Runtime, saver: Any, heads: dict[str, Any], row: dict[str, Any]
) -> Proposal | None:
    """The proposal of `row` if its thread's head (read once per thread into `heads`)
    no longer asks it; None if it does, or if the thread is not checkpointed here."""
    thread_id = row["thread_id"]
    if thread_id not in heads:
        root = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        heads[thread_id] = saver.get_tuple(root)
    head = heads[thread_id]
    if head is None:
        return None  # not a thread of this database's checkpointer: cannot judge
    with runtime.store.reading() as reads:
        proposal = reads.get_proposal(row["proposal_id"])
    if proposal is None or waited(head.pending_writes or (), proposal.tool_call_id):
        return None
    return proposal
