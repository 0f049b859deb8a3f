"""Bearer API keys: every /v1 request says who it is with `Authorization: Bearer <key>`.

The key is looked up by its hash; what it maps to (user, tenant, roles) is the only
identity the graph ever sees. A missing, unknown or revoked key is a 401. Opening a
thread and posting a message check the key on the session of their own first
transaction (`CurrentKey`, `surfaces.store.keys.KeyHolder`); every other request,
a decision included, looks it up before its input is checked (`CurrentIdentity`), so
that a refused key or a database that is away is said before a malformed body is.
Either way it is looked up on every request, so a revoked key is refused from the
next one on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from writegate.approval.errors import Unauthorized
from writegate.approval.models import Identity
from writegate.surfaces.store.keys import KeyHolder
from writegate.surfaces.web.services import services

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An API key made by `writegate keys create`, sent as a bearer token.",
)


@dataclass(frozen=True)
class Principal:
    key_id: str
    identity: Identity


async def key_holder(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> KeyHolder:
    """The request's key, not yet looked up (a coroutine: no thread-pool hop); 401
    without one."""
    if credentials is None:
        raise Unauthorized()
    return KeyHolder(credentials.credentials)


def principal(request: Request, key: Annotated[KeyHolder, Depends(key_holder)]) -> Principal:
    with services(request).runtime.pool.connection() as conn:
        return Principal(*key.principal(conn))


async def identity(who: Annotated[Principal, Depends(principal)]) -> Identity:
    return who.identity  # a coroutine: no thread-pool hop for a field read


CurrentIdentity = Annotated[Identity, Depends(identity)]
CurrentPrincipal = Annotated[Principal, Depends(principal)]
CurrentKey = Annotated[KeyHolder, Depends(key_holder)]
