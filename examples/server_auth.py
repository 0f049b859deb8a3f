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
Threads belong to the user who created them: nobody else lists, reads or runs them.
Deleting a thread cancels its waiting approvals (`Writegate.end_thread`).
"""

from __future__ import annotations

import asyncio
import hmac
import threading
from typing import Any

from langgraph_sdk import Auth

from writegate import Identity, Writegate

# Demo only: token -> the user it stands for. `tenant_id` and `roles` are the fields
# writegate reads by default (`ServerUserFields`); `trust` could be set here as well.
DEMO_TOKENS: dict[str, dict[str, Any]] = {
    "demo-user-42": {"identity": "user_42", "tenant_id": "tenant_hz", "roles": []},
    "demo-user-7": {"identity": "user_7", "tenant_id": "tenant_hz", "roles": []},
    "demo-approver": {"identity": "approver_1", "tenant_id": "tenant_hz", "roles": ["approver"]},
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


@auth.on.threads
async def own_threads_only(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType:
    """A thread is stamped with its creator; every other thread is out of sight."""
    owner = _owner(ctx)
    if isinstance(value, dict):
        metadata = value.setdefault("metadata", {})
        if isinstance(metadata, dict):
            metadata.update(owner)
    return owner


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
