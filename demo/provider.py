"""The payment provider: the interface refunds go through, and a simulator of it.

`SimulatedProvider` behaves like a real payment API with idempotency keys: one key
refunds at most once, a repeated key with the same request returns the original
result, and a repeated key with a different request is refused. Its store is the
`provider.refunds` table, reached over its own connections and never the caller's
transaction, because a real provider commits independently of us.

Faults (timeouts, 503s, rate limits, applying and then losing the answer) plug in
through `ProviderFaults` without touching the refund logic.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Protocol

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from writegate import ValidationFailed
from writegate.demo.formats import digest, rfc3339

INSERT_PROVIDER_REFUND_SQL = """
INSERT INTO provider.refunds
    (idempotency_key, provider_ref, order_id, amount_minor, currency, request_digest)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING idempotency_key, provider_ref, order_id, amount_minor, currency, request_digest,
          created_at
"""
SELECT_PROVIDER_REFUND_SQL = """
SELECT idempotency_key, provider_ref, order_id, amount_minor, currency, request_digest,
       created_at
FROM provider.refunds WHERE idempotency_key = %s
"""
SELECT_PROVIDER_REFUNDS_SINCE_SQL = """
SELECT idempotency_key, provider_ref, order_id, amount_minor, currency, request_digest,
       created_at
FROM provider.refunds WHERE created_at >= %s ORDER BY created_at
"""
COUNT_PROVIDER_REFUNDS_SQL = """
SELECT count(*) AS n FROM provider.refunds WHERE %s::text IS NULL OR order_id = %s
"""


class ProviderClient(Protocol):
    """What the refund tool needs from a payment provider."""

    def refund(
        self, *, idempotency_key: str, order_id: str, amount_minor: int, currency: str
    ) -> dict[str, Any]:
        """Refund once per key; returns at least `provider_ref`, `amount_minor`, `currency`."""
        ...

    def lookup(self, idempotency_key: str) -> dict[str, Any] | None:
        """The result stored for `idempotency_key`, or None if the key was never applied."""
        ...

    def applied_since(self, since: datetime) -> dict[str, dict[str, Any]]:
        """Every refund applied at or after `since`, by its idempotency key."""
        ...


class ProviderFaults(Protocol):
    """Hooks where a fault strategy may raise (e.g. UpstreamTimeout, RateLimited)."""

    def before_refund(self, idempotency_key: str) -> None:
        """Runs before anything is stored: raising here means the refund never happened."""
        ...

    def after_refund(self, idempotency_key: str, result: dict[str, Any]) -> None:
        """Runs after the refund is committed: raising here loses the answer, not the refund."""
        ...

    def before_lookup(self, idempotency_key: str) -> None: ...


class NoFaults:
    """The well-behaved provider."""

    def before_refund(self, idempotency_key: str) -> None:
        return None

    def after_refund(self, idempotency_key: str, result: dict[str, Any]) -> None:
        return None

    def before_lookup(self, idempotency_key: str) -> None:
        return None


def request_digest(order_id: str, amount_minor: int, currency: str) -> str:
    """What makes two calls with one key "the same request"."""
    return digest({"order_id": order_id, "amount_minor": amount_minor, "currency": currency})


def _result(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "provider_ref": row["provider_ref"],
        "idempotency_key": row["idempotency_key"],
        "order_id": row["order_id"],
        "amount_minor": row["amount_minor"],
        "currency": row["currency"],
        "status": "succeeded",
        "created_at": rfc3339(row["created_at"]),
    }


class SimulatedProvider:
    """A payment provider backed by `provider.refunds`; give a conninfo or a pool."""

    def __init__(
        self,
        conninfo: str | None = None,
        *,
        pool: ConnectionPool[Any] | None = None,
        faults: ProviderFaults | None = None,
    ) -> None:
        if (conninfo is None) == (pool is None):
            raise ValueError("SimulatedProvider needs exactly one of conninfo or pool")
        self._conninfo = conninfo
        self._pool = pool
        self.faults: ProviderFaults = faults or NoFaults()

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        if self._pool is not None:
            with self._pool.connection() as conn:
                yield conn
        else:
            assert self._conninfo is not None
            with psycopg.connect(self._conninfo, autocommit=True) as conn:
                yield conn

    def refund(
        self, *, idempotency_key: str, order_id: str, amount_minor: int, currency: str
    ) -> dict[str, Any]:
        if not idempotency_key:
            raise ValidationFailed("the provider requires an idempotency key")
        if isinstance(amount_minor, bool) or not isinstance(amount_minor, int) or amount_minor <= 0:
            raise ValidationFailed("the provider refunds positive integer amounts only")
        self.faults.before_refund(idempotency_key)
        wanted = request_digest(order_id, amount_minor, currency)
        ref = "re_" + secrets.token_hex(12)
        with self._connection() as conn, conn.transaction():
            cur = conn.cursor(row_factory=dict_row)
            params = (idempotency_key, ref, order_id, amount_minor, currency, wanted)
            row = cur.execute(INSERT_PROVIDER_REFUND_SQL, params).fetchone()
            if row is None:
                # The key exists: a concurrent twin's insert waited on the unique index
                # and committed first, and this statement's fresh snapshot sees it.
                row = cur.execute(SELECT_PROVIDER_REFUND_SQL, (idempotency_key,)).fetchone()
        if row is None:  # the key's row cannot vanish: the table is append-only
            raise RuntimeError(f"provider lost idempotency key {idempotency_key!r}")
        if row["request_digest"] != wanted:
            raise ValidationFailed(
                "idempotency key reused for a different refund",
                reason="idempotency key reused",
                idempotency_key=idempotency_key,
                original={"order_id": row["order_id"], "amount_minor": row["amount_minor"],
                          "currency": row["currency"]},
            )  # fmt: skip
        result = _result(row)
        self.faults.after_refund(idempotency_key, result)
        return result

    def lookup(self, idempotency_key: str) -> dict[str, Any] | None:
        self.faults.before_lookup(idempotency_key)
        with self._connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            row = cur.execute(SELECT_PROVIDER_REFUND_SQL, (idempotency_key,)).fetchone()
        return _result(row) if row is not None else None

    def applied_since(self, since: datetime) -> dict[str, dict[str, Any]]:
        with self._connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            rows = cur.execute(SELECT_PROVIDER_REFUNDS_SINCE_SQL, (since,)).fetchall()
        return {row["idempotency_key"]: _result(row) for row in rows}

    def count_refunds(self, order_id: str | None = None) -> int:
        """How many refunds reached the provider, in all or for one order."""
        with self._connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            row = cur.execute(COUNT_PROVIDER_REFUNDS_SQL, (order_id, order_id)).fetchone()
        return int(row["n"]) if row else 0
