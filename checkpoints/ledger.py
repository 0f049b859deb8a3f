"""The ledger store on PostgreSQL: the implementation of `approval.store`.

Each `transaction()` borrows one pooled connection and opens one database transaction;
domain code receives that same connection, so a business write commits or rolls back
together with the ledger rows that authorize it. The clock is the database's `now()`;
tests may pin it to probe expiry at an exact instant.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import fields
from datetime import datetime
from enum import Enum
from typing import Any

import psycopg
from psycopg import Connection, Cursor
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from writegate.approval.errors import guard_gone
from writegate.approval.models import (
    AuditRecord,
    Execution,
    ExecutionStatus,
    Proposal,
    ProposalStatus,
    Token,
    TokenStatus,
)
from writegate.approval.store import CallLookup
from writegate.checkpoints import ledger_sql as sql
from writegate.checkpoints.outage import outage_mapped
from writegate.checkpoints.pool import Pool
from writegate.checkpoints.timelines import began_at

_BEGIN, _COMMIT, _ROLLBACK = "BEGIN", "COMMIT", "ROLLBACK"
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


def _call_lookup(row: DictRow | None, params: dict[str, Any]) -> CallLookup:
    """`LOOK_UP_CALL_SQL`'s one row, split into its proposal and its execution."""
    assert row is not None  # the query always answers one row
    tx_now = row.pop("tx_now")
    now = params["now"] or tx_now
    prefix = sql.EXECUTION_PREFIX
    running = {k[len(prefix) :]: row.pop(k) for k in list(row) if k.startswith(prefix)}
    same_call = row.pop("same_call")
    proposal = _proposal(row)
    if same_call:
        return CallLookup(proposal, now=now)
    return CallLookup(None, running=_execution(running), open_one=proposal, now=now)


