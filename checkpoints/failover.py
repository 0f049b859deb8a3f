"""The checks after a promotion on PostgreSQL: `approval.store.FailoverStore`.

Whether there is anything to check costs no round trip on a database that was never
promoted: each pooled connection knows when the timeline it is on began
(`checkpoints/timelines.py`), and the installation's own timeline is no promotion.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from writegate.approval.models import AuditRecord, Proposal, ProposalStatus
from writegate.approval.store import FailoverEscalation, Promotion
from writegate.approval.views import Page, PageArgs, serial_after
from writegate.checkpoints import failover_sql, ledger_sql
from writegate.checkpoints.ledger import PgLedgerTx
from writegate.checkpoints.ledger_sql import keyset
from writegate.checkpoints.namespace import sql_for
from writegate.checkpoints.pool import Pool
from writegate.checkpoints.timelines import began_at


class PgFailovers:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.sql = sql_for(failover_sql.FailoverSQL, pool.schema)

    def claim_check(
        self, owner: str, *, operations: Sequence[str], settle_seconds: float, lease_seconds: float
    ) -> Promotion | None:
        params = {
            "owner": owner,
            "operations": list(operations),
            "settle_seconds": settle_seconds,
            "lease_seconds": lease_seconds,
        }
        with self.pool.connection() as conn:
            if began_at(conn) is None:  # on the timeline writegate was installed on
                return None
            rows = conn.execute(self.sql.CLAIM_CHECK_SQL, params).fetchall()
        if not rows:
            return None
        began = [row["began_at"] for row in rows]
        return Promotion(
            checks=tuple((row["timeline_id"], row["operation"]) for row in rows),
            first_began=min(began),
            last_began=max(began),
            attempt=max(row["attempts"] for row in rows),
        )

    def open_before(self, promotion: Promotion, since: datetime) -> list[Proposal]:
        params = {
            "operations": list(promotion.operations),
            "first_began": promotion.first_began,
            "last_began": promotion.last_began,
            "since": since,
        }
        with self.pool.connection() as conn:
            rows = conn.execute(self.sql.OPEN_BEFORE_SQL, params).fetchall()
        return [Proposal(**{**row, "status": ProposalStatus(row["status"])}) for row in rows]

    def unknown_keys(self, keys: Sequence[str]) -> set[str]:
        if not keys:
            return set()
        with self.pool.connection() as conn:
            rows = conn.execute(self.sql.UNKNOWN_KEYS_SQL, {"keys": list(keys)}).fetchall()
        return {row["request_key"] for row in rows}

    def escalate(self, escalation: FailoverEscalation, audit: AuditRecord | None) -> bool:
        params = {
            "request_key": escalation.request_key,
            "operation": escalation.operation,
            "tenant_id": escalation.tenant_id,
            "proposal_id": escalation.proposal_id,
            "timeline_id": escalation.timeline_id,
            "reason": Jsonb(escalation.reason),
        }
        with self.pool.connection() as conn, conn.transaction():
            if conn.execute(self.sql.ESCALATE_SQL, params).fetchone() is None:
                return False  # escalated already: said once
            if audit is not None:  # the escalation and its audit row commit together
                PgLedgerTx(
                    conn, sql_for(ledger_sql.LedgerSQL, self.pool.schema), None
                ).insert_audit(audit)
        return True

    def end_check(self, promotion: Promotion, owner: str, *, retry_seconds: float | None) -> None:
        params: dict[str, Any] = {
            "timelines": [timeline for timeline, _ in promotion.checks],
            "operations": [operation for _, operation in promotion.checks],
            "owner": owner,
            "retry_seconds": retry_seconds,
        }
        query = self.sql.CHECKED_SQL if retry_seconds is None else self.sql.RETRY_CHECK_SQL
        with self.pool.connection() as conn:
            conn.execute(query, params)


MAX_ESCALATIONS = 1_000  # one page of escalations, at most


def list_failover_escalations(
    pool: Pool, *, tenant_id: str | None = None, args: PageArgs | None = None
) -> Page[dict[str, Any]]:
    """A page of what the checks after a promotion left for a person (keyset on
    `escalation_id`, a bigserial), oldest first by default."""
    args = args or PageArgs()
    args.refuse("thread_id", "proposal_id", "tool_name", "status")
    limit, key = args.checked("failover_escalations", MAX_ESCALATIONS)
    q = sql_for(failover_sql.FailoverSQL, pool.schema)
    given = {"tenant_id": tenant_id} if tenant_id is not None else {}
    params: dict[str, Any] = {**given, "limit": limit + 1, "after": serial_after(key)}
    later, direction = failover_sql.FAILOVER_ESCALATIONS_AFTER[args.order]
    filters = failover_sql.FAILOVER_ESCALATION_FILTERS
    later = later if key is not None else ""
    query = keyset(q.LIST_FAILOVER_ESCALATIONS_SQL, filters, given, later, direction)
    with pool.connection() as conn:
        rows = conn.execute(query, params).fetchall()
    listed = [{"kind": "failover", **row} for row in rows]
    return args.page(listed, "failover_escalations", lambda r: [r["escalation_id"]])


__all__ = ["PgFailovers", "list_failover_escalations"]
