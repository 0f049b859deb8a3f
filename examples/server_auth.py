"""An auth handler for LangGraph Server: who acts comes from a bearer token, not the client.

`langgraph.auth.json` serves writegate's demo graph with this handler:

    uv run langgraph dev --config langgraph.auth.json

Every request must carry `Authorization: Bearer <token>` (or `x-api-key: <token>`, which
is how Agent Chat UI sends what its settings call the API key). The handler resolves the
token to a user with a tenant and roles; the server hands that user to the graph as
`config["configurable"]["langgraph_auth_user"]`, and writegate takes the identity
from it alone (see docs/langgraph-server.md): a run that names another user or
tenant in its context or configurable, or adds roles or a trust level, is refused.

The tokens below are demo tokens for the seeded demo users. In your deployment,
replace `user_for_token` with your identity provider's check (verify a JWT's
signature, audience and expiry, or look up a session) and return the same fields.
Threads belong to the user who created them: nobody else lists, reads or runs them,
but for one thing: an approver lists and reads a thread of their tenant while it waits
for their second approval, and may answer that approval there, nothing else (see
docs/agent-inbox.md, "A second approver in Agent Inbox").
Deleting a thread cancels its waiting approvals (`Writegate.end_thread`).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import threading
from typing import Any

from langgraph_sdk import Auth

from writegate import Identity, Writegate, WritegateError, second_approval_run

# Demo only: token -> the user it stands for. `tenant_id` and `roles` are the fields
# writegate reads by default (`ServerUserFields`); `trust` could be set here as well.
DEMO_TOKENS: dict[str, dict[str, Any]] = {
    "demo-user-42": {"identity": "user_42", "tenant_id": "tenant_hz", "roles": []},
    "demo-user-7": {"identity": "user_7", "tenant_id": "tenant_hz", "roles": []},
    "demo-approver": {"identity": "approver_1", "tenant_id": "tenant_hz", "roles": ["approver"]},
    "demo-approver-sh": {"identity": "approver_9", "tenant_id": "tenant_sh", "roles": ["approver"]},
}

auth = Auth()


def user_for_token(token: str) -> dict[str, Any] | None:
    """The user a token stands for, or None; compared in constant time."""
    found = None
    for known, user in DEMO_TOKENS.items():
        if hmac.compare_digest(known.encode(), token.encode()):
            found = user
    return found


@auth.authenticate
async def authenticate(
    authorization: str | None, headers: dict[bytes, bytes]
) -> Auth.types.MinimalUserDict:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":  # Agent Chat UI sends its "API key" as x-api-key
        token = headers.get(b"x-api-key", b"").decode("utf-8", "replace")
    user = user_for_token(token.strip())
    if user is None:
        raise Auth.exceptions.HTTPException(
            status_code=401, detail="send 'Authorization: Bearer <token>' or 'x-api-key: <token>'"
        )
    return {**user, "permissions": []}  # type: ignore[typeddict-item]


def _owner(ctx: Auth.types.AuthContext) -> dict[str, str]:
    return {
        "owner": ctx.user.identity,
        "owner_tenant": str(getattr(ctx.user, "tenant_id", "") or ""),
    }


def _identity(ctx: Auth.types.AuthContext) -> Identity:
    owner = _owner(ctx)
    roles = frozenset(getattr(ctx.user, "roles", None) or ())
    return Identity(user_id=owner["owner"], tenant_id=owner["owner_tenant"], roles=roles)


async def _awaiting_me(ctx: Auth.types.AuthContext) -> dict[str, str]:
    """The threads whose question waits for this user's second approval: for an approver,
    their tenant's proposals the requester confirmed, never their own (the ledger's
    queue, `Writegate.awaiting_second_approval`), each with the proposal that waits;
    for anyone else, none."""
    who = _identity(ctx)
    if "approver" not in who.roles or not who.tenant_id:
        return {}
    page = await asyncio.to_thread(lambda: _writegate().awaiting_second_approval(who, limit=100))
    return {view.thread_id: view.proposal_id for view in page.items if view.thread_id}


@auth.on.threads
async def own_threads_only(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType:
    """A thread is stamped with its creator (and its own id, which an approver's inbox
    finds it by); every other thread is out of sight. Creating, updating, deleting and
    copying a thread: only one's own."""
    owner = _owner(ctx)
    if isinstance(value, dict):
        metadata = value.setdefault("metadata", {})
        if isinstance(metadata, dict):
            metadata.update(owner)
            metadata["thread_id"] = str(value.get("thread_id") or "")  # never the client's
    return owner


