"""SQL for the ledger store, one named statement per operation.

Every state change is a single guarded statement: the `WHERE status = ...` clause is
the guard, and `RETURNING` tells the caller whether it won.
"""

from __future__ import annotations

from functools import cache

from writegate.checkpoints.statuses import OPEN_EXECUTION_SQL, PENDING_SQL

NOW_SQL = "SELECT now() AS now"

PROPOSAL_COLUMNS = """proposal_id, thread_id, tool_call_id, subject, tenant_id, operation,
    resource, args, args_digest, fingerprint, state_version, preview, policy_version,
    request_key, status, superseded_by, decided_by, decided_at, created_at, expires_at,
    tier, risk, second_approver, second_approved_at, revoked_by, revoked_at, digest_scheme,
    message_id, decision_reason"""

INSERT_PROPOSAL_SQL = f"""
INSERT INTO wg_proposals ({PROPOSAL_COLUMNS})
VALUES (%(proposal_id)s, %(thread_id)s, %(tool_call_id)s, %(subject)s, %(tenant_id)s,
    %(operation)s, %(resource)s, %(args)s, %(args_digest)s, %(fingerprint)s,
    %(state_version)s, %(preview)s, %(policy_version)s, %(request_key)s, %(status)s,
    %(superseded_by)s, %(decided_by)s, %(decided_at)s, %(created_at)s, %(expires_at)s,
    %(tier)s, %(risk)s, %(second_approver)s, %(second_approved_at)s, %(revoked_by)s,
    %(revoked_at)s, %(digest_scheme)s, %(message_id)s, %(decision_reason)s)
ON CONFLICT (thread_id, message_id, tool_call_id) DO NOTHING
RETURNING proposal_id"""

SELECT_PROPOSAL_SQL = f"SELECT {PROPOSAL_COLUMNS} FROM wg_proposals WHERE proposal_id = %s"

SELECT_CALL_PROPOSAL_SQL = f"""
SELECT {PROPOSAL_COLUMNS} FROM wg_proposals
WHERE thread_id = %s AND message_id = %s AND tool_call_id = %s"""

# The same read with the transaction's clock beside the row: now() is the start of the
# transaction whichever statement reads it, so the first read of a transaction brings it
# along instead of a `SELECT now()` of its own.
SELECT_PROPOSAL_NOW_SQL = f"""
SELECT now() AS tx_now, {PROPOSAL_COLUMNS} FROM wg_proposals WHERE proposal_id = %s"""

TRANSITION_PROPOSAL_SQL = """
UPDATE wg_proposals
SET status = %(new)s,
    decided_by = COALESCE(%(decided_by)s, decided_by),
    decided_at = CASE WHEN %(decided_by)s::text IS NULL THEN decided_at ELSE %(now)s END,
    superseded_by = COALESCE(%(superseded_by)s, superseded_by),
    decision_reason = COALESCE(%(reason)s, decision_reason)
WHERE proposal_id = %(proposal_id)s AND status = %(expected)s
RETURNING proposal_id"""

TOKEN_COLUMNS = """token_hash, proposal_id, subject, tenant_id, audience, operation,
    resource, args_digest, policy_version, request_key, issued_at, expires_at, status,
    execution_id, tier, digest_scheme"""

INSERT_TOKEN_SQL = f"""
INSERT INTO wg_tokens ({TOKEN_COLUMNS}, consumed_at)
VALUES (%(token_hash)s, %(proposal_id)s, %(subject)s, %(tenant_id)s, %(audience)s,
    %(operation)s, %(resource)s, %(args_digest)s, %(policy_version)s, %(request_key)s,
    %(issued_at)s, %(expires_at)s, %(status)s, %(execution_id)s, %(tier)s, %(digest_scheme)s,
    %(consumed_at)s)"""

SELECT_TOKEN_SQL = f"SELECT {TOKEN_COLUMNS} FROM wg_tokens WHERE token_hash = %s"
SELECT_TOKEN_FOR_PROPOSAL_SQL = f"SELECT {TOKEN_COLUMNS} FROM wg_tokens WHERE proposal_id = %s"

