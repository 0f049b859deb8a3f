"""SQL for the HTTP service: API keys, thread ownership, click records, approval lists.

Plain statements with %s / %(name)s parameters. The approval lists read the ledger's
`wg_proposals` (owned by the protocol) and never write it.
"""

from __future__ import annotations

from writegate.checkpoints.statuses import PENDING_SQL

INSERT_KEY_SQL = """
INSERT INTO wg_api_keys (key_hash, key_id, user_id, tenant_id, roles)
VALUES (%s, %s, %s, %s, %s)
RETURNING key_id, created_at"""

SELECT_KEY_SQL = """
SELECT key_id, user_id, tenant_id, roles FROM wg_api_keys
WHERE key_hash = %s AND revoked_at IS NULL"""

REVOKE_KEY_SQL = """
UPDATE wg_api_keys SET revoked_at = now()
WHERE key_id = %s AND revoked_at IS NULL
RETURNING key_id"""

KEY_COLUMNS = "key_id, user_id, tenant_id, roles, created_at, revoked_at"

LIST_KEYS_SQL = f"""
SELECT {KEY_COLUMNS} FROM wg_api_keys
WHERE (%s::text IS NULL OR tenant_id = %s) AND (NOT %s OR revoked_at IS NULL)
ORDER BY created_at, key_id"""

SELECT_KEY_BY_ID_SQL = f"SELECT {KEY_COLUMNS} FROM wg_api_keys WHERE key_id = %s"

INSERT_THREAD_SQL = """
INSERT INTO wg_http_threads (thread_id, tenant_id, user_id)
VALUES (%s, %s, %s)
RETURNING thread_id, tenant_id, user_id, created_at"""

# Another user's thread reads exactly like a missing one.
SELECT_THREAD_SQL = """
SELECT thread_id, tenant_id, user_id, created_at FROM wg_http_threads
WHERE thread_id = %s AND tenant_id = %s AND user_id = %s"""

LIST_THREADS_SQL = """
SELECT thread_id, tenant_id, user_id, created_at FROM wg_http_threads
WHERE tenant_id = %s AND user_id = %s
ORDER BY created_at DESC, thread_id
LIMIT %s"""

PROPOSAL_COLUMNS = """
proposal_id, thread_id, tool_call_id, subject, tenant_id, operation, resource, args,
args_digest, preview, policy_version, status, superseded_by, decided_by, decided_at,
second_approver, created_at, expires_at"""

# Open for the requester and not past expiry on the database clock (right-open). A
# confirmed one is open only while its thread still asks (after a second approval).
LIST_PENDING_SQL = f"""
SELECT {PROPOSAL_COLUMNS} FROM wg_proposals
WHERE tenant_id = %s AND subject = %s
  AND status IN ({PENDING_SQL})
  AND expires_at > now()
ORDER BY created_at, proposal_id
LIMIT %s"""

LIST_RECENT_SQL = f"""
SELECT {PROPOSAL_COLUMNS} FROM wg_proposals
WHERE tenant_id = %s AND subject = %s
ORDER BY created_at DESC, proposal_id
LIMIT %s"""

# Each with its execution's id, if it ran (one at most: wg_executions.proposal_id is unique).
LIST_THREAD_PROPOSALS_SQL = f"""
SELECT {PROPOSAL_COLUMNS},
    (SELECT e.execution_id FROM wg_executions e
     WHERE e.proposal_id = wg_proposals.proposal_id) AS execution_id
FROM wg_proposals
WHERE thread_id = %s AND tenant_id = %s AND subject = %s
ORDER BY created_at, proposal_id"""

SELECT_EXECUTIONS_FOR_SQL = """
SELECT proposal_id, execution_id, status FROM wg_executions
WHERE proposal_id = ANY(%s)"""

NOW_SQL = "SELECT now() AS now"

# A click claims its idempotency key first; a twin finds the row and reads it.
CLAIM_CLICK_SQL = """
INSERT INTO wg_http_clicks (tenant_id, user_id, idempotency_key, proposal_id, request_digest)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (tenant_id, user_id, idempotency_key) DO NOTHING
RETURNING idempotency_key"""

SELECT_CLICK_SQL = """
SELECT proposal_id, request_digest, status_code, response, completed_at FROM wg_http_clicks
WHERE tenant_id = %s AND user_id = %s AND idempotency_key = %s"""

# Only the first final answer is kept: a replay never overwrites it.
FINISH_CLICK_SQL = """
UPDATE wg_http_clicks SET status_code = %s, response = %s, completed_at = now()
WHERE tenant_id = %s AND user_id = %s AND idempotency_key = %s AND completed_at IS NULL"""

# Per-thread serialization of graph runs, across processes. The lock is tied to a
# dedicated session: it ends with the session if the process dies.
SET_LOCK_TIMEOUT_SQL = "SELECT set_config('lock_timeout', %s, false)"
THREAD_LOCK_SQL = "SELECT pg_advisory_lock(hashtextextended(%s, 0))"
THREAD_TRY_LOCK_SQL = "SELECT pg_try_advisory_lock(hashtextextended(%s, 0)) AS ok"
THREAD_UNLOCK_SQL = "SELECT pg_advisory_unlock(hashtextextended(%s, 0))"
# Shared: a request that only reads the thread, beside others that only read it.
THREAD_LOCK_SHARED_SQL = "SELECT pg_advisory_lock_shared(hashtextextended(%s, 0))"
THREAD_TRY_LOCK_SHARED_SQL = "SELECT pg_try_advisory_lock_shared(hashtextextended(%s, 0)) AS ok"
THREAD_UNLOCK_SHARED_SQL = "SELECT pg_advisory_unlock_shared(hashtextextended(%s, 0))"
RESET_LOCK_TIMEOUT_SQL = "RESET lock_timeout"
