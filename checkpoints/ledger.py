"""The ledger store on PostgreSQL: the implementation of `approval.store`.

Each `transaction()` borrows one pooled connection and opens one database transaction;
a tool's code receives that same connection, so a business write commits or rolls back
together with the ledger rows that authorize it. Every call is one statement, sent when
it is made: an error surfaces from the call that caused it. The clock is the database's
`now()`; tests may pin it to probe expiry at an exact instant. Statements name
writegate's schema as the pool says (`checkpoints/namespace.py`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import fields
from datetime import datetime
from enum import Enum
from typing import Any

import psycopg
from psycopg import Connection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from writegate.approval.errors import InvalidTransition
from writegate.approval.models import (
    AuditRecord,
    Execution,
    ExecutionStatus,
    Proposal,
    ProposalStatus,
    Token,
    TokenStatus,
)
from writegate.approval.retention import Tombstone
from writegate.approval.store import CallLookup, Claim, Locked
from writegate.checkpoints import ledger_sql
from writegate.checkpoints.ledger_sql import LedgerSQL
from writegate.checkpoints.namespace import sql_for
from writegate.checkpoints.outage import outage_mapped
from writegate.checkpoints.pool import Pool
from writegate.checkpoints.timelines import began_at

# SQLSTATE of a guard that failed inside one of the ledger's functions (schema.py).
GUARD_SQLSTATE = "WG001"
_PREFIXES = (ledger_sql.TOKEN_PREFIX, ledger_sql.EXECUTION_PREFIX)
_JSON_FIELDS = ("args", "preview", "result", "arguments", "risk")
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_EXECUTION_OWN = ledger_sql.names(ledger_sql.EXECUTION_OWN)
_EXECUTION_FROM_PROPOSAL = ledger_sql.names(ledger_sql.EXECUTION_FROM_PROPOSAL)


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def _params(record: Any) -> dict[str, Any]:
    """A record's fields as statement parameters: JSON columns wrapped, enums as values.

    Shallow on purpose: `dataclasses.asdict` deep-copies every nested dict and list of
    the arguments and preview only for psycopg to serialize them once more.
    """
    params = {name: getattr(record, name) for name in _field_names(type(record))}
    for key in _JSON_FIELDS:
        if params.get(key) is not None:
            params[key] = Jsonb(params[key])
    for key, value in params.items():
        if isinstance(value, Enum):
            params[key] = value.value
    return params


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    raise TypeError(f"not JSON: {type(value).__name__}")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_json_default)


def _row_json(*records: Any, names: tuple[str, ...] | None = None) -> Jsonb:
    """Records as one JSON value for the ledger's functions: one object, or a list;
    only the fields in `names` when given (a row's own columns)."""
    rows = [{name: getattr(r, name) for name in names or _field_names(type(r))} for r in records]
    return Jsonb(rows[0] if len(rows) == 1 else rows, dumps=_dumps)


def _consumed_at(token: Token, created: dict[str, datetime]) -> datetime | None:
    """When a token loaded with its execution was consumed: when the execution began."""
    if token.status is not TokenStatus.CONSUMED:
        return None
    if token.execution_id not in created:
        raise ValueError(
            f"the token of proposal {token.proposal_id} is consumed: load its execution with it"
        )
    return created[token.execution_id]


def _proposal(row: DictRow | dict[str, Any] | None) -> Proposal | None:
    if row is None or row["proposal_id"] is None:
        return None
    return Proposal(**{**row, "status": ProposalStatus(row["status"])})


def _token(row: DictRow | dict[str, Any] | None) -> Token | None:
    if row is None or row["token_hash"] is None:
        return None
    return Token(**{**row, "status": TokenStatus(row["status"])})


def _execution(row: DictRow | dict[str, Any] | None) -> Execution | None:
    if row is None or row["execution_id"] is None:
        return None
    return Execution(**{**row, "status": ExecutionStatus(row["status"])})


def _unprefixed(row: DictRow, prefix: str) -> dict[str, Any]:
    return {k[len(prefix) :]: v for k, v in row.items() if k.startswith(prefix)}


def _of_proposal(row: DictRow) -> dict[str, Any]:
    """What an execution runs, from its proposal's columns of a row (never copied)."""
    return {name: row[name] for name in _EXECUTION_FROM_PROPOSAL}


def _own(row: DictRow) -> dict[str, Any]:
    """The proposal's columns of a row that also carries others' under their prefixes."""
    return {k: v for k, v in row.items() if not k.startswith(_PREFIXES)}


class PgLedgerTx:
    """One ledger transaction on one connection (or, for `LedgerStore.reading`, reads
    on an autocommit connection, each statement on its own)."""

    def __init__(
        self, conn: Connection[DictRow], sql: LedgerSQL, clock: Callable[[], datetime] | None
    ) -> None:
        self._conn = conn
        self.sql = sql
        self._clock = clock
        self._now: datetime | None = None

    @property
    def conn(self) -> Connection[DictRow]:
        return self._conn

    def savepoint(self) -> AbstractContextManager[Any]:
        return self._conn.transaction()  # nested in the open transaction: a SAVEPOINT

    def _one(self, query: str, params: Any = None) -> DictRow | None:
        return self._conn.execute(query, params).fetchone()

    def failed_over_since(self, moment: datetime) -> bool:
        began = began_at(self._conn)  # noted when the connection was made: no round trip
        return began is not None and began > moment

    def now(self) -> datetime:
        if self._clock is not None:
            return self._clock()
        if self._now is None:  # now() is fixed for the transaction; read it once
            row = self._one(self.sql.NOW_SQL)
            assert row is not None
            self._now = row["now"]
        return self._now

    def _peek_now(self) -> datetime | None:
        """The clock, if it is known without a round trip; else None (SQL's now())."""
        return self._clock() if self._clock is not None else self._now

    # -- proposals --------------------------------------------------------------------

    def get_proposal(self, proposal_id: str, *, for_update: bool = False) -> Proposal | None:
        if for_update:
            return self.lock_proposal(proposal_id).proposal
        return _proposal(self._one(self.sql.SELECT_PROPOSAL_SQL, (proposal_id,)))

    def get_call_proposal(
        self, thread_id: str, message_id: str, tool_call_id: str
    ) -> Proposal | None:
        params = (thread_id, message_id, tool_call_id)
        return _proposal(self._one(self.sql.SELECT_CALL_PROPOSAL_SQL, params))

    def get_proposal_and_execution(
        self, proposal_id: str
    ) -> tuple[Proposal | None, Execution | None]:
        """One statement, which brings the transaction's clock along (`now()`)."""
        row = self._one(self.sql.SELECT_PROPOSAL_EXECUTION_SQL, {"id": proposal_id})
        assert row is not None  # the query always answers one row
        tx_now = row.pop("tx_now")
        if self._clock is None and self._now is None:
            self._now = tx_now
        execution = _execution(_unprefixed(row, ledger_sql.EXECUTION_PREFIX))
        return _proposal(_own(row)), execution

    def lock_proposal(self, proposal_id: str) -> Locked:
        row = self._one(self.sql.LOCK_PROPOSAL_SQL, (proposal_id,))
        if row is None:
            return Locked(None)
        tx_now = row.pop("tx_now")
        if self._clock is None:
            self._now = tx_now  # the transaction's now(), brought along by the lock
        token = _token(_unprefixed(row, ledger_sql.TOKEN_PREFIX))
        execution = _execution(
            {**_unprefixed(row, ledger_sql.EXECUTION_PREFIX), **_of_proposal(row)}
        )
        purged = row.pop("purged")
        return Locked(_proposal(_own(row)), token=token, execution=execution, purged=purged)

    def insert_proposal(self, proposal: Proposal, audit: AuditRecord) -> bool:
        row = self._one(self.sql.PROPOSE_SQL, (_row_json(proposal), _row_json(audit)))
        return bool(row and row["inserted"])

    def look_up_call(
        self,
        tenant_id: str,
        thread_id: str,
        tool_call_id: str,
        fingerprint: str,
        *,
        message_id: str = "",
    ) -> CallLookup:
        params = {
            "tenant_id": tenant_id,
            "thread_id": thread_id,
            "tool_call_id": tool_call_id,
            "message_id": message_id,
            "fingerprint": fingerprint,
            "now": self._peek_now(),  # None: the statement's own now()
        }
        row = self._one(self.sql.LOOK_UP_CALL_SQL, params)
        assert row is not None  # the query always answers one row
        tx_now: datetime = row.pop("tx_now")
        now: datetime = self._peek_now() or tx_now
        if self._clock is None and self._now is None:
            self._now = now  # the transaction's now(), brought along
        running = _execution(_unprefixed(row, ledger_sql.EXECUTION_PREFIX))
        same_call = row.pop("same_call")
        proposal = _proposal(_own(row))
        if same_call:
            return CallLookup(proposal, now=now)
        return CallLookup(None, running=running, open_one=proposal, now=now)

    def set_traceparent(self, proposal_id: str, traceparent: str) -> None:
        self._conn.execute(self.sql.SET_TRACEPARENT_SQL, (traceparent, proposal_id))

    def get_traceparent(self, *, proposal_id: str | None, token_hash: str | None) -> str | None:
        params = {"proposal_id": proposal_id, "token_hash": token_hash}
        row = self._one(self.sql.SELECT_TRACEPARENT_SQL, params)
        return row["traceparent"] if row else None

    def transition_proposal(
        self,
        proposal_id: str,
        expected: ProposalStatus,
        new: ProposalStatus,
        *,
        decided_by: str | None = None,
        superseded_by: str | None = None,
        reason: str | None = None,
    ) -> bool:
        params = {
            "proposal_id": proposal_id,
            "expected": expected.value,
            "new": new.value,
            "decided_by": decided_by,
            "superseded_by": superseded_by,
            "reason": reason,
            "now": self.now(),
        }
        return self._one(self.sql.TRANSITION_PROPOSAL_SQL, params) is not None

    def approve_second(self, proposal_id: str, approver: str) -> bool:
        params = {"proposal_id": proposal_id, "approver": approver, "now": self.now()}
        return self._one(self.sql.APPROVE_SECOND_SQL, params) is not None

    def revoke_proposal(self, proposal_id: str, expected: ProposalStatus, by: str) -> bool:
        params = {"proposal_id": proposal_id, "expected": expected.value, "by": by,
                  "now": self.now()}  # fmt: skip
        return self._one(self.sql.REVOKE_PROPOSAL_SQL, params) is not None

    def list_thread_pending(self, thread_id: str) -> list[Proposal]:
        rows = self._conn.execute(self.sql.SELECT_THREAD_PENDING_SQL, (thread_id,)).fetchall()
        return [p for p in map(_proposal, rows) if p is not None]

    def list_awaiting_second(
        self, tenant_id: str, *, limit: int = 100, **page: Any
    ) -> list[Proposal]:
        given = {k: v for k, v in page.items() if v is not None}
        order, after = given.pop("order", "oldest"), given.pop("after", None)
        params = {"tenant_id": tenant_id, "now": self.now(), "limit": limit, **given}
        query = ledger_sql.created_page(
            self.sql.AWAITING_SECOND_PAGE_SQL, ledger_sql.AWAITING_FILTERS, given,
            ledger_sql.AWAITING_AFTER, order, after, params,
        )  # fmt: skip
        rows = self._conn.execute(query, params).fetchall()
        return [p for p in map(_proposal, rows) if p is not None]

    # -- tokens -----------------------------------------------------------------------

    def insert_token(self, token: Token) -> None:
        self._conn.execute(self.sql.INSERT_TOKEN_SQL, _params(token))

    def get_token(self, token_hash: str, *, for_update: bool = False) -> Token | None:
        query = self.sql.SELECT_TOKEN_SQL + (" FOR UPDATE" if for_update else "")
        return _token(self._one(query, (token_hash,)))

    def get_token_for_proposal(self, proposal_id: str) -> Token | None:
        return _token(self._one(self.sql.SELECT_TOKEN_FOR_PROPOSAL_SQL, (proposal_id,)))

    def replace_token_hash(self, proposal_id: str, new_hash: str, expires_at: datetime) -> bool:
        params = {"new_hash": new_hash, "expires_at": expires_at, "proposal_id": proposal_id}
        return self._one(self.sql.REPLACE_TOKEN_HASH_SQL, params) is not None

    def revoke_token(self, proposal_id: str) -> bool:
        return self._one(self.sql.REVOKE_TOKEN_SQL, (proposal_id,)) is not None

    # -- executions ------------------------------------------------------------------

    def claim(self, claim: Claim) -> None:
        params = (
            claim.proposal_id,
            claim.from_status.value,
            claim.decided_by,
            _row_json(claim.token),
            claim.issue,
            _row_json(claim.execution, names=_EXECUTION_OWN),
            Jsonb([_row_json(a).obj for a in claim.audit], dumps=_dumps),
        )
        try:
            self._conn.execute(self.sql.CLAIM_SQL, params)
        except psycopg.Error as exc:
            if exc.sqlstate != GUARD_SQLSTATE:
                raise
            raise InvalidTransition(str(exc.diag.message_primary or exc)) from exc

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
        query = self.sql.SELECT_EXECUTION_SQL + f"e.{column} = %s"
        return _execution(self._one(query + (" FOR UPDATE OF e" if for_update else ""), (value,)))

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
        escalation: dict[str, Any] | None = None,
        audit: AuditRecord | None = None,
    ) -> Execution | None:
        # Without a clock read yet, the statement uses the transaction's own now().
        now = self._peek_now()
        row = self._one(
            self.sql.TRANSITION_EXECUTION_SQL,
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
                "escalation": Jsonb(escalation) if escalation is not None else None,
                "audit": Jsonb([_row_json(audit).obj]) if audit is not None else None,
            },
        )
        if row is not None and now is None and self._clock is None:
            self._now = row["updated_at"]
        return _execution(row)

    def find_tombstone(
        self, *, token_hash: str | None = None, request_key: str | None = None
    ) -> Tombstone | None:
        if token_hash is not None:
            row = self._one(self.sql.FIND_TOMBSTONE_BY_TOKEN_SQL, (token_hash,))
        elif request_key is not None:
            row = self._one(self.sql.FIND_TOMBSTONE_BY_KEY_SQL, (request_key,))
        else:
            return None
        return Tombstone(**row) if row is not None else None

    # -- many rows at once -------------------------------------------------------------

    def load(
        self,
        proposals: Sequence[Proposal],
        tokens: Sequence[Token] = (),
        executions: Sequence[Execution] = (),
    ) -> None:
        """Rows made whole elsewhere (a benchmark's seed, a copy of a ledger), written as
        they are, by one COPY per table: no guard, no audit row. A consumed token
        is consumed when its execution (among `executions`) was created, as a claim
        writes it."""
        created = {e.execution_id: e.created_at for e in executions}
        tokens_with = [{**_params(t), "consumed_at": _consumed_at(t, created)} for t in tokens]
        for statement, rows in (
            (self.sql.LOAD_PROPOSALS_SQL, map(_params, proposals)),
            (self.sql.LOAD_TOKENS_SQL, tokens_with),
            (self.sql.LOAD_EXECUTIONS_SQL, map(_params, executions)),
        ):
            columns = ledger_sql.column_names(statement)
            with self._conn.cursor().copy(statement) as copy:
                for row in rows:
                    copy.write_row([row[name] for name in columns])

    # -- audit ------------------------------------------------------------------------

    def insert_audit(self, record: AuditRecord) -> None:
        self._conn.execute(self.sql.INSERT_AUDIT_SQL, (Jsonb([_row_json(record).obj]),))


