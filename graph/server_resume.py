"""The hook for LangGraph Server: after a second approval ran the write, resume the
requester's thread, so their question resolves with the receipt and the model tells them.

    approved = wg.approve_as_second(lead, proposal_id)        # runs the write, once
    client = get_client(url=...)                               # langgraph-sdk
    run = await resume_requester(client, approved)             # or get_sync_client: no await

The thread's open question is answered `confirm` for its proposal; the gate, run again,
finds the proposal executed and answers with the one receipt, asking nothing and running
nothing (a declined, revoked or expired one answers with that outcome). The run acts
for the requester: without an auth handler the identity goes in the run's configurable;
with one, `client` must authenticate as the requester (e.g. a service token your handler
maps to them), since writegate refuses a thread's question to anyone else.
"""

from __future__ import annotations

from typing import Any

from writegate.approval.views import ProposalView


def resume_requester(
    client: Any,
    approved: ProposalView,
    *,
    assistant_id: str = "writegate",
    identity_in_config: bool = True,
) -> Any:
    """`client.runs.create` on the requester's thread, resuming its question; returns
    what that returns (a coroutine with the async client). `identity_in_config=False`
    under an auth handler: the server's authenticated user says who acts."""
    config: dict[str, Any] = {}
    if identity_in_config:
        config = {
            "configurable": {"user_id": approved.requested_by, "tenant_id": approved.tenant_id}
        }
    return client.runs.create(
        approved.thread_id,
        assistant_id,
        command={"resume": {"action": "confirm", "proposal_id": approved.proposal_id}},
        config=config or None,
    )
