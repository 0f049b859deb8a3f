"""SQL for the HTTP service's own tables: API keys, thread ownership, click records,
and the per-thread advisory locks. Plain statements with %s / %(name)s parameters; the
approval lists it shows are the ledger's (`checkpoints/views.py`).
"""

from __future__ import annotations

INSERT_KEY_SQL = """
INSERT INTO writegate.api_keys (key_hash, key_id, user_id, tenant_id, roles)
VALUES (%s, %s, %s, %s, %s)
RETURNING key_id, created_at"""

SELECT_KEY_SQL = """
SELECT key_id, user_id, tenant_id, roles FROM writegate.api_keys
WHERE key_hash = %s AND revoked_at IS NULL"""

REVOKE_KEY_SQL = """
UPDATE writegate.api_keys SET revoked_at = now()
WHERE key_id = %s AND revoked_at IS NULL
RETURNING key_id"""

KEY_COLUMNS = "key_id, user_id, tenant_id, roles, created_at, revoked_at"

LIST_KEYS_SQL = f"""
SELECT {KEY_COLUMNS} FROM writegate.api_keys
WHERE (%s::text IS NULL OR tenant_id = %s) AND (NOT %s OR revoked_at IS NULL)
ORDER BY created_at, key_id"""

SELECT_KEY_BY_ID_SQL = f"SELECT {KEY_COLUMNS} FROM writegate.api_keys WHERE key_id = %s"

INSERT_THREAD_SQL = """
INSERT INTO writegate.http_threads (thread_id, tenant_id, user_id)
VALUES (%s, %s, %s)
RETURNING thread_id, tenant_id, user_id, created_at"""

# Another user's thread reads exactly like a missing one.
SELECT_THREAD_SQL = """
SELECT thread_id, tenant_id, user_id, created_at FROM writegate.http_threads
WHERE thread_id = %s AND tenant_id = %s AND user_id = %s"""

LIST_THREADS_SQL = """
SELECT thread_id, tenant_id, user_id, created_at FROM writegate.http_threads
WHERE tenant_id = %s AND user_id = %s
ORDER BY created_at DESC, thread_id
LIMIT %s"""

# A click claims its idempotency key first; a twin finds the row and reads it.
CLAIM_CLICK_SQL = """
INSERT INTO writegate.http_clicks (tenant_id, user_id, idempotency_key, proposal_id, request_digest)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (tenant_id, user_id, idempotency_key) DO NOTHING
RETURNING idempotency_key"""

SELECT_CLICK_SQL = """
SELECT proposal_id, request_digest, status_code, response, completed_at FROM writegate.http_clicks
WHERE tenant_id = %s AND user_id = %s AND idempotency_key = %s"""

# Only the first final answer is kept: a replay never overwrites it.
FINISH_CLICK_SQL = """
UPDATE writegate.http_clicks SET status_code = %s, response = %s, completed_at = now()
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
