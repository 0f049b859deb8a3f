"""SQL for the HTTP service's own tables: API keys, thread ownership, click records,
and the per-thread advisory locks. Plain statements with %s / %(name)s parameters; the
approval lists it shows are the ledger's (`checkpoints/views.py`).
"""

from __future__ import annotations

from writegate.checkpoints.ledger_sql import after_created

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

# A page of keys: keyset on (created_at, key_id), neither ever updated; `{where}` only
# of KEYS_FILTERS' and KEYS_AFTER's fixed texts.
LIST_KEYS_SQL = f"""
SELECT {KEY_COLUMNS} FROM writegate.api_keys
WHERE true{{where}}
ORDER BY created_at {{direction}}, key_id {{direction}}
LIMIT %(limit)s"""
KEYS_FILTERS = {"tenant_id": "tenant_id = %(tenant_id)s", "active": "revoked_at IS NULL"}
KEYS_AFTER = after_created("key_id")

SELECT_KEY_BY_ID_SQL = f"SELECT {KEY_COLUMNS} FROM writegate.api_keys WHERE key_id = %s"

INSERT_THREAD_SQL = """
INSERT INTO writegate.http_threads (thread_id, tenant_id, user_id)
VALUES (%s, %s, %s)
RETURNING thread_id, tenant_id, user_id, created_at"""

# Another user's thread reads exactly like a missing one.
SELECT_THREAD_SQL = """
SELECT thread_id, tenant_id, user_id, created_at FROM writegate.http_threads
WHERE thread_id = %s AND tenant_id = %s AND user_id = %s"""

# A page of a user's threads: keyset on (created_at, thread_id), neither ever updated
# (service migration 3 indexes it); `{where}` only THREADS_AFTER's fixed text.
LIST_THREADS_PAGE_SQL = """
SELECT thread_id, tenant_id, user_id, created_at FROM writegate.http_threads
WHERE tenant_id = %(tenant_id)s AND user_id = %(user_id)s{where}
ORDER BY created_at {direction}, thread_id {direction}
LIMIT %(limit)s"""
THREADS_AFTER = after_created("thread_id")

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
UPDATE writegate.http_clicks
SET status_code = %(status_code)s, response = %(response)s, completed_at = now()
WHERE tenant_id = %(tenant_id)s AND user_id = %(user_id)s AND idempotency_key = %(key)s
  AND completed_at IS NULL"""

# Per-thread serialization of graph runs, across processes. The lock is tied to a
# dedicated session: it ends with the session if the process dies. A run that writes
# also takes the thread's lease row, in the same statement: a row outlives the session
# (a failover, a cut connection), so a holder whose session died while it runs on still
# holds the thread until it lets go or its lease runs out. `generation` fences: the
# lease is renewed and freed only by the generation that took it.
# The database's clock as the lock is granted (`clock_timestamp()`), not the statement's
# start (`now()`): a run that waited on the lock began before its holder freed the lease.
_LEASE_SQL = """
INSERT INTO writegate.thread_leases AS l (thread_id, generation, expires_at)
SELECT %(thread)s, 1, clock_timestamp() + make_interval(secs => %(lease_s)s) FROM locked
ON CONFLICT (thread_id) DO UPDATE
SET generation = l.generation + 1, expires_at = EXCLUDED.expires_at
WHERE l.expires_at <= clock_timestamp()
RETURNING generation"""
THREAD_TRY_LEASE_SQL = f"""
WITH locked AS (
    SELECT 1 FROM (SELECT pg_try_advisory_lock(hashtextextended(%(key)s, 0)) AS ok) t WHERE ok
), leased AS ({_LEASE_SQL})
SELECT EXISTS (SELECT 1 FROM locked) AS ok, (SELECT generation FROM leased) AS generation"""
THREAD_LEASE_SQL = f"""
WITH locked AS (SELECT 1 FROM pg_advisory_lock(hashtextextended(%(key)s, 0))),
leased AS ({_LEASE_SQL})
SELECT true AS ok, (SELECT generation FROM leased) AS generation"""
# Let go: the lease first, then the lock, in one statement on the lock's session.
THREAD_UNLEASE_SQL = """
WITH freed AS (
    UPDATE writegate.thread_leases SET expires_at = now()
    WHERE thread_id = %(thread)s AND generation = %(generation)s
)
SELECT pg_advisory_unlock(hashtextextended(%(key)s, 0))"""
# The same two on any session (the lock's died): no row means the lease was taken over.
FREE_LEASE_SQL = """
UPDATE writegate.thread_leases SET expires_at = now()
WHERE thread_id = %(thread)s AND generation = %(generation)s"""
RENEW_LEASE_SQL = """
UPDATE writegate.thread_leases SET expires_at = now() + make_interval(secs => %(lease_s)s)
WHERE thread_id = %(thread)s AND generation = %(generation)s AND expires_at > now()
RETURNING generation"""
# Local: in the lock's own transaction, so the session's setting is back once it ends.
SET_LOCK_TIMEOUT_SQL = "SELECT set_config('lock_timeout', %s, true)"
THREAD_UNLOCK_SQL = "SELECT pg_advisory_unlock(hashtextextended(%s, 0))"
# Shared: a request that only reads the thread, beside others that only read it.
THREAD_LOCK_SHARED_SQL = "SELECT pg_advisory_lock_shared(hashtextextended(%s, 0))"
THREAD_TRY_LOCK_SHARED_SQL = "SELECT pg_try_advisory_lock_shared(hashtextextended(%s, 0)) AS ok"
THREAD_UNLOCK_SHARED_SQL = "SELECT pg_advisory_unlock_shared(hashtextextended(%s, 0))"