class PgLedgerTx:
    """One ledger transaction on one connection.

    Made by `PgLedgerStore.transaction()` it owns its transaction and sends it in as few
    round trips as the answers allow: a statement nobody waits for (an audit row, a new
    token, a trace id) is held and sent ahead of the next statement whose answer is
    waited for, in one pipeline flight; so is the BEGIN, and the COMMIT carries whatever
    is still held. Everything runs in the order it was called, inside the one
    transaction, so the rows committed are those of plain one-by-one statements; only a
    held statement's error surfaces a call later, and it aborts the transaction all the
    same. `conn` sends what is held first, so code given the connection (a tool's
    hooks) always runs inside the open transaction, after the ledger's earlier writes.

    Made on a connection whose transaction someone else opened (`owns=False`), it sends
    each statement at once.
    """

    def __init__(
        self,
        conn: Connection[DictRow],
        clock: Callable[[], datetime] | None,
        *,
        owns: bool = False,
    ):
        self._conn = conn
        self._clock = clock
        self._now: datetime | None = None
        self._owns = owns
        self._held: list[tuple[str, Any]] = [(_BEGIN, None)] if owns else []
        self._begun = not owns
        self._cursor: Cursor[DictRow] | None = None

    @property
    def conn(self) -> Connection[DictRow]:
        self._send()
        return self._conn

    def _later(self, query: str, params: Any) -> None:
        """A write whose answer nobody waits for: held until the next flight."""
        if self._owns:
            self._held.append((query, params))
        else:
            self._conn.execute(query, params)

    def _send(self, *queries: tuple[str, Any]) -> list[Cursor[DictRow]]:
        """What is held, then `queries`, in one round trip; their cursors, answered.

        The held statements and the first query share the transaction's one cursor (a
        cursor answers its last statement; every answer is read before the next
        flight), so a statement costs no cursor of its own; further queries get theirs.
        """
        if self._cursor is None:
            self._cursor = self._conn.cursor()
        cursor = self._cursor
        if not self._held and len(queries) <= 1:
            return [cursor.execute(query, params) for query, params in queries]
        held, self._held = self._held, []
        if held and held[0][0] is _BEGIN:
            self._begun = True
        if len(held) == 1 and not queries:
            # A lone BEGIN or COMMIT is one round trip either way; as a pipeline it
            # costs more client CPU (its enter, sync and exit) for nothing.
            (query, params) = held[0]
            cursor.execute(query, params, prepare=params is not None)
            return []
        with self._conn.pipeline():  # one Sync at the end: one round trip for them all
            for held_query, held_params in held:
                cursor.execute(held_query, held_params, prepare=held_params is not None)
            answered = [cursor.execute(*queries[0])] if queries else []
            return answered + [self._conn.execute(query, params) for query, params in queries[1:]]

    def _one(self, query: str, params: Any = None) -> DictRow | None:
        (cursor,) = self._send((query, params))
        return cursor.fetchone()

    def _expect(self, query: str, params: dict[str, Any], what: str) -> None:
        """A guarded write the caller knows will write one row: held like a write nobody
        waits for. Should its guard fail after all, the server fails the transaction
        (WG001, `InvalidTransition` from `PgLedgerStore.transaction`); nothing commits."""
        if not self._owns:
            if self._one(query, params) is None:
                raise guard_gone(what)
            return
        self._held.append((sql.expect_one(query), {**params, "expect_what": what}))

    def expect_no_row(self, query: str, params: dict[str, Any], what: str) -> None:
        """A read the caller would refuse on if it found a row, held like a write: should
        it find one, the server fails the transaction (WG001, `InvalidTransition` from
        `PgLedgerStore.transaction`); nothing commits. PostgreSQL only, as `fetch_one`."""
        if not self._owns:
            if self._one(query, params) is not None:
                raise guard_gone(what)
            return
        self._held.append((sql.expect_none(query), {**params, "expect_what": what}))

    def fetch_one(self, query: str, params: Any = None) -> DictRow | None:
        """A read of rows no held write touches (e.g. `wg_tombstones`), sent with the held
        writes in one flight. Through `HeldConfirmTx` it writes nothing held there first."""
        return self._one(query, params)

    def commit(self) -> None:
        """COMMIT with whatever is still held; nothing at all if nothing was sent or held."""
        if self._held == [(_BEGIN, None)]:
            self._held = []
            return
        self._held.append((_COMMIT, None))
        self._send()

    def rollback(self) -> None:
        """Drop what is held; ROLLBACK if the BEGIN went out."""
        self._held = []
        if self._begun and self._owns:
            self._conn.execute(_ROLLBACK, prepare=False)

    def failed_over_since(self, moment: datetime) -> bool:
        began = began_at(self._conn)  # noted when the connection was made: no round trip
        return began is not None and began > moment

    def now(self) -> datetime:
        if self._clock is not None:
            return self._clock()
        if self._now is None:  # now() is fixed for the transaction; read it once
            row = self._one(sql.NOW_SQL)
            assert row is not None
            self._now = row["now"]
        return self._now

    def _first_read(
        self, plain: str, with_now: str, params: Any, *more: tuple[str, Any]
    ) -> list[DictRow | None]:
        """A read that also brings the transaction's now() while it is still unknown, and
        the reads in `more`, in one flight; one row (or None) per read."""
        bring_now = self._clock is None and self._now is None
        first = (with_now if bring_now else plain, params)
        rows = [cursor.fetchone() for cursor in self._send(first, *more)]
        if bring_now and rows[0] is not None:
            self._now = rows[0].pop("tx_now")
        return rows

    def get_proposal(self, proposal_id: str, *, for_update: bool = False) -> Proposal | None:
        lock = " FOR UPDATE" if for_update else ""
        return _proposal(
            self._first_read(
                sql.SELECT_PROPOSAL_SQL + lock, sql.SELECT_PROPOSAL_NOW_SQL + lock, (proposal_id,)
            )[0]
        )

    def get_proposal_and_execution(
        self, proposal_id: str
    ) -> tuple[Proposal | None, Execution | None]:
        proposal, execution = self._first_read(
            sql.SELECT_PROPOSAL_SQL,
            sql.SELECT_PROPOSAL_NOW_SQL,
            (proposal_id,),
            (sql.SELECT_EXECUTION_SQL + "proposal_id = %s", (proposal_id,)),
        )
        return _proposal(proposal), _execution(execution)

    def lock_proposal(self, proposal_id: str) -> tuple[Proposal | None, Execution | None]:
        proposal, execution = self._first_read(
            sql.SELECT_PROPOSAL_SQL + " FOR UPDATE",
            sql.SELECT_PROPOSAL_NOW_SQL + " FOR UPDATE",
            (proposal_id,),
            (sql.SELECT_EXECUTION_OF_PROPOSAL_KEY_SQL, (proposal_id,)),
        )
        return _proposal(proposal), _execution(execution)

    def look_up_call(
        self, tenant_id: str, thread_id: str, tool_call_id: str, fingerprint: str
    ) -> CallLookup:
        params = {
            "tenant_id": tenant_id,
            "thread_id": thread_id,
            "tool_call_id": tool_call_id,
            "fingerprint": fingerprint,
            "now": self._peek_now(),  # None: the statement's own now()
        }
        found = _call_lookup(self._one(sql.LOOK_UP_CALL_SQL, params), params)
        if self._clock is None and self._now is None:
            self._now = found.now  # the transaction's now(), brought along
        return found

    def _peek_now(self) -> datetime | None:
        """The clock, if it is known without a round trip; else None (SQL's now())."""
        return self._clock() if self._clock is not None else self._now

    def set_traceparent(self, proposal_id: str, traceparent: str) -> None:
        self._later(sql.SET_TRACEPARENT_SQL, (traceparent, proposal_id))

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
        params = self._move(proposal_id, expected, new, decided_by, superseded_by)
        return self._one(sql.TRANSITION_PROPOSAL_SQL, params) is not None

    def expect_transition_proposal(
        self,
        proposal_id: str,
        expected: ProposalStatus,
        new: ProposalStatus,
        *,
        decided_by: str | None = None,
    ) -> None:
        params = self._move(proposal_id, expected, new, decided_by, None)
        self._expect(sql.TRANSITION_PROPOSAL_SQL, params, "the proposal's move")

    def _move(
        self,
        proposal_id: str,
        expected: ProposalStatus,
        new: ProposalStatus,
        decided_by: str | None,
        superseded_by: str | None,
    ) -> dict[str, Any]:
        return {
            "proposal_id": proposal_id,
            "expected": expected.value,
            "new": new.value,
            "decided_by": decided_by,
            "superseded_by": superseded_by,
            "now": self.now(),
        }

    def insert_token(self, token: Token) -> None:
        params = _params(token)
        # A token can be written already consumed, by the execution it claims (the
        # one-transaction confirm): consumed now, as `consume_token` would have.
        consumed = token.status is TokenStatus.CONSUMED and token.execution_id is not None
        params["consumed_at"] = self.now() if consumed else None
        self._later(sql.INSERT_TOKEN_SQL, params)

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
        params = {"new_hash": new_hash, "expires_at": expires_at, "proposal_id": proposal_id}
        return self._one(sql.REPLACE_TOKEN_HASH_SQL, params) is not None

    def expect_replace_token_hash(
        self, proposal_id: str, new_hash: str, expires_at: datetime
    ) -> None:
        params = {"new_hash": new_hash, "expires_at": expires_at, "proposal_id": proposal_id}
        self._expect(sql.REPLACE_TOKEN_HASH_SQL, params, "the token's replacement")

    def consume_token(self, token_hash: str, execution_id: str) -> bool:
        row = self._one(sql.CONSUME_TOKEN_SQL, (self.now(), execution_id, token_hash))
        return row is not None

    def revoke_token(self, proposal_id: str) -> bool:
        return self._one(sql.REVOKE_TOKEN_SQL, (proposal_id,)) is not None

    def insert_execution(self, execution: Execution) -> bool:
        return self._one(sql.INSERT_EXECUTION_SQL, _params(execution)) is not None

    def expect_insert_proposal(self, proposal: Proposal) -> None:
        self._expect(sql.INSERT_PROPOSAL_SQL, _params(proposal), "the proposal's insert")

    def expect_insert_execution(self, execution: Execution) -> None:
        self._expect(sql.INSERT_EXECUTION_SQL, _params(execution), "the execution's claim")

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
        now = self._peek_now()
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

    def insert_audit(self, record: AuditRecord) -> None:
        self._later(sql.INSERT_AUDIT_SQL, _params(record))