class PgLedgerStore:
    def __init__(self, pool: Pool, *, clock: Callable[[], datetime] | None = None):
        self.pool = pool
        self.clock = clock
        self.sql = sql_for(ledger_sql.LedgerSQL, pool.schema)

    @contextmanager
    def transaction(self) -> Iterator[PgLedgerTx]:
        # A database outage leaves here as `TemporarilyUnavailable`: the transaction
        # was rolled back (or, if the cut hit its COMMIT, may have committed; every
        # caller's retry is safe either way, see docs/operations.md).
        with outage_mapped(), self.pool.connection() as conn, conn.transaction():
            yield PgLedgerTx(conn, self.sql, self.clock)

    @contextmanager
    def statements(self) -> Iterator[PgLedgerTx]:
        # No transaction: each statement runs on its own on the autocommit connection.
        with outage_mapped(), self.pool.connection() as conn:
            yield PgLedgerTx(conn, self.sql, self.clock)

    reading = statements

    def on(self, conn: Connection[DictRow]) -> PgLedgerTx:
        """The ledger on a session given from outside, in whatever transaction it is
        in (a request that reads the ledger in its own first transaction)."""
        return PgLedgerTx(conn, self.sql, self.clock)

    def audit_rows(self, tenant_id: str, **filters: Any) -> Iterator[dict[str, Any]]:
        """One tenant's audit rows, by `audit_id`: `order` "oldest" (the default) or
        "newest" first, only those after `after` (an audit_id) when given, at most
        `limit`, each filter given (thread_id, proposal_id, tool_name, status, user_id)
        matched exactly."""
        given = {k: v for k, v in filters.items() if v is not None}
        order = given.pop("order", "oldest")
        params = {"tenant_id": tenant_id, "limit": given.pop("limit", 500), **given}
        later, direction = ledger_sql.AUDIT_AFTER[order]
        later = later if "after" in given else ""
        query = ledger_sql.keyset(
            self.sql.AUDIT_PAGE_SQL, ledger_sql.AUDIT_FILTERS, given, later, direction
        )
        with self.pool.connection() as conn:
            rows = conn.execute(query, params).fetchall()
        yield from (dict(row) for row in rows)
