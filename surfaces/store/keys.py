"""API keys for the HTTP service: created once, stored hashed, resolved to an identity.

A key is shown to its owner exactly once, when it is made; the database keeps only
`hash_secret(key)`. Resolving a key gives the user, tenant and roles the service acts
as, so identity always comes from the key, never from what a request body says.
Listing shows a key's id, owner, roles and dates, never its secret (which is not
kept); revoking sets `revoked_at`, after which the key resolves to nothing.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from writegate.approval.canonical import hash_secret
from writegate.approval.errors import NotFound, Unauthorized, ValidationFailed
from writegate.approval.models import Identity
from writegate.approval.views import Page, PageArgs, created_after, created_key
from writegate.checkpoints.ledger_sql import created_page
from writegate.surfaces.store import http_sql as sql

KEY_PREFIX = "wgk_"
MAX_KEYS = 1_000  # one page of keys, at most
# Users, tenants and roles are plain identifiers: nothing to confuse in a log or header.
_NAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,128}$")


@dataclass(frozen=True)
class NewKey:
    """The secret is here and nowhere else: print it once, then drop it."""

    secret: str
    key_id: str
    identity: Identity
    created_at: datetime


@dataclass(frozen=True)
class KeyInfo:
    """What is known about a key: everything but its secret."""

    key_id: str
    user_id: str
    tenant_id: str
    roles: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None

    @classmethod
    def from_row(cls, row: Any) -> KeyInfo:
        return cls(
            row["key_id"],
            row["user_id"],
            row["tenant_id"],
            tuple(row["roles"]),
            row["created_at"],
            row["revoked_at"],
        )


def _check_name(kind: str, value: str) -> str:
    if not _NAME.match(value):
        raise ValidationFailed(f"{kind} must be 1-128 letters, digits or _.:@-", value=value)
    return value


def create_key(
    conn: Any, user_id: str, tenant_id: str, roles: list[str] | tuple[str, ...] = ()
) -> NewKey:
    """Store a new key for (user, tenant, roles) and return its secret."""
    _check_name("user", user_id)
    _check_name("tenant", tenant_id)
    clean_roles = sorted({_check_name("role", role) for role in roles})
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key_id = "key_" + secrets.token_hex(6)
    row = conn.execute(
        sql.INSERT_KEY_SQL, (hash_secret(secret), key_id, user_id, tenant_id, clean_roles)
    ).fetchone()
    identity = Identity(user_id, tenant_id, frozenset(clean_roles))
    return NewKey(secret, row["key_id"], identity, row["created_at"])


def resolve_key(conn: Any, secret: str) -> tuple[str, Identity] | None:
    """The key's id and identity, or None for an unknown or revoked key."""
    if not secret.startswith(KEY_PREFIX) or len(secret) > 200:
        return None  # not ours: skip the lookup
    row = conn.execute(sql.SELECT_KEY_SQL, (hash_secret(secret),)).fetchone()
    if row is None:
        return None
    return row["key_id"], Identity(row["user_id"], row["tenant_id"], frozenset(row["roles"]))


@dataclass(frozen=True)
class KeyHolder:
    """A request's bearer key, not yet looked up: the request checks it on the session
    of its first transaction (`identity`), so the check costs no commit of its own.
    Revoked, it is refused from the next request on, as a key looked up alone is."""

    secret: str

    def principal(self, conn: Any) -> tuple[str, Identity]:
        """The key's id and identity; Unauthorized for an unknown or revoked key."""
        found = resolve_key(conn, self.secret)
        if found is None:
            raise Unauthorized("unknown or revoked API key")
        return found

    def identity(self, conn: Any) -> Identity:
        """Who the key acts as, checked on `conn`; Unauthorized as `principal`."""
        return self.principal(conn)[1]


def revoke_key(conn: Any, key_id: str) -> bool:
    """Revoke an active key; False when there is no such key or it was already revoked."""
    return conn.execute(sql.REVOKE_KEY_SQL, (key_id,)).fetchone() is not None


def get_key(conn: Any, key_id: str) -> KeyInfo | None:
    row = conn.execute(sql.SELECT_KEY_BY_ID_SQL, (key_id,)).fetchone()
    return KeyInfo.from_row(row) if row is not None else None


def revoke_key_by_id(conn: Any, key_id: str) -> tuple[KeyInfo, bool]:
    """Revoke a key; its record and whether this call revoked it (False: it already was).

    NotFound when no key has this id.
    """
    revoked = revoke_key(conn, key_id)
    info = get_key(conn, key_id)
    if info is None:
        raise NotFound("no API key with this id", key_id=key_id)
    return info, revoked


def list_keys(
    conn: Any,
    *,
    tenant_id: str | None = None,
    active_only: bool = False,
    args: PageArgs | None = None,
) -> Page[KeyInfo]:
    """A page of keys (keyset on `(created_at, key_id)`), oldest first by default,
    optionally of one tenant and only those not revoked."""
    args = args or PageArgs(limit=MAX_KEYS)
    args.refuse("thread_id", "proposal_id", "tool_name", "status")
    limit, key = args.checked("keys", MAX_KEYS)
    given: dict[str, Any] = {"tenant_id": tenant_id} if tenant_id is not None else {}
    if active_only:
        given["active"] = True
    params: dict[str, Any] = {**given, "limit": limit + 1}
    query = created_page(
        sql.LIST_KEYS_SQL, sql.KEYS_FILTERS, given, sql.KEYS_AFTER, args.order, created_after(key),
        params,
    )  # fmt: skip
    rows = [KeyInfo.from_row(row) for row in conn.execute(query, params).fetchall()]
    return args.page(rows, "keys", lambda k: created_key(k.created_at, k.key_id))