# Second approval, revocation and the approvers' queue (the tiers feature).
APPROVE_SECOND_SQL = """
UPDATE wg_proposals
SET status = 'confirmed', second_approver = %(approver)s, second_approved_at = %(now)s
WHERE proposal_id = %(proposal_id)s AND status = 'awaiting_second_approval'
  AND subject <> %(approver)s
RETURNING proposal_id"""

REVOKE_PROPOSAL_SQL = """
UPDATE wg_proposals SET status = 'revoked', revoked_by = %(by)s, revoked_at = %(now)s
WHERE proposal_id = %(proposal_id)s AND status = %(expected)s
RETURNING proposal_id"""

SELECT_AWAITING_SECOND_SQL = f"""
SELECT {PROPOSAL_COLUMNS} FROM wg_proposals
WHERE tenant_id = %s AND status = 'awaiting_second_approval' AND expires_at > %s
ORDER BY created_at LIMIT %s"""

REPLACE_TOKEN_HASH_SQL = """
UPDATE wg_tokens SET token_hash = %(new_hash)s, expires_at = %(expires_at)s
WHERE proposal_id = %(proposal_id)s AND status = 'issued'
RETURNING token_hash"""

CONSUME_TOKEN_SQL = """
UPDATE wg_tokens SET status = 'consumed', consumed_at = %s, execution_id = %s
WHERE token_hash = %s AND status = 'issued'
RETURNING token_hash"""

REVOKE_TOKEN_SQL = """
UPDATE wg_tokens SET status = 'revoked'
WHERE proposal_id = %s AND status = 'issued'
RETURNING token_hash"""

EXECUTION_COLUMNS = """execution_id, request_key, token_hash, proposal_id, tenant_id, subject,
    operation, resource, args, args_digest, fingerprint, status, attempts, lease_owner,
    lease_expires_at, provider_ref, result, error_code, created_at, updated_at,
    completed_at, digest_scheme"""

INSERT_EXECUTION_SQL = f"""
INSERT INTO wg_executions ({EXECUTION_COLUMNS})
VALUES (%(execution_id)s, %(request_key)s, %(token_hash)s, %(proposal_id)s, %(tenant_id)s,
    %(subject)s, %(operation)s, %(resource)s, %(args)s, %(args_digest)s, %(fingerprint)s,
    %(status)s, %(attempts)s, %(lease_owner)s, %(lease_expires_at)s, %(provider_ref)s,
    %(result)s, %(error_code)s, %(created_at)s, %(updated_at)s, %(completed_at)s,
    %(digest_scheme)s)
ON CONFLICT (request_key) DO NOTHING
RETURNING execution_id"""

SELECT_EXECUTION_SQL = f"SELECT {EXECUTION_COLUMNS} FROM wg_executions WHERE "
# Sent right after the proposal's locking read, in the same flight: its snapshot is
# taken once that lock is held.
SELECT_EXECUTION_OF_PROPOSAL_KEY_SQL = (
    SELECT_EXECUTION_SQL
    + "request_key = (SELECT request_key FROM wg_proposals WHERE proposal_id = %s)"
)

# propose's one read before it writes: the call's own proposal if it has one (a re-run);
# else the thread's open proposal for the same request and the request's open
# execution. The execution's columns come prefixed, apart from the proposal's.
EXECUTION_PREFIX = "x_"
_PREFIXED_EXECUTION_COLUMNS = ", ".join(
    f"{column.strip()} AS {EXECUTION_PREFIX}{column.strip()}"
    for column in EXECUTION_COLUMNS.split(",")
)
LOOK_UP_CALL_SQL = f"""
SELECT now() AS tx_now, c.*, e.*
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    (SELECT true AS same_call, {PROPOSAL_COLUMNS} FROM wg_proposals
     WHERE thread_id = %(thread_id)s AND tool_call_id = %(tool_call_id)s
       AND message_id = %(message_id)s)
    UNION ALL
    (SELECT false, {PROPOSAL_COLUMNS} FROM wg_proposals
     WHERE thread_id = %(thread_id)s AND fingerprint = %(fingerprint)s
       AND status IN ({PENDING_SQL})
       AND expires_at > COALESCE(%(now)s::timestamptz, now())
     ORDER BY created_at DESC LIMIT 1)
    ORDER BY same_call DESC LIMIT 1
) AS c ON true
LEFT JOIN LATERAL (
    SELECT {_PREFIXED_EXECUTION_COLUMNS} FROM wg_executions
    WHERE tenant_id = %(tenant_id)s AND fingerprint = %(fingerprint)s
      AND status IN ({OPEN_EXECUTION_SQL})
    LIMIT 1
) AS e ON c.same_call IS NOT TRUE"""

