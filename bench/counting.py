"""Count statements and transactions in the driver, by the tables they touch.

`counting_connection_class(tally)` makes a psycopg Connection class whose cursors
count every statement (an `executemany` counts one per parameter row) and whose
transaction blocks are tallied as one transaction each, classified by the table groups
their statements touched and by whether they wrote. The server's own count
(`pg_stat_database.xact_commit`) is read separately and must agree with
`Tally.server_equivalent()`: PostgreSQL commits one transaction per connection start,
per autocommit statement (the pool's empty check query included), per explicit block
and per pipeline (statements between two syncs run in one implicit transaction).
One more per prepare round trip outside a block: with `prepare_threshold=0` psycopg
prepares a statement the first time a connection runs it, in a round trip (and
implicit transaction) of its own, and it never caches the empty query, so the pool's
health check costs two round trips on every checkout.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from psycopg import Connection, Cursor, Pipeline, Transaction
from psycopg.rows import DictRow

# First match wins; the group is the table family a statement touches (a ledger table
# may name a checkpoint: the presented table's checkpoint_ns).
_GROUPS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # once per new connection: the timeline it is on (checkpoints/timelines.py)
    ("timeline", re.compile(r"\bwritegate\.timelines\b", re.I)),
    ("ledger", re.compile(r"\bwritegate\.|^\s*select now\(\) as now\s*$", re.I)),
    ("checkpointer", re.compile(r"\bcheckpoint", re.I)),
    ("provider", re.compile(r"\bprovider\.", re.I)),
    ("domain", re.compile(r"\b(orders|refunds|tickets)\b", re.I)),
)
# A write anywhere in the statement: data-modifying CTEs (`WITH written AS (INSERT ...)`)
# write as a plain INSERT does.
# So does a call of one of the ledger's functions that write or lock (checkpoints/schema.py).
_WRITES = re.compile(
    r"^\s*(insert|update|delete|merge)\b|\b(insert\s+into|delete\s+from|merge\s+into)\b"
    r"|\bupdate\s+[\w.]+\s+set\b|\bfor (no key )?update\b"
    r"|\bwritegate\.(propose|claim|write_audit|lock_proposal)\(",
    re.I,
)
# A transaction that relaxes its own commit (`SET LOCAL synchronous_commit TO off`, or
# `set_config('synchronous_commit', 'off', true)`) does not wait for the disk.
_RELAXED = re.compile(r"synchronous_commit'?\s*(,|to|=)\s*'?off\b", re.I)


def classify(query: Any) -> tuple[str, bool, bool]:
    """(group, writes, relaxed) for one statement; the empty query is the pool's health
    check; `relaxed`: it turns off waiting for the disk at its transaction's commit."""
    return _classify(query if isinstance(query, str) else str(query))


# Once per statement text: the counting's own CPU (a dozen regular expressions a
# statement) would otherwise land in the CPU of the path it counts, the more so the
# more statements it runs.
@lru_cache(maxsize=4096)
def _classify(text: str) -> tuple[str, bool, bool]:
    if not text.strip():
        return "pool_check", False, False
    group = next((name for name, pattern in _GROUPS if pattern.search(text)), "other")
    return group, bool(_WRITES.search(text)), bool(_RELAXED.search(text))


@dataclass
class _Block:
    explicit: bool
    groups: set[str] = field(default_factory=set)
    writes: bool = False
    relaxed: bool = False


