"""The ledger store on PostgreSQL: the implementation of `approval.store`.

Each `transaction()` borrows one pooled connection and opens one database transaction;
domain code receives that same connection, so a business write commits or rolls back
together with the ledger rows that authorize it. The clock is the database's `now()`;
tests may pin it to probe expiry at an exact instant.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from datetime import datetime
from enum import Enum
from typing import Any

from psycopg import Connection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from writegate.approval.models import (
    AuditRecord,
    Execution,
    ExecutionStatus,
    Proposal,
    ProposalStatus,
    Token,
    TokenStatus,
)
from writegate.checkpoints import ledger_sql as sql
from writegate.checkpoints.outage import outage_mapped
from writegate.checkpoints.pool import Pool

_JSON_FIELDS = ("args", "preview", "result", "arguments", "risk")


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def _params(record: Any) -> dict[str, Any]:
    """A record's fields as statement parameters: JSON columns wrapped, enums as values.

    Shallow on purpose: `dataclasses.asdict` deep-copies every nested dict and list of
    the arguments and preview (hundreds of recursive calls per ledger operation) only
    for psycopg to serialize them once more.
    """
    params = {name: getattr(record, name) for name in _field_names(type(record))}
    for key in _JSON_FIELDS:
        if params.get(key) is not None:
            params[key] = Jsonb(params[key])
    for key, value in params.items():
        if isinstance(value, Enum):
            params[key] = value.value
    return params


def _proposal(row: DictRow | None) -> Proposal | None:
    if row is None or row["proposal_id"] is None:
        return None
    return Proposal(**{**row, "status": ProposalStatus(row["status"])})


def _token(row: DictRow | None) -> Token | None:
    if row is None:
        return None
    return Token(**{**row, "status": TokenStatus(row["status"])})


def _execution(row: DictRow | None) -> Execution | None:
    if row is None or row["execution_id"] is None:
        return None
    return Execution(**{**row, "status": ExecutionStatus(row["status"])})


class PgLedgerTx:
    def __init__(self, conn: Connection[DictRow], clock: Callable[[], datetime] | None):
        self.conn = conn
        self._clock = clock
        self._now: datetime | None = None

    def _one(self, query: str, params: Any = None) -> DictRow | None:
        return self.conn.execute(query, params).fetchone()

    def now(self) -> datetime:
        if self._clock is not None:
            return self._clock()
        if self._now is None:  # now() is fixed for the transaction; read it once
            row = self._one(sql.NOW_SQL)
            assert row is not None
            self._now = row["now"]
        return self._now

    def insert_proposal(self, proposal: Proposal) -> Proposal | None:
        return _proposal(self._one(sql.INSERT_PROPOSAL_SQL, _params(proposal)))

    def _first_read(self, plain: str, with_now: str, params: Any) -> DictRow | None:
        """A read that also brings the transaction's now(), while it is still unknown."""
        if self._clock is not None or self._now is not None:
            return self._one(plain, params)
        row = self._one(with_now, params)
        if row is not None:
            self._now = row.pop("tx_now")
        return row

    def get_proposal(self, proposal_id: str, *, for_update: bool = False) -> Proposal | None:
        lock = " FOR UPDATE" if for_update else ""
        return _proposal(
            self._first_read(
                sql.SELECT_PROPOSAL_SQL + lock, sql.SELECT_PROPOSAL_NOW_SQL + lock, (proposal_id,)
            )
        )

    def find_proposal_by_call(self, thread_id: str, tool_call_id: str) -> Proposal | None:
        params = (thread_id, tool_call_id)
        return _proposal(
            self._first_read(
                sql.SELECT_PROPOSAL_BY_CALL_SQL, sql.SELECT_PROPOSAL_BY_CALL_NOW_SQL, params
            )
        )

    def find_open_proposal(self, thread_id: str, fingerprint: str) -> Proposal | None:
        return _proposal(
            self._one(sql.SELECT_OPEN_PROPOSAL_SQL, (thread_id, fingerprint, self.now()))
        )

    def set_traceparent(self, proposal_id: str, traceparent: str) -> None:
        self.conn.execute(sql.SET_TRACEPARENT_SQL, (traceparent, proposal_id))

    def get_traceparent(self, *, proposal_id: str | None, token_hash: str | None) -> str | None:
        params = {"proposal_id": proposal_id, "token_hash": token_hash}
        row = self._one(sql.SELECT_TRACEPARENT_SQL, params)
        return row["traceparent"] if row else None

    def transition_proposal(
        self,
        proposal_id: str,
        expected: ProposalStatus,
        new: ProposalStatus,
        *,
        decided_by: str | None = None,
        superseded_by: str | None = None,
    ) -> bool:
        row = self._one(
            sql.TRANSITION_PROPOSAL_SQL,
            {
                "proposal_id": proposal_id,
                "expected": expected.value,
                "new": new.value,
                "decided_by": decided_by,
                "superseded_by": superseded_by,
                "now": self.now(),
            },
        )
        return row is not None

    def insert_token(self, token: Token) -> None:
        self.conn.execute(sql.INSERT_TOKEN_SQL, _params(token))

    def get_token(self, token_hash: str, *, for_update: bool = False) -> Token | None:
        query = sql.SELECT_TOKEN_SQL + (" FOR UPDATE" if for_update else "")
        return _token(self._one(query, (token_hash,)))

    def get_token_for_proposal(self, proposal_id: str) -> Token | None:
        return _token(self._one(sql.SELECT_TOKEN_FOR_PROPOSAL_SQL, (proposal_id,)))

    def approve_second(self, proposal_id: str, approver: str) -> bool:
        params = {"proposal_id": proposal_id, "approver": approver, "now": self.now()}
        return self._one(sql.APPROVE_SECOND_SQL, params) is not None

    def revoke_proposal(self, proposal_id: str, expected: ProposalStatus, by: str) -> bool:
        params = {"proposal_id": proposal_id, "expected": expected.value, "by": by,
                  "now": self.now()}  # fmt: skip
        return self._one(sql.REVOKE_PROPOSAL_SQL, params) is not None

    def list_awaiting_second(self, tenant_id: str, *, limit: int = 100) -> list[Proposal]:
        rows = self.conn.execute(
            sql.SELECT_AWAITING_SECOND_SQL, (tenant_id, self.now(), limit)
        ).fetchall()
        return [p for p in map(_proposal, rows) if p is not None]

    def replace_token_hash(self, proposal_id: str, new_hash: str, expires_at: datetime) -> bool:
        return (
            self._one(sql.REPLACE_TOKEN_HASH_SQL, (new_hash, expires_at, proposal_id)) is not None
        )

    def consume_token(self, token_hash: str, execution_id: str) -> bool:
        row = self._one(sql.CONSUME_TOKEN_SQL, (self.now(), execution_id, token_hash))
        return row is not None

    def revoke_token(self, proposal_id: str) -> bool:
        return self._one(sql.REVOKE_TOKEN_SQL, (proposal_id,)) is not None

    def insert_execution(self, execution: Execution) -> bool:
        return self._one(sql.INSERT_EXECUTION_SQL, _params(execution)) is not None

    def get_execution(
        self,
        *,
        request_key: str | None = None,
        execution_id: str | None = None,
        proposal_id: str | None = None,
        for_update: bool = False,
    ) -> Execution | None:
        column, value = next(
            (c, v)
            for c, v in (
                ("request_key", request_key),
                ("execution_id", execution_id),
                ("proposal_id", proposal_id),
            )
            if v is not None
        )
        query = sql.SELECT_EXECUTION_SQL + f"{column} = %s" + (" FOR UPDATE" if for_update else "")
        return _execution(self._one(query, (value,)))

    def transition_execution(
        self,
        execution_id: str,
        expected: tuple[ExecutionStatus, ...],
        new: ExecutionStatus,
        *,
        lease_owner: str | None = None,
        require_owner: str | None = None,
        lease_seconds: float | None = None,
        provider_ref: str | None = None,
        result: dict[str, Any] | None = None,
        error_code: str | None = None,
        count_attempt: bool = False,
    ) -> Execution | None:
        # Without a clock read yet, the statement uses the transaction's own now().
        now = self._clock() if self._clock is not None else self._now
        row = self._one(
            sql.TRANSITION_EXECUTION_SQL,
            {
                "execution_id": execution_id,
                "expected": [s.value for s in expected],
                "new": new.value,
                "now": now,
                "lease_owner": lease_owner,
                "require_owner": require_owner,
                "lease_seconds": lease_seconds,
                "provider_ref": provider_ref,
                "result": Jsonb(result) if result is not None else None,
                "error_code": error_code,
                "attempt": 1 if count_attempt else 0,
            },
        )
        if row is not None and now is None:
            self._now = row["updated_at"]
        return _execution(row)

    def find_open_execution(self, tenant_id: str, fingerprint: str) -> Execution | None:
        # propose's first read: it brings the transaction's now() along.
        return _execution(
            self._first_read(
                sql.SELECT_OPEN_EXECUTION_SQL,
                sql.SELECT_OPEN_EXECUTION_NOW_SQL,
                (tenant_id, fingerprint),
            )
        )

    def insert_audit(self, record: AuditRecord) -> None:
        self.conn.execute(sql.INSERT_AUDIT_SQL, _params(record))


