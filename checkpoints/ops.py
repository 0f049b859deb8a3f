"""Operations on PostgreSQL: the reconcile backlog, tombstones, retention purge, statistics.

`PgBacklog` implements `approval.store.BacklogStore` (its checks after a promotion are
`checkpoints/failover.py`'s). The purge (which leaves a
tombstone for every request key it removes) runs in batches, each one transaction,
and takes its rows with SKIP LOCKED so it never blocks (or is blocked by) live work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from writegate.approval.models import AuditRecord, Execution, ExecutionStatus
from writegate.approval.retention import RetentionPolicy
from writegate.approval.store import BacklogItem, LedgerTx
from writegate.approval.views import Page, PageArgs, created_after, created_key
from writegate.checkpoints import ledger_sql, ops_sql
from writegate.checkpoints.failover import MAX_ESCALATIONS, PgFailovers
from writegate.checkpoints.ledger import PgLedgerTx
from writegate.checkpoints.ledger_sql import created_page
from writegate.checkpoints.namespace import sql_for
from writegate.checkpoints.pool import Pool

_EXECUTION_FIELDS = tuple(f.name for f in fields(Execution))


def execution_from_row(row: DictRow | dict[str, Any]) -> Execution:
    values = {name: row[name] for name in _EXECUTION_FIELDS if name in row}
    return Execution(**{**values, "status": ExecutionStatus(row["status"])})


class PgBacklog:
    """The reconcile backlog: claims, settlements, deferrals and escalations."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.sql = sql_for(ops_sql.OpsSQL, pool.schema)
        self.failovers = PgFailovers(pool)

    def claim_due(
        self,
        owner: str,
        *,
        operations: Sequence[str],
        lease_seconds: float,
        limit: int,
        audit: Callable[[BacklogItem], AuditRecord],
    ) -> list[BacklogItem]:
        params = {
            "owner": owner,
            "operations": list(operations),
            "lease_seconds": lease_seconds,
            "limit": limit,
        }
        with self.pool.connection() as conn, conn.transaction():
            rows = conn.execute(self.sql.CLAIM_DUE_SQL, params).fetchall()
            items = [
                BacklogItem(
                    execution_from_row(row),
                    row["previous_status"],
                    row["checks"],
                    row["age_seconds"],
                )
                for row in rows
            ]
            tx = PgLedgerTx(conn, sql_for(ledger_sql.LedgerSQL, self.pool.schema), None)
            for item in items:  # the claim and its audit row commit together
                tx.insert_audit(audit(item))
        return items

    def due_elsewhere(self, operations: Sequence[str]) -> dict[str, int]:
        with self.pool.connection() as conn:
            rows = conn.execute(self.sql.DUE_ELSEWHERE_SQL, {"operations": list(operations)})
            return {row["operation"]: int(row["n"]) for row in rows}

    def settle(
        self,
        tx: LedgerTx,
        execution_id: str,
        owner: str,
        status: ExecutionStatus,
        *,
        provider_ref: str | None = None,
        result: dict[str, Any] | None = None,
        error_code: str | None = None,
    ) -> Execution | None:
        return self._one(
            tx,
            self.sql.SETTLE_SQL,
            execution_id=execution_id,
            owner=owner,
            status=status.value,
            provider_ref=provider_ref,
            result=Jsonb(result) if result is not None else None,
            error_code=error_code,
        )

    def defer(
        self,
        tx: LedgerTx,
        execution_id: str,
        owner: str,
        status: ExecutionStatus,
        *,
        delay_seconds: float,
        error_code: str | None,
        hold_seconds: float = 0.0,
    ) -> Execution | None:
        return self._one(
            tx,
            self.sql.DEFER_SQL,
            execution_id=execution_id,
            owner=owner,
            status=status.value,
            delay_seconds=delay_seconds,
            error_code=error_code,
            hold_seconds=hold_seconds,
        )

    def escalate(
        self, tx: LedgerTx, execution_id: str, owner: str, reason: dict[str, Any]
    ) -> Execution | None:
        return self._one(
            tx, self.sql.ESCALATE_SQL, execution_id=execution_id, owner=owner, reason=Jsonb(reason)
        )

    @staticmethod
    def _one(tx: LedgerTx, query: str, **params: Any) -> Execution | None:
        row = tx.conn.execute(query, params).fetchone()
        return execution_from_row(row) if row is not None else None


@dataclass(frozen=True)
class PurgeReport:
    cutoff: datetime
    executions: int  # finished executions purged (with their proposal and token)
    proposals: int  # proposals that ended without an execution


def purge(pool: Pool, policy: RetentionPolicy, *, batch: int = 500) -> PurgeReport:
    """Delete finished ledger rows older than the policy allows, leaving tombstones.

    Running, unknown, failed_retryable and escalated executions are never purged:
    their outcome is still open. Audit rows are kept (they are the trail).
    """
    q = sql_for(ops_sql.OpsSQL, pool.schema)
    with pool.connection() as conn:
        row = conn.execute(q.CUTOFF_SQL, (policy.days,)).fetchone()
    assert row is not None
    cutoff: datetime = row["cutoff"]
    executions = _purge_batches(pool, q.PICK_FINISHED_EXECUTIONS_SQL, cutoff, batch)
    proposals = _purge_batches(pool, q.PICK_ENDED_PROPOSALS_SQL, cutoff, batch)
    return PurgeReport(cutoff, executions, proposals)


