"""Proposals of a thread that ended without writegate: cancelled, audited, with why.

A thread can end where writegate does not run: a state update to `__end__` (Agent
Inbox's "Ignore", Studio), or the thread deleted. Its waiting questions would then wait
unseen until they expire, and an approval page could still confirm one. Whoever learns
of it first (a LangGraph Server hook, an operator's command) ends them here: each open
proposal is cancelled (a confirmed one's token revoked), with an audit row that names
who ended it and why.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from writegate.approval.models import Identity, Proposal
from writegate.approval.unanswered import Host, cancel_locked

# What each ending's audit row says.
THREAD_DELETED = {"reason": "thread_deleted", "why": "the conversation was deleted"}
THREAD_ENDED = {"reason": "thread_ended", "why": "the conversation was ended without an answer"}


def end_thread(
    host: Host,
    identity: Identity,
    thread_id: str,
    why: dict[str, Any],
    *,
    any_owner: bool = False,
    only: str | None = None,
) -> list[str]:
    """Cancel the thread's open proposals of `identity` (of anyone with `any_owner`, an
    operator's; only the proposal `only` if given), each audited as ended by
    `identity`; their ids."""
    ended: list[str] = []
    with host.store.transaction() as tx:
        for found in tx.list_thread_pending(thread_id):
            if only not in (None, found.proposal_id):
                continue
            if not (any_owner or _owned(found, identity)):
                continue
            proposal = tx.get_proposal(found.proposal_id, for_update=True)
            if proposal is None or proposal.status is not found.status:
                continue  # it moved meanwhile: whoever moved it recorded how
            actor = replace(identity, tenant_id=proposal.tenant_id)  # an operator's: theirs
            cancel_locked(tx, actor, proposal, time.perf_counter(), why)
            ended.append(proposal.proposal_id)
    return ended


def _owned(proposal: Proposal, identity: Identity) -> bool:
    return (proposal.subject, proposal.tenant_id) == (identity.user_id, identity.tenant_id)
