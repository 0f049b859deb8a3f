"""SQL for the scale part: bulk-made ledger rows, the three queries, and their plans.

Rows are made by `generate_series` in three statements. Of every 10 proposals one is
pending (half of those already past expiry), one declined, eight executed; 1 in 100
executions is `unknown` (the reconcile backlog), and the provider already holds half of
those. Each user has 100 proposals whatever the table size (users = rows / 100), so a
user's pending list is the same size at 10k and at 100k rows.
"""

from __future__ import annotations

TENANT = "tenant_scale"

INSERT_PROPOSALS_SQL = """
INSERT INTO writegate.proposals (proposal_id, thread_id, tool_call_id, subject, tenant_id,
    operation, resource, args, args_digest, fingerprint, state_version, preview,
    policy_version, request_key, status, decided_by, decided_at, created_at, expires_at)
SELECT 'p' || g, 't' || g, 'call_1', 'user_' || ((g / 10) %% %(users)s), %(tenant)s,
    'refund_order', 'order:o' || g,
    jsonb_build_object('order_id', 'o' || g, 'amount_minor', 1000, 'currency', 'CNY',
                       'reason', 'scale test'),
    md5('a' || g), md5('f' || g), 1,
    jsonb_build_object('title', 'Refund order o' || g, 'impact', repeat('x', 200)),
    'v1', 'refund_order:' || %(tenant)s || ':order:o' || g || ':p' || g,
    CASE WHEN g %% 10 = 0 THEN 'awaiting_confirmation'
         WHEN g %% 10 = 1 THEN 'declined' ELSE 'executed' END,
    CASE WHEN g %% 10 = 0 THEN NULL ELSE 'user_' || ((g / 10) %% %(users)s) END,
    CASE WHEN g %% 10 = 0 THEN NULL ELSE now() END,
    now() - make_interval(secs => %(n)s - g),
    CASE WHEN g %% 20 = 0 THEN now() - interval '1 minute' ELSE now() + interval '1 hour' END
FROM generate_series(1, %(n)s) AS g"""

INSERT_TOKENS_SQL = """
INSERT INTO writegate.tokens (token_hash, proposal_id, subject, tenant_id, audience, operation,
    resource, args_digest, policy_version, request_key, issued_at, expires_at, status,
    consumed_at, execution_id)
SELECT md5('h' || g), 'p' || g, 'user_' || ((g / 10) %% %(users)s), %(tenant)s,
    'writegate', 'refund_order', 'order:o' || g, md5('a' || g), 'v1',
    'refund_order:' || %(tenant)s || ':order:o' || g || ':p' || g,
    now(), now() + interval '5 minutes', 'consumed', now(), 'e' || g
FROM generate_series(1, %(n)s) AS g WHERE g %% 10 >= 2"""

INSERT_EXECUTIONS_SQL = """
INSERT INTO writegate.executions (execution_id, request_key, token_hash, proposal_id, tenant_id,
    subject, operation, resource, args, args_digest, fingerprint, status, attempts,
    lease_owner, lease_expires_at, provider_ref, result, created_at, updated_at,
    completed_at)
SELECT 'e' || g, 'refund_order:' || %(tenant)s || ':order:o' || g || ':p' || g,
    md5('h' || g), 'p' || g, %(tenant)s, 'user_' || ((g / 10) %% %(users)s),
    'refund_order', 'order:o' || g,
    jsonb_build_object('order_id', 'o' || g, 'amount_minor', 1000, 'currency', 'CNY',
                       'reason', 'scale test'),
    md5('a' || g), md5('f' || g),
    CASE WHEN g %% 100 = 2 THEN 'unknown' ELSE 'succeeded' END, 1, 'old-worker',
    now() - interval '10 minutes',
    CASE WHEN g %% 100 = 2 THEN NULL ELSE 're_' || g END,
    CASE WHEN g %% 100 = 2 THEN NULL ELSE jsonb_build_object('refund_id', 'r' || g) END,
    now() - interval '10 minutes', now() - interval '10 minutes',
    CASE WHEN g %% 100 = 2 THEN NULL ELSE now() END
FROM generate_series(1, %(n)s) AS g WHERE g %% 10 >= 2"""

# Half the backlog did reach the provider before the answer was lost.
INSERT_PROVIDER_SQL = """
INSERT INTO provider.refunds (idempotency_key, provider_ref, order_id, amount_minor,
    currency, request_digest)
SELECT 'refund_order:' || %(tenant)s || ':order:o' || g || ':p' || g, 're_' || g,
    'o' || g, 1000, 'CNY', md5('d' || g)
FROM generate_series(1, %(n)s) AS g WHERE g %% 200 = 2"""

TRUNCATE_SQL = """
TRUNCATE writegate.executions, writegate.tokens, writegate.presented, writegate.proposals,
    writegate.audit, provider.refunds"""
ANALYZE_SQL = "ANALYZE"

# A user's pending approvals: awaiting and not past expiry on the database clock.
LIST_PENDING_SQL = """
SELECT proposal_id, thread_id, operation, preview, created_at, expires_at
FROM writegate.proposals
WHERE tenant_id = %s AND subject = %s AND status = 'awaiting_confirmation'
  AND expires_at > now()
ORDER BY created_at, proposal_id
LIMIT 50"""

# The expiry sweep: one batch, one transaction; each expired proposal leaves an audit row.
SWEEP_SQL = """
WITH stale AS (
    SELECT proposal_id FROM writegate.proposals
    WHERE status = 'awaiting_confirmation' AND expires_at <= now()
    ORDER BY expires_at
    LIMIT %s
    FOR UPDATE SKIP LOCKED
), expired AS (
    UPDATE writegate.proposals AS p SET status = 'expired'
    FROM stale
    WHERE p.proposal_id = stale.proposal_id AND p.status = 'awaiting_confirmation'
    RETURNING p.tenant_id, p.subject, p.thread_id, p.operation, p.args_digest,
              p.request_key, p.proposal_id
)
INSERT INTO writegate.audit (tenant_id, user_id, thread_id, tool_name, event, arguments_hash,
    status, duration_ms, request_key, proposal_id)
SELECT tenant_id, 'system:expiry', thread_id, operation, 'expire', args_digest,
    'expired', 0, request_key, proposal_id
FROM expired"""

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
