"""Who is calling the MCP server: identity from configuration or a bearer key, never from arguments.

Over stdio the server process serves one person's client, so the identity is
configuration (`--user/--tenant` or `WRITEGATE_USER`/`WRITEGATE_TENANT`). Over HTTP
each request carries `Authorization: Bearer <key>`; keys come from
`WRITEGATE_MCP_KEYS="key1=user_42@tenant_hz,key2=user_7@tenant_hz"` and are kept and
compared only as hashes — or they are the HTTP service's API keys (`writegate keys
create`), looked up in PostgreSQL by hash.

An API key is looked up on every HTTP request, as the HTTP service does, never
remembered between requests: a key revoked by `writegate keys revoke` is refused from
the next request on, by every process. The lookup runs in a worker thread, so a slow
database never stalls the event loop; the identity it finds travels with the request
(`request_identity`), so a tool call is not looked up twice.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio

from writegate.approval.canonical import hash_secret
from writegate.approval.errors import Forbidden, TemporarilyUnavailable, ValidationFailed
from writegate.approval.models import Identity
from writegate.checkpoints.outage import outage_mapped
from writegate.checkpoints.pool import Pool
from writegate.surfaces.store.keys import resolve_key

KEYS_ENV = "WRITEGATE_MCP_KEYS"
# Where `require_bearer` leaves the caller's identity in the request's ASGI scope.
IDENTITY_SCOPE_KEY = "writegate.identity"
USER_ENV, TENANT_ENV = "WRITEGATE_USER", "WRITEGATE_TENANT"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def configured_identity(user: str | None, tenant: str | None) -> Identity:
    """The stdio identity: options first, then the environment; both parts are required."""
    user = (user or os.environ.get(USER_ENV, "")).strip()
    tenant = (tenant or os.environ.get(TENANT_ENV, "")).strip()
    if not user or not tenant:
        raise ValidationFailed(
            f"the MCP server needs an identity: pass --user and --tenant "
            f"(or set {USER_ENV} and {TENANT_ENV})"
        )
    return Identity(user_id=user, tenant_id=tenant)


class KeyRing:
    """Bearer keys -> identities, held as sha256 hashes of the keys."""

    def __init__(self, by_hash: dict[str, Identity], pool: Pool | None = None) -> None:
        self._by_hash = by_hash
        self._pool = pool

    @classmethod
    def parse(cls, spec: str) -> KeyRing:
        by_hash: dict[str, Identity] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            key, sep, who = item.partition("=")
            user, at, tenant = who.strip().partition("@")
            if not sep or not at or not key.strip() or not user or not tenant:
                raise ValidationFailed(f"{KEYS_ENV} entries look like key=user@tenant")
            by_hash[hash_secret(key.strip())] = Identity(user_id=user, tenant_id=tenant)
        return cls(by_hash)

    @classmethod
    def from_env(cls, pool: Pool | None = None) -> KeyRing:
        ring = cls.parse(os.environ.get(KEYS_ENV, ""))
        ring._pool = pool
        return ring

    def __len__(self) -> int:
        """How many ways to authenticate: static keys, plus the API-key table if any."""
        return len(self._by_hash) + (1 if self._pool is not None else 0)

    def _lookup_table(self, key: str) -> Identity | None:
        """The key's identity from the API-key table as it is now (a revoked key: None)."""
        if self._pool is None:
            return None
        with outage_mapped(), self._pool.connection() as conn:
            found = resolve_key(conn, key)
        return found[1] if found else None

    def lookup(self, key: str) -> Identity | None:
        presented = hash_secret(key)
        found = None
        # Compare every stored hash in constant time; no early exit on a match.
        for stored, identity in self._by_hash.items():
            if hmac.compare_digest(stored, presented):
                found = identity
        return found or self._lookup_table(key)

    def identify(self, authorization: str | None) -> Identity:
        scheme, _, key = (authorization or "").partition(" ")
        identity = self.lookup(key.strip()) if scheme.lower() == "bearer" and key else None
        if identity is None:
            raise Forbidden("a valid bearer key is required")
        return identity


def request_identity(scope: Scope) -> Identity:
    """The identity `require_bearer` found for this HTTP request."""
    identity = scope.get(IDENTITY_SCOPE_KEY)
    if not isinstance(identity, Identity):
        raise Forbidden("a valid bearer key is required")
    return identity


async def _refuse(send: Send, status: int, body: dict[str, Any]) -> None:
    headers = [(b"content-type", b"application/json")]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(body).encode("utf-8")})


def require_bearer(app: ASGIApp, keys: KeyRing) -> ASGIApp:
    """Refuse HTTP requests without a known bearer key before they reach MCP (401, or
    503 while the database cannot answer); the identity of an accepted one goes on in
    the scope (`request_identity`)."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {
                k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]
            }
            try:
                identity = await anyio.to_thread.run_sync(
                    keys.identify, headers.get("authorization")
                )
            except Forbidden as exc:
                await _refuse(send, 401, {**exc.to_dict(), "code": "unauthenticated"})
                return
            except TemporarilyUnavailable as exc:  # nothing was wrong with the request
                await _refuse(send, 503, exc.to_dict())
                return
            scope[IDENTITY_SCOPE_KEY] = identity
        await app(scope, receive, send)

    return guarded