@auth.on.threads.create
async def create_own_threads(
    ctx: Auth.types.AuthContext, value: Auth.types.ThreadsCreate
) -> Auth.types.FilterType:
    """A new thread is one's own. LangGraph Server copies a thread (`threads.copy`) on a
    read check alone, keeping the original's owner, and asks for the copy's creation
    with its new id and no metadata: refused to an approver while threads that are not
    theirs wait for them, so reading one never lets them make a thread in its owner's name."""
    if "metadata" not in value and await _awaiting_me(ctx):
        raise Auth.exceptions.HTTPException(
            status_code=403, detail="an approver copies no thread while approvals wait for them"
        )
    return await own_threads_only(ctx, value)


@auth.on.threads.read
@auth.on.threads.search
async def own_threads_or_awaiting_my_approval(
    ctx: Auth.types.AuthContext, value: Any
) -> Auth.types.FilterType:
    """Reading and listing: one's own threads, and for an approver the threads that wait
    for their second approval (so Agent Inbox lists them), while they wait."""
    owner = _owner(ctx)
    waiting = sorted(await _awaiting_me(ctx))
    if not waiting:
        return owner
    tenant = owner["owner_tenant"]
    theirs = ({"owner_tenant": tenant, "thread_id": thread_id} for thread_id in waiting)
    return {"$or": [owner, *theirs]}


@auth.on.threads.create_run
async def run_own_threads_or_answer_my_approval(
    ctx: Auth.types.AuthContext, value: Auth.types.RunsCreate
) -> Auth.types.FilterType:
    """A run on one's own thread; on another's, only an approver's answer to the second
    approval that thread waits for: `command={"resume": ...}` and nothing else (no input,
    no goto or update). What the answer does is writegate's (`graph/second.py`)."""
    owner = _owner(ctx)
    thread_id = str(value.get("thread_id") or "")
    value.setdefault("metadata", {}).update({**owner, "thread_id": thread_id})  # a new thread's
    waiting = (await _awaiting_me(ctx)).get(thread_id) if thread_id else None
    if waiting is None:
        return owner
    try:
        second_approval_run(dict(value.get("kwargs") or {}), waiting)
    except WritegateError as refused:  # before anything runs: a structured 403
        raise Auth.exceptions.HTTPException(403, detail=json.dumps(refused.to_dict())) from None
    return {"owner_tenant": owner["owner_tenant"], "thread_id": thread_id}


@auth.on.threads.delete
async def end_a_deleted_threads_approvals(
    ctx: Auth.types.AuthContext, value: Auth.types.ThreadsDelete
) -> Auth.types.FilterType:
    """A deleted thread's waiting approvals are cancelled (audited: by this user,
    `thread_deleted`), so no approval page confirms them later. Only the user's own
    proposals, so a delete the filter then refuses ends nobody else's."""
    owner = _owner(ctx)
    who = Identity(user_id=owner["owner"], tenant_id=owner["owner_tenant"])
    if who.user_id and who.tenant_id and value.get("thread_id"):
        thread_id = str(value["thread_id"])
        await asyncio.to_thread(lambda: _writegate().end_thread(who, thread_id, deleted=True))
    return owner


_opened: list[Writegate] = []
_opening = threading.Lock()


def _writegate() -> Writegate:
    """The ledger's face in this process (DATABASE_URL), opened on first use; ending
    proposals needs no tools."""
    with _opening:
        if not _opened:
            _opened.append(Writegate.open(tools=[]))
        return _opened[0]
