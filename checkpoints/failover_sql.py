"""SQL for the checks after a promotion (approval/failover.py, checkpoints/failover.py).

A check is one row of `writegate.failover_checks` per (timeline, tool), claimed under
a lease as the reconcile backlog is: several reconcilers take turns, and the one whose
lease ran out writes nothing more about it.
"""

from __future__ import annotations

from writegate.approval.models import PENDING, ProposalStatus
from writegate.checkpoints.ledger_sql import PROPOSAL_COLUMNS
from writegate.checkpoints.namespace import Statements
from writegate.checkpoints.statuses import sql_list

_P_COLUMNS = ", ".join("p." + c.strip() for c in PROPOSAL_COLUMNS.split(","))
# Still open when the lost commits were made, as far as the ledger here can tell.
_OPEN_OR_LAPSED = sql_list(PENDING | {ProposalStatus.EXPIRED})


_CLAIMED = """
WHERE (timeline_id, operation) IN (
        SELECT * FROM unnest(%(timelines)s::int[], %(operations)s::text[]))
  AND lease_owner = %(owner)s"""


FAILOVER_ESCALATION_FILTERS = {"tenant_id": "f.tenant_id = %(tenant_id)s"}
FAILOVER_ESCALATIONS_AFTER = {
    "oldest": ("f.escalation_id > %(after)s", "ASC"),
    "newest": ("f.escalation_id < %(after)s", "DESC"),
}


class FailoverSQL(Statements):
    """The failover check's statements, written for the default schema;
    `sql_for(FailoverSQL, schema)` holds them for another."""

    # The (timeline, tool) pairs of promotions that began at least `settle_seconds` ago
    # (the installation's timeline began at -infinity: it is no promotion), not checked
    # yet and held by nobody: inserted, or taken over once their lease ran out.
    CLAIM_CHECK_SQL = """
INSERT INTO writegate.failover_checks AS c
    (timeline_id, operation, attempts, lease_owner, lease_expires_at)
SELECT t.timeline_id, op, 1, %(owner)s, now() + make_interval(secs => %(lease_seconds)s)
FROM writegate.timelines t, unnest(%(operations)s::text[]) AS op
WHERE t.began_at > '-infinity'
  AND t.began_at <= now() - make_interval(secs => %(settle_seconds)s)
  AND NOT EXISTS (
      SELECT 1 FROM writegate.failover_checks d
      WHERE d.timeline_id = t.timeline_id AND d.operation = op AND d.checked_at IS NOT NULL)
ON CONFLICT (timeline_id, operation) DO UPDATE
SET attempts = c.attempts + 1,
    lease_owner = EXCLUDED.lease_owner,
    lease_expires_at = EXCLUDED.lease_expires_at
WHERE c.checked_at IS NULL AND c.lease_expires_at <= now()
RETURNING c.timeline_id, c.operation, c.attempts,
    (SELECT t.began_at FROM writegate.timelines t WHERE t.timeline_id = c.timeline_id)
        AS began_at"""

    # Made before the (last) promotion, still open at %(since)s, never executed here, and
    # waiting still, lapsed, or decided again after the (first) promotion: a decision
    # before it reached this database, and nothing could follow it there.
    OPEN_BEFORE_SQL = f"""
SELECT {_P_COLUMNS} FROM writegate.proposals p
WHERE p.operation = ANY(%(operations)s)
  AND p.created_at < %(last_began)s
  AND p.expires_at > %(since)s
  AND p.status <> 'executed'
  AND (p.status IN ({_OPEN_OR_LAPSED}) OR p.decided_at >= %(first_began)s)
  AND NOT EXISTS (SELECT 1 FROM writegate.executions e WHERE e.proposal_id = p.proposal_id)
ORDER BY p.created_at"""

    UNKNOWN_KEYS_SQL = """
SELECT k AS request_key FROM unnest(%(keys)s::text[]) AS k
WHERE NOT EXISTS (SELECT 1 FROM writegate.proposals p WHERE p.request_key = k)
  AND NOT EXISTS (SELECT 1 FROM writegate.executions e WHERE e.request_key = k)
  AND NOT EXISTS (SELECT 1 FROM writegate.tombstones t WHERE t.request_key = k)"""

    # Once per key (or, for a check that failed, once per promotion and tool).
    ESCALATE_SQL = """
INSERT INTO writegate.failover_escalations
    (request_key, operation, tenant_id, proposal_id, timeline_id, reason)
VALUES (%(request_key)s, %(operation)s, %(tenant_id)s, %(proposal_id)s, %(timeline_id)s,
    %(reason)s)
ON CONFLICT DO NOTHING
RETURNING escalation_id"""

    CHECKED_SQL = f"""
UPDATE writegate.failover_checks
SET checked_at = now(), lease_owner = NULL, lease_expires_at = NULL
{_CLAIMED}"""

    RETRY_CHECK_SQL = f"""
UPDATE writegate.failover_checks
SET lease_expires_at = now() + make_interval(secs => %(retry_seconds)s)
{_CLAIMED}"""

    LIST_FAILOVER_ESCALATIONS_SQL = """
SELECT f.escalation_id, f.request_key, f.operation, f.tenant_id, f.proposal_id,
    f.timeline_id, f.reason AS escalation, f.created_at,
    p.thread_id, p.subject, p.args, p.preview, p.status AS proposal_status
FROM writegate.failover_escalations f
LEFT JOIN writegate.proposals p ON p.proposal_id = f.proposal_id
WHERE true{where}
ORDER BY f.escalation_id {direction}
LIMIT %(limit)s"""
