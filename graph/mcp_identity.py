"""Who is calling the MCP server: identity from configuration or a bearer key, never from arguments.

Over stdio the server process serves one person's client, so the identity is
configuration (`--user/--tenant` or `WRITEGATE_USER`/`WRITEGATE_TENANT`). Over HTTP
each request carries `Authorization: Bearer <key>`; keys come from
`WRITEGATE_MCP_KEYS="key1=user_42@tenant_hz,key2=user_7@tenant_hz"` and are kept and
compared only as hashes. (The HTTP service's API-key table should replace this static
map once it exists; `KeyRing` is the one place to change.)
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from approval.canonical import hash_secret
from approval.errors import Forbidden, ValidationFailed
from approval.models import Identity

KEYS_ENV = "WRITEGATE_MCP_KEYS"
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

    def __init__(self, by_hash: dict[str, Identity]) -> None:
        self._by_hash = by_hash

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
    def from_env(cls) -> KeyRing:
        return cls.parse(os.environ.get(KEYS_ENV, ""))

    def __len__(self) -> int:
        return len(self._by_hash)

    def lookup(self, key: str) -> Identity | None:
        presented = hash_secret(key)
        found = None
        # Compare every stored hash in constant time; no early exit on a match.
        for stored, identity in self._by_hash.items():
            if hmac.compare_digest(stored, presented):
                found = identity
        return found

    def identify(self, authorization: str | None) -> Identity:
        scheme, _, key = (authorization or "").partition(" ")
        identity = self.lookup(key.strip()) if scheme.lower() == "bearer" and key else None
        if identity is None:
            raise Forbidden("a valid bearer key is required")
        return identity


def require_bearer(app: ASGIApp, keys: KeyRing) -> ASGIApp:
    """Refuse HTTP requests without a known bearer key before they reach MCP (401)."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {
                k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]
            }
            try:
                keys.identify(headers.get("authorization"))
            except Forbidden as exc:
                body = {**exc.to_dict(), "code": "unauthenticated"}
                payload = json.dumps(body).encode("utf-8")
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": payload})
                return
        await app(scope, receive, send)

    return guarded