class Tally:
    """Thread-safe counters shared by every connection of a counting pool."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.statements: Counter[str] = Counter()
        self.transactions: Counter[str] = Counter()
        self.connections = 0
        self.prepares = 0
        self.round_trips = 0

    def statement(self, group: str, n: int = 1) -> None:
        with self._lock:
            self.statements[group] += n

    def trips(self, n: int) -> None:
        with self._lock:
            self.round_trips += n

    def transaction(self, groups: Iterable[str], writes: bool, relaxed: bool = False) -> None:
        """One committed transaction, named by its main group and whether it wrote:
        `write` for a durable commit, `async_write` for one that did not wait for the
        disk, `read` for none."""
        found = set(groups)
        main = next(
            (g for g in ("ledger", "checkpointer", "provider", "domain", "timeline") if g in found),
            "pool_check" if found == {"pool_check"} else "other",
        )
        with self._lock:
            kind = ("async_write" if relaxed else "write") if writes else "read"
            self.transactions[f"{main}:{kind}"] += 1

    def connected(self) -> None:
        with self._lock:
            self.connections += 1

    def prepared(self) -> None:
        with self._lock:
            self.prepares += 1
            self.round_trips += 1

    def server_equivalent(self) -> int:
        """What pg_stat_database.xact_commit should have grown by."""
        with self._lock:
            return sum(self.transactions.values()) + self.connections + self.prepares

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "statements": dict(self.statements),
                "transactions": dict(self.transactions),
                "connections": self.connections,
                "prepare_round_trips": self.prepares,
                "round_trips": self.round_trips,
            }


_CONTROL = re.compile(r"^\s*(begin|commit|rollback)\s*;?\s*$", re.I)


@lru_cache(maxsize=4096)
def _control(text: str) -> re.Match[str] | None:
    return _CONTROL.match(text)


class CountingCursor(Cursor[DictRow]):
    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        self._count(query, 1, params)
        return super().execute(query, params, **kwargs)

    def executemany(self, query: Any, params_seq: Iterable[Any], **kwargs: Any) -> None:
        # Outside a block psycopg pipelines the rows itself: one implicit transaction,
        # which is how `_count` tallies a statement outside a block.
        rows = list(params_seq)
        self._count(query, len(rows))
        return super().executemany(query, rows, **kwargs)

    def _count(self, query: Any, n: int, params: Any = None) -> None:
        conn = self.connection
        assert isinstance(conn, CountingConnection)
        text = query if isinstance(query, str) else str(query)
        if conn.in_pipeline:
            conn.pipeline_sent = True  # its round trip is the pipeline's Sync
        else:
            conn.tally.trips(1)
        control = _control(text)
        if control is not None:  # a transaction the caller sends itself
            conn.control(control.group(1).lower())
            return
        group, writes, relaxed = classify(text)
        conn.tally.statement(group, n)
        if conn.block is not None:
            conn.block.groups.add(group)
            conn.block.writes |= writes
            conn.block.relaxed |= relaxed
            return
        conn.tally.transaction([group], writes, relaxed)  # an autocommit statement alone
        if n == 1:  # executemany pipelines its prepare with its rows
            # psycopg's prepared-statement key: the query and its parameter types.
            values = params.values() if isinstance(params, dict) else params or ()
            types = tuple(type(p).__name__ for p in values)
            key = (text, types)
            if group == "pool_check" or key not in conn.prepared:
                conn.prepared.add(key)
                conn.tally.prepared()


class CountingConnection(Connection[DictRow]):
    """Base class; `counting_connection_class` binds it to one Tally.

    Round trips: one per statement sent on its own; one per pipeline (its Sync) however
    many statements it carries; BEGIN and COMMIT of `transaction()` one each. A
    transaction is a `transaction()` block, a BEGIN..COMMIT the caller sends itself
    (alone or inside pipelines), a pipeline outside both, or an autocommit statement.
    """

    tally: Tally
    block: _Block | None = None
    in_pipeline: bool = False
    pipeline_sent: bool = False
    prepared: set[tuple[str, tuple[str, ...]]]

    @classmethod
    def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:
        conn = super().connect(conninfo, cursor_factory=CountingCursor, **kwargs)
        conn.prepared = set()
        cls.tally.connected()
        return conn

    def control(self, command: str) -> None:
        """BEGIN, COMMIT or ROLLBACK sent as a statement."""
        if command == "begin":
            if self.block is None or not self.block.explicit:
                # inside a pipeline's implicit transaction, BEGIN makes it the caller's own
                self.block = self.block or _Block(explicit=True)
                self.block.explicit = True
            return
        block, self.block = self.block, None
        if command == "commit" and block is not None:
            self.tally.transaction(block.groups or {"other"}, block.writes, block.relaxed)

    @contextmanager
    def _counted_block(self, *, commits: bool = True) -> Iterator[None]:
        """A `transaction()` block: BEGIN and COMMIT, one round trip each."""
        if self.block is not None:  # nested: a savepoint of the outer transaction
            self.tally.trips(2)  # SAVEPOINT and RELEASE
            yield
            return
        self.block = block = _Block(explicit=True)
        committed = False
        try:
            yield
            committed = True
        finally:
            self.block = None
            self.tally.trips(2)
            if committed and commits:
                self.tally.transaction(block.groups or {"other"}, block.writes, block.relaxed)

    @contextmanager
    def transaction(
        self, savepoint_name: str | None = None, force_rollback: bool = False
    ) -> Iterator[Transaction]:
        with (
            self._counted_block(commits=not force_rollback),
            super().transaction(savepoint_name, force_rollback) as tx,
        ):
            yield tx

    @contextmanager
    def pipeline(self) -> Iterator[Pipeline]:
        """One round trip (the Sync) if anything was sent; outside a transaction, the
        statements it carries commit together, as one implicit transaction."""
        if self.in_pipeline:  # nested: the outer pipeline's flight
            with super().pipeline() as pipe:
                yield pipe
            return
        implicit = self.block is None
        if implicit:
            self.block = _Block(explicit=False)
        self.in_pipeline, self.pipeline_sent = True, False
        committed = False
        try:
            with super().pipeline() as pipe:
                yield pipe
            committed = True
        finally:
            self.in_pipeline = False
            if self.pipeline_sent:
                self.tally.trips(1)
            block = self.block
            if implicit and block is not None and not block.explicit:
                self.block = None
                if committed and block.groups:
                    self.tally.transaction(block.groups, block.writes, block.relaxed)


def counting_connection_class(tally: Tally) -> type[CountingConnection]:
    """A connection class (for ConnectionPool) whose statements land in `tally`."""
    return type("BoundCountingConnection", (CountingConnection,), {"tally": tally})
