"""Bearer API keys: every /v1 request says who it is with `Authorization: Bearer <key>`.

The key is looked up by its hash; what it maps to (user, tenant, roles) is the only
identity the graph ever sees. A missing, unknown or revoked key is a 401.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from writegate.approval.errors import Unauthorized
from writegate.approval.models import Identity
from writegate.surfaces.store.keys import resolve_key
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


def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    if credentials is None:
        raise Unauthorized()
    with services(request).runtime.pool.connection() as conn:
        found = resolve_key(conn, credentials.credentials)
    if found is None:
        raise Unauthorized("unknown or revoked API key")
    return Principal(*found)


async def identity(who: Annotated[Principal, Depends(principal)]) -> Identity:
    return who.identity  # a coroutine: no thread-pool hop for a field read


CurrentIdentity = Annotated[Identity, Depends(identity)]
CurrentPrincipal = Annotated[Principal, Depends(principal)]
