"""SQL for operations: the reconcile backlog, escalations, retention and ledger statistics.

Every reconciler transition is one statement guarded by `status = 'running' AND
lease_owner = %(owner)s`: a worker whose lease was taken over writes nothing. The
backlog is claimed with `FOR UPDATE SKIP LOCKED`, so any number of workers, in any
number of processes, each get different rows and never wait on each other.
"""

from __future__ import annotations

from writegate.checkpoints.ledger_sql import (
    EXECUTION_COLUMNS,
    EXECUTION_JOIN,
    EXECUTION_OWN,
    after_created,
)
from writegate.checkpoints.namespace import Statements
from writegate.checkpoints.statuses import OPEN_EXECUTION_SQL, RECONCILABLE_SQL


def _returning_execution(update: str) -> str:
    """`update` (of one execution, `RETURNING` left off) answering with the execution as
    it is read: its own columns and what it runs, from its proposal."""
    return f"""
WITH done AS ({update}
RETURNING {EXECUTION_OWN})
SELECT {EXECUTION_COLUMNS} FROM done e JOIN {EXECUTION_JOIN}"""


# Due: running, unknown or failed_retryable, with no live lease (a worker that died, or
# an outcome recorded and let go; a call past its deadline keeps its lease while it
# runs) and past its next check. The status list matches the partial index
# executions_backlog_idx.
_DUE = f"""
    e.status IN ({RECONCILABLE_SQL})
    AND (e.lease_expires_at IS NULL OR e.lease_expires_at <= now())
    AND (e.next_check_at IS NULL OR e.next_check_at <= now())"""


_GUARD = "WHERE execution_id = %(execution_id)s AND status = 'running' AND lease_owner = %(owner)s"


ESCALATION_FILTERS = {"tenant_id": "p.tenant_id = %(tenant_id)s"}
ESCALATIONS_AFTER = after_created("e.execution_id", at="e.created_at")