@contextmanager
def _guards_mapped() -> Iterator[None]:
    """A held guarded write whose guard failed (WG001) leaves as `InvalidTransition`."""
    try:
        yield
    except psycopg.Error as exc:
        if exc.sqlstate != sql.EXPECTED_SQLSTATE:
            raise
        raise guard_gone("a guarded write") from exc


class PgLedgerStore:
    def __init__(self, pool: Pool, *, clock: Callable[[], datetime] | None = None):
        self.pool = pool
        self.clock = clock

    @contextmanager
    def transaction(self) -> Iterator[PgLedgerTx]:
        # A database outage leaves here as `TemporarilyUnavailable`: the transaction
        # was rolled back (or, if the cut hit its COMMIT, may have committed; every
        # caller's retry is safe either way, see docs/operations.md).
        with outage_mapped(), _guards_mapped(), self.pool.connection() as conn:
            tx = PgLedgerTx(conn, self.clock, owns=True)
            try:
                yield tx
                tx.commit()  # may fail too: a held write's error surfaces here
            except BaseException:
                with suppress(psycopg.Error):  # a broken connection: the pool discards it
                    tx.rollback()
                raise

    @contextmanager
    def reading(self) -> Iterator[PgLedgerTx]:
        # Not owned: no BEGIN, no COMMIT; each read runs on the autocommit connection.
        with outage_mapped(), self.pool.connection() as conn:
            yield PgLedgerTx(conn, self.clock, owns=False)

    def look_up_call(
        self, tenant_id: str, thread_id: str, tool_call_id: str, fingerprint: str
    ) -> CallLookup:
        with self.reading() as reads:
            return reads.look_up_call(tenant_id, thread_id, tool_call_id, fingerprint)

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