def _purge_batches(pool: Pool, pick: str, cutoff: datetime, batch: int) -> int:
    q = sql_for(ops_sql.OpsSQL, pool.schema)
    total = 0
    while True:
        with pool.connection() as conn, conn.transaction():
            ids = [r["proposal_id"] for r in conn.execute(pick, {"cutoff": cutoff, "batch": batch})]
            if not ids:
                return total
            # The tombstone and the deletes commit together: no moment without either.
            conn.execute(q.INSERT_TOMBSTONES_SQL, {"ids": ids})
            conn.execute(q.UNLINK_SUPERSEDED_SQL, {"ids": ids})
            for statement in (
                q.DELETE_EXECUTIONS_SQL,
                q.DELETE_TOKENS_SQL,
                q.DELETE_PROPOSALS_SQL,
            ):
                conn.execute(statement, {"ids": ids})
        total += len(ids)
        if len(ids) < batch:
            return total


def list_escalations(
    pool: Pool, *, tenant_id: str | None = None, args: PageArgs | None = None
) -> Page[dict[str, Any]]:
    """A page of escalated executions (keyset on `(created_at, execution_id)`, oldest
    first by default) with what a person needs to decide, and their history."""
    args = args or PageArgs()
    args.refuse("thread_id", "proposal_id", "tool_name", "status")
    limit, key = args.checked("escalations", MAX_ESCALATIONS)
    q = sql_for(ops_sql.OpsSQL, pool.schema)
    given = {"tenant_id": tenant_id} if tenant_id is not None else {}
    params: dict[str, Any] = {**given, "limit": limit + 1}
    query = created_page(
        q.LIST_ESCALATIONS_SQL, ops_sql.ESCALATION_FILTERS, given, ops_sql.ESCALATIONS_AFTER,
        args.order, created_after(key), params,
    )  # fmt: skip
    out = []
    with pool.connection() as conn:
        rows = conn.execute(query, params).fetchall()
        for row in rows:
            item = {"kind": "execution", **row}
            item["history"] = [
                dict(h) for h in conn.execute(q.ESCALATION_HISTORY_SQL, (row["proposal_id"],))
            ]
            out.append(item)
    return args.page(out, "escalations", lambda r: created_key(r["created_at"], r["execution_id"]))


LATENCY_BUCKETS = (1.0, 5.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 21600.0, 86400.0)


def ledger_stats(pool: Pool) -> dict[str, Any]:
    """Everything `writegate stats` and the metrics report, read from the ledger."""
    q = sql_for(ops_sql.OpsSQL, pool.schema)
    with pool.connection() as conn:
        open_rows = conn.execute(q.OPEN_EXECUTIONS_SQL).fetchall()
        backlog = conn.execute(q.BACKLOG_SQL).fetchone()
        counts = conn.execute(q.AUDIT_COUNTS_SQL).fetchall()
        conflicts = conn.execute(q.CONFLICTS_SQL).fetchall()
        latency = conn.execute(
            q.RECONCILE_LATENCY_SQL, {"buckets": list(LATENCY_BUCKETS)}
        ).fetchone()
    assert backlog is not None and latency is not None
    per_op: dict[str, dict[str, int]] = {}
    for row in counts:
        per_op[row["operation"]] = {k: int(row[k]) for k in row if k != "operation"}
    for row in conflicts:
        per_op.setdefault(row["operation"], {})["fingerprint_conflicts"] = int(row["n"])
    requests = sum(op.get("execute_requests", 0) for op in per_op.values())
    duplicates = sum(op.get("duplicates", 0) for op in per_op.values())
    return {
        "open_executions": [dict(r) for r in open_rows],
        "backlog": {"size": int(backlog["n"]), "oldest_age_s": float(backlog["oldest_age_s"])},
        "operations": per_op,
        "totals": {
            "execute_requests": requests,
            "duplicates": duplicates,
            "duplicate_rate": duplicates / requests if requests else 0.0,
            "fingerprint_conflicts": sum(
                op.get("fingerprint_conflicts", 0) for op in per_op.values()
            ),
            "unknown_outcomes": sum(op.get("unknown_outcomes", 0) for op in per_op.values()),
            "escalations": sum(op.get("escalations", 0) for op in per_op.values()),
        },
        "reconcile_latency": {
            "count": int(latency["n"]),
            "sum_s": float(latency["total_s"]),
            "max_s": float(latency["max_s"]),
            "p50_s": latency["p50_s"],
            "p95_s": latency["p95_s"],
            "buckets": dict(zip(LATENCY_BUCKETS, latency["bucket_counts"], strict=True)),
        },
    }


__all__ = ["PgBacklog", "PurgeReport", "ledger_stats", "list_escalations", "purge"]