class PgLedgerStore:
    def __init__(self, pool: Pool, *, clock: Callable[[], datetime] | None = None):
        self.pool = pool
        self.clock = clock

    @contextmanager
    def transaction(self) -> Iterator[PgLedgerTx]:
        # A database outage leaves here as `TemporarilyUnavailable`: the transaction
        # was rolled back (or, if the cut hit its COMMIT, may have committed; every
        # caller's retry is safe either way, see docs/operations.md).
        with outage_mapped(), self.pool.connection() as conn, conn.transaction():
            yield PgLedgerTx(conn, self.clock)

    def find_proposal_by_call(self, thread_id: str, tool_call_id: str) -> Proposal | None:
        with outage_mapped(), self.pool.connection() as conn:
            row = conn.execute(sql.SELECT_PROPOSAL_BY_CALL_SQL, (thread_id, tool_call_id))
            return _proposal(row.fetchone())

    def audit_rows(self, tenant_id: str, **filters: Any) -> Iterator[dict[str, Any]]:
        params = {
            "tenant_id": tenant_id,
            "thread_id": filters.get("thread_id"),
            "proposal_id": filters.get("proposal_id"),
            "limit": filters.get("limit", 500),
        }
        with self.pool.connection() as conn:
            rows = conn.execute(sql.SELECT_AUDIT_SQL, params).fetchall()
        yield from (dict(row) for row in rows)