class OpsSQL(Statements):
    """The reconciler's and retention's statements, written for the default schema;
    `sql_for(OpsSQL, schema)` holds them for another."""

    # A reconciler claims only executions of the tools it runs (%(operations)s).
    CLAIM_DUE_SQL = f"""
WITH due AS (
    SELECT e.execution_id, e.status AS previous_status
    FROM writegate.executions e JOIN {EXECUTION_JOIN}
    WHERE {_DUE} AND p.operation = ANY(%(operations)s)
    ORDER BY e.updated_at
    LIMIT %(limit)s
    FOR UPDATE OF e SKIP LOCKED
)
UPDATE writegate.executions AS e
SET status = 'running',
    lease_owner = %(owner)s,
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
    next_check_at = NULL,
    updated_at = now()
FROM due, writegate.proposals p
WHERE e.execution_id = due.execution_id AND p.proposal_id = e.proposal_id
RETURNING {EXECUTION_COLUMNS}, due.previous_status, e.checks + 1 AS checks,
    extract(epoch FROM now() - e.created_at)::float8 AS age_seconds"""

    # What a reconciler left for the processes that run other tools.
    DUE_ELSEWHERE_SQL = f"""
SELECT p.operation, count(*) AS n FROM writegate.executions e JOIN {EXECUTION_JOIN}
WHERE {_DUE} AND NOT p.operation = ANY(%(operations)s)
GROUP BY p.operation ORDER BY p.operation"""

    SETTLE_SQL = _returning_execution(f"""
UPDATE writegate.executions
SET status = %(status)s,
    provider_ref = COALESCE(%(provider_ref)s, provider_ref),
    result = COALESCE(%(result)s, result),
    error_code = %(error_code)s,
    updated_at = now(),
    completed_at = now(),
    reconciled_at = now()
{_GUARD}""")

    DEFER_SQL = _returning_execution(f"""
UPDATE writegate.executions
SET status = %(status)s,
    error_code = %(error_code)s,
    checks = checks + 1,
    next_check_at = now() + make_interval(secs => %(delay_seconds)s),
    lease_expires_at = now() + make_interval(secs => %(hold_seconds)s),
    updated_at = now()
{_GUARD}""")

    ESCALATE_SQL = _returning_execution(f"""
UPDATE writegate.executions
SET status = 'escalated', escalation = %(reason)s, checks = checks + 1, updated_at = now()
{_GUARD}""")

    # A page of escalated executions: keyset on (created_at, execution_id), neither ever
    # updated; `{where}` only of ESCALATION_FILTERS' and ESCALATIONS_AFTER's fixed texts.
    LIST_ESCALATIONS_SQL = f"""
SELECT {EXECUTION_COLUMNS}, e.checks, e.escalation, p.thread_id, p.decided_by, p.preview
FROM writegate.executions e JOIN {EXECUTION_JOIN}
WHERE e.status = 'escalated'{{where}}
ORDER BY e.created_at {{direction}}, e.execution_id {{direction}}
LIMIT %(limit)s"""

    ESCALATION_HISTORY_SQL = """
SELECT created_at, event, user_id, status, error_code, result
FROM writegate.audit WHERE proposal_id = %s AND event IN ('execute', 'reconcile')
ORDER BY audit_id"""

    # -- tombstones and retention -------------------------------------------------------

    PICK_FINISHED_EXECUTIONS_SQL = """
SELECT proposal_id FROM writegate.executions
WHERE status IN ('succeeded', 'failed_terminal') AND completed_at < %(cutoff)s
ORDER BY completed_at
LIMIT %(batch)s
FOR UPDATE SKIP LOCKED"""

    # Proposals that ended without an execution are dead once they expired.
    PICK_ENDED_PROPOSALS_SQL = """
SELECT proposal_id FROM writegate.proposals
WHERE status <> 'executed' AND expires_at < %(cutoff)s
ORDER BY expires_at
LIMIT %(batch)s
FOR UPDATE SKIP LOCKED"""

    # A batch of stale proposals (awaiting and past expiry on the database clock), locked,
    # oldest expiry first, on the partial index proposals_expiry_idx: the pick of a sweep
    # that expires each with the approval service's `expire_if_due` (audited). The
    # service itself expires a proposal when it is next read; `writegate bench` sweeps.
    PICK_STALE_PROPOSALS_SQL = """
SELECT proposal_id FROM writegate.proposals
WHERE status = 'awaiting_confirmation' AND expires_at <= now()
ORDER BY expires_at
LIMIT %(batch)s
FOR UPDATE SKIP LOCKED"""

    INSERT_TOMBSTONES_SQL = """
INSERT INTO writegate.tombstones (request_key, token_hash, proposal_id, thread_id, tool_call_id,
    tenant_id, subject, operation, fingerprint, execution_id, final_status, provider_ref,
    completed_at, purged_at)
SELECT p.request_key, t.token_hash, p.proposal_id, p.thread_id, p.tool_call_id, p.tenant_id,
    p.subject, p.operation, p.fingerprint, e.execution_id, COALESCE(e.status, p.status),
    e.provider_ref, e.completed_at, now()
FROM writegate.proposals p
LEFT JOIN writegate.tokens t ON t.proposal_id = p.proposal_id
LEFT JOIN writegate.executions e ON e.proposal_id = p.proposal_id
WHERE p.proposal_id = ANY(%(ids)s)
ON CONFLICT (request_key) DO NOTHING"""

    # A kept proposal may name a purged one as its successor; the link goes, the row stays.
    UNLINK_SUPERSEDED_SQL = """
UPDATE writegate.proposals SET superseded_by = NULL
WHERE superseded_by = ANY(%(ids)s) AND NOT proposal_id = ANY(%(ids)s)"""

    DELETE_EXECUTIONS_SQL = "DELETE FROM writegate.executions WHERE proposal_id = ANY(%(ids)s)"

    DELETE_TOKENS_SQL = "DELETE FROM writegate.tokens WHERE proposal_id = ANY(%(ids)s)"

    DELETE_PROPOSALS_SQL = "DELETE FROM writegate.proposals WHERE proposal_id = ANY(%(ids)s)"

    CUTOFF_SQL = "SELECT now() - make_interval(days => %s) AS cutoff"

    # -- statistics (also the Prometheus metrics) ----------------------------------------

    OPEN_EXECUTIONS_SQL = f"""
SELECT p.operation, e.status, count(*) AS n FROM writegate.executions e JOIN {EXECUTION_JOIN}
WHERE e.status IN ({OPEN_EXECUTION_SQL})
GROUP BY p.operation, e.status"""

    BACKLOG_SQL = f"""
SELECT count(*) AS n,
    COALESCE(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_age_s
FROM writegate.executions
WHERE status IN ({RECONCILABLE_SQL})
  AND (lease_expires_at IS NULL OR lease_expires_at <= now())"""

    # Counted from the audit trail, so every process's events count, whoever scrapes.
    AUDIT_COUNTS_SQL = """
SELECT tool_name AS operation,
    count(*) FILTER (WHERE event = 'execute') AS execute_requests,
    count(*) FILTER (WHERE event = 'execute' AND status = 'duplicate') AS duplicates,
    count(DISTINCT request_key) FILTER (
        WHERE status = 'unknown'
           OR (event = 'reconcile' AND result->>'action' = 'claimed'
               AND result->>'from' IN ('running', 'unknown'))
    ) AS unknown_outcomes,
    count(*) FILTER (WHERE event = 'reconcile' AND status = 'escalated') AS escalations
FROM writegate.audit
WHERE event IN ('execute', 'reconcile')
GROUP BY tool_name"""

    CONFLICTS_SQL = """
SELECT tool_name AS operation, count(*) AS n FROM writegate.audit
WHERE error_code = 'idempotency_conflict' GROUP BY tool_name"""

    # Seconds from an execution's start to the reconciler's final answer.
    RECONCILE_LATENCY_SQL = """
WITH lat AS (
    SELECT extract(epoch FROM reconciled_at - created_at)::float8 AS s
    FROM writegate.executions WHERE reconciled_at IS NOT NULL
)
SELECT (SELECT count(*) FROM lat) AS n,
    (SELECT COALESCE(sum(s), 0) FROM lat) AS total_s,
    (SELECT COALESCE(max(s), 0) FROM lat) AS max_s,
    (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY s) FROM lat) AS p50_s,
    (SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY s) FROM lat) AS p95_s,
    ARRAY(SELECT (SELECT count(*) FROM lat WHERE s <= b) FROM unnest(%(buckets)s::float8[])
          WITH ORDINALITY AS u(b, i) ORDER BY i) AS bucket_counts"""
