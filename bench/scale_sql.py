"""SQL for the scale part: the provider's rows, the probes the ledger is read with, and
their plans. Read-only on writegate's tables: the ledger rows are made by the ledger
store (`bench/scale.py`), the sweep's writes by the approval service.
"""

from __future__ import annotations

TENANT = "tenant_scale"

# Half the backlog did reach the provider before the answer was lost.
INSERT_PROVIDER_SQL = """
INSERT INTO provider.refunds (idempotency_key, provider_ref, order_id, amount_minor,
    currency, request_digest)
SELECT 'refund_order:' || %(tenant)s || ':order:o' || g || ':p' || g, 're_' || g,
    'o' || g, 1000, 'CNY', md5('d' || g)
FROM generate_series(1, %(n)s) AS g WHERE g %% 200 = 2"""

ANALYZE_SQL = "ANALYZE"

# A user's pending approvals: awaiting and not past expiry on the database clock.
LIST_PENDING_SQL = """
SELECT proposal_id, thread_id, operation, preview, created_at, expires_at
FROM writegate.proposals
WHERE tenant_id = %s AND subject = %s AND status = 'awaiting_confirmation'
  AND expires_at > now()
ORDER BY created_at, proposal_id
LIMIT 50"""

# The expiry sweep's pick: one batch of stale proposals, locked, oldest expiry first
# (each is then expired by the approval service, audited).
STALE_PICK_SQL = """
SELECT proposal_id FROM writegate.proposals
WHERE status = 'awaiting_confirmation' AND expires_at <= now()
ORDER BY expires_at LIMIT %s
FOR UPDATE SKIP LOCKED"""

# What the sweep and the reconciler look for, as read-only probes for plans and timing.
STALE_PROBE_SQL = """
SELECT proposal_id FROM writegate.proposals
WHERE status = 'awaiting_confirmation' AND expires_at <= now()
ORDER BY expires_at LIMIT 1000"""

BACKLOG_PROBE_SQL = """
SELECT execution_id FROM writegate.executions
WHERE status IN ('running', 'unknown', 'failed_retryable')
  AND (status <> 'running' OR lease_expires_at <= now())
ORDER BY updated_at LIMIT 100
FOR UPDATE SKIP LOCKED"""

INDEX_FOR = {
    "list_pending": "proposals_pending_idx",
    "expire_stale": "proposals_expiry_idx",
    "reconcile_backlog": "executions_backlog_idx",
}
DROP_INDEX_SQL = "DROP INDEX {}"