# `now` may be null: the transaction's own now(), which RETURNING then reports.
TRANSITION_EXECUTION_SQL = f"""
UPDATE wg_executions
SET status = %(new)s,
    updated_at = COALESCE(%(now)s::timestamptz, now()),
    lease_owner = CASE WHEN %(lease_owner)s::text IS NULL THEN lease_owner
                       ELSE %(lease_owner)s END,
    lease_expires_at = CASE WHEN %(lease_seconds)s::float8 IS NULL THEN lease_expires_at
                       ELSE COALESCE(%(now)s::timestamptz, now())
                            + make_interval(secs => %(lease_seconds)s) END,
    provider_ref = COALESCE(%(provider_ref)s, provider_ref),
    result = COALESCE(%(result)s, result),
    error_code = %(error_code)s,
    attempts = attempts + %(attempt)s,
    escalation = COALESCE(%(escalation)s, escalation),
    completed_at = CASE WHEN %(new)s IN ('succeeded', 'failed_terminal')
                        THEN COALESCE(%(now)s::timestamptz, now()) ELSE completed_at END
WHERE execution_id = %(execution_id)s AND status = ANY(%(expected)s)
  AND (%(require_owner)s::text IS NULL OR lease_owner = %(require_owner)s)
RETURNING {EXECUTION_COLUMNS}"""

AUDIT_COLUMNS = """tenant_id, user_id, thread_id, tool_name, event, arguments, arguments_hash,
    result, status, error_code, duration_ms, request_key, proposal_id, approver,
    requested_digest, approved_digest, executed_digest"""

INSERT_AUDIT_SQL = f"""
INSERT INTO wg_audit ({AUDIT_COLUMNS})
VALUES (%(tenant_id)s, %(user_id)s, %(thread_id)s, %(tool_name)s, %(event)s, %(arguments)s,
    %(arguments_hash)s, %(result)s, %(status)s, %(error_code)s, %(duration_ms)s,
    %(request_key)s, %(proposal_id)s, %(approver)s, %(requested_digest)s,
    %(approved_digest)s, %(executed_digest)s)"""

SELECT_AUDIT_SQL = f"""
SELECT audit_id, created_at, {AUDIT_COLUMNS} FROM wg_audit
WHERE tenant_id = %(tenant_id)s
  AND (%(thread_id)s::text IS NULL OR thread_id = %(thread_id)s)
  AND (%(proposal_id)s::text IS NULL OR proposal_id = %(proposal_id)s)
ORDER BY audit_id
LIMIT %(limit)s"""

SET_TRACEPARENT_SQL = """
UPDATE wg_proposals SET traceparent = %s WHERE proposal_id = %s"""

SELECT_TRACEPARENT_SQL = """
SELECT p.traceparent FROM wg_proposals p
WHERE p.proposal_id = %(proposal_id)s
   OR p.proposal_id = (SELECT t.proposal_id FROM wg_tokens t WHERE t.token_hash = %(token_hash)s)
LIMIT 1"""

# A guarded write sent ahead, without waiting for its answer (`PgLedgerTx._expect`): the
# server checks that it wrote exactly one row, else fails the transaction (WG001).
EXPECTED_SQLSTATE = "WG001"


@cache  # a read or two, wrapped on every confirm
def expect_none(read: str) -> str:
    """`read`, sent unanswered: the transaction fails (WG001) if it finds a row."""
    return (
        "SELECT wg_expect_rows((SELECT count(*) FROM (" + read + ") AS found), 0, %(expect_what)s)"
    )


@cache  # a handful of writes, each wrapped on every confirm
def expect_one(write: str) -> str:
    return (
        "WITH written AS (" + write + ")\n"
        "SELECT wg_expect_rows((SELECT count(*) FROM written), 1, %(expect_what)s)"
    )
