"""SQL for the ledger store, one named statement per operation.

Every state change is a single guarded statement: the `WHERE status = ...` clause is
the guard, and `RETURNING` tells the caller whether it won. The writes of several rows
at once (a proposal and its audit row; a confirm's claim) are calls of the functions
that migration 1 defines (`checkpoints/schema.py`), one statement each.
"""

from __future__ import annotations

from typing import Any

from writegate.checkpoints.namespace import Statements
from writegate.checkpoints.statuses import OPEN_EXECUTION_SQL, PENDING_SQL

PROPOSAL_COLUMNS = """proposal_id, thread_id, tool_call_id, subject, tenant_id, operation,
    resource, args, args_digest, fingerprint, state_version, preview, policy_version,
    request_key, status, superseded_by, decided_by, decided_at, created_at, expires_at,
    tier, risk, second_approver, second_approved_at, revoked_by, revoked_at, digest_scheme,
    message_id, decision_reason"""


def names(columns: str) -> tuple[str, ...]:
    """The names of a column list."""
    return tuple(name.strip() for name in columns.split(","))


def columns(listed: str, alias: str = "", prefix: str = "") -> str:
    """`listed` (a column list) for a select list: each qualified by `alias` if given,
    and named with `prefix` before it if given."""
    each = names(listed)
    qualified = [f"{alias}.{name}" if alias else name for name in each]
    if prefix:
        qualified = [f"{q} AS {prefix}{name}" for q, name in zip(qualified, each, strict=True)]
    return ", ".join(qualified)


# A token's own columns, what the confirm fixed (docs/protocol.md, "The rows"). What it
# is bound to is its proposal's: the foreign key holds it, nothing here copies it.
TOKEN_COLUMNS = """token_hash, proposal_id, audience, policy_version, issued_at, expires_at,
    status, execution_id"""


AWAITING_FILTERS = {
    "thread_id": "thread_id = %(thread_id)s",
    "proposal_id": "proposal_id = %(proposal_id)s",
    "operation": "operation = %(operation)s",
    "exclude": "subject <> %(exclude)s",
}


def after_created(id_column: str, at: str = "created_at") -> dict[str, tuple[str, str]]:
    """Per order, the condition for rows after a `(created_at, id)` cursor's row
    (`%(after_at)s`, `%(after_id)s`) and the direction to read them in."""
    return {
        "oldest": (f"({at}, {id_column}) > (%(after_at)s, %(after_id)s)", "ASC"),
        "newest": (f"({at}, {id_column}) < (%(after_at)s, %(after_id)s)", "DESC"),
    }


def keyset(
    template: str, filters: dict[str, str], given: dict[str, Any], later: str, direction: str
) -> str:
    """A page's statement: `template` with the fixed text of each filter given, and of
    `later` (after the cursor's row; empty on the first page), in `direction`."""
    where = [text for name, text in filters.items() if name in given] + [later]
    conditions = "".join(f"\n  AND {each}" for each in where if each)
    return template.format(where=conditions, direction=direction)


def created_page(
    template: str,
    filters: dict[str, str],
    given: dict[str, Any],
    afters: dict[str, tuple[str, str]],
    order: str,
    after: tuple[Any, str] | None,
    params: dict[str, Any],
) -> str:
    """`keyset` for a list keyed on `(created_at, id)`: the page after `after` (the
    cursor's key; None for the first page), whose values go into `params`."""
    later, direction = afters[order]
    if after is not None:
        params["after_at"], params["after_id"] = after
    return keyset(template, filters, given, later if after is not None else "", direction)


AWAITING_AFTER = after_created("proposal_id")


# An execution's own columns: the claim (its request key, the token it consumed) and
# its progress (docs/protocol.md, "The rows").
EXECUTION_OWN = """execution_id, request_key, token_hash, proposal_id, status, attempts,
    lease_owner, lease_expires_at, provider_ref, result, error_code, created_at, updated_at,
    completed_at"""
# What an execution runs, read from its proposal: the foreign key holds it, never copied.
EXECUTION_FROM_PROPOSAL = """tenant_id, subject, operation, resource, args, args_digest,
    fingerprint, digest_scheme"""
# An execution as it is read: its own columns (`e`) and its proposal's (`p`), joined so.
EXECUTION_COLUMNS = columns(EXECUTION_OWN, "e") + ", " + columns(EXECUTION_FROM_PROPOSAL, "p")
EXECUTION_JOIN = "writegate.proposals p ON p.proposal_id = e.proposal_id"

# The columns of the token and of the execution read under a proposal's lock come
# prefixed (the view writegate.locked), apart from the proposal's.
TOKEN_PREFIX, EXECUTION_PREFIX = "t_", "x_"

# The execution's columns as LOOK_UP_CALL_SQL reads them, prefixed.
_PREFIXED_EXECUTION_COLUMNS = (
    columns(EXECUTION_OWN, "e", EXECUTION_PREFIX)
    + ", "
    + columns(EXECUTION_FROM_PROPOSAL, "p", EXECUTION_PREFIX)
)

AUDIT_COLUMNS = """tenant_id, user_id, thread_id, tool_name, event, arguments, arguments_hash,
    result, status, error_code, duration_ms, request_key, proposal_id, approver,
    requested_digest, approved_digest, executed_digest"""


AUDIT_FILTERS = {
    "thread_id": "thread_id = %(thread_id)s",
    "proposal_id": "proposal_id = %(proposal_id)s",
    "tool_name": "tool_name = %(tool_name)s",
    "status": "status = %(status)s",
    "user_id": "user_id = %(user_id)s",
}
AUDIT_AFTER = {
    "oldest": ("audit_id > %(after)s", "ASC"),
    "newest": ("audit_id < %(after)s", "DESC"),
}


TOMBSTONE_COLUMNS = """request_key, token_hash, proposal_id, tenant_id, subject, operation,
    final_status, execution_id, provider_ref, completed_at, purged_at"""


def column_names(statement: str) -> list[str]:
    """The columns a statement names in its first parentheses, in order."""
    inside = statement[statement.index("(") + 1 : statement.index(")")]
    return [name.strip() for name in inside.split(",")]


class LedgerSQL(Statements):
    """The ledger's statements, written for the default schema;
    `sql_for(LedgerSQL, schema)` holds them for another."""

    NOW_SQL = "SELECT now() AS now"

    # The proposal and its audit row (writegate.propose): false if the call has one already.
    PROPOSE_SQL = "SELECT writegate.propose(%s, %s) AS inserted"

    # The confirm's move to an execution (writegate.claim), under the proposal's lock.
    CLAIM_SQL = "SELECT writegate.claim(%s, %s, %s, %s, %s, %s, %s)"

    # Audit rows, in order (writegate.write_audit).
    INSERT_AUDIT_SQL = "SELECT writegate.write_audit(%s)"

    SELECT_PROPOSAL_SQL = (
        f"SELECT {PROPOSAL_COLUMNS} FROM writegate.proposals WHERE proposal_id = %s"
    )

    # The proposal, its execution once it executed (its columns prefixed), and the
    # statement's clock, in one read: the approval's view needs all three.
    SELECT_PROPOSAL_EXECUTION_SQL = f"""
SELECT now() AS tx_now, p.*, x.*
FROM (SELECT 1) AS one
LEFT JOIN (SELECT {PROPOSAL_COLUMNS} FROM writegate.proposals WHERE proposal_id = %(id)s) AS p
    ON true
LEFT JOIN (SELECT {_PREFIXED_EXECUTION_COLUMNS} FROM writegate.executions e
           JOIN {EXECUTION_JOIN} WHERE e.proposal_id = %(id)s) AS x
    ON p.status = 'executed'"""

    SELECT_CALL_PROPOSAL_SQL = f"""
SELECT {PROPOSAL_COLUMNS} FROM writegate.proposals
WHERE thread_id = %s AND message_id = %s AND tool_call_id = %s"""

    # The proposal, locked, and what is read under its lock (writegate.lock_proposal), with
    # the transaction's clock beside it: now() is the start of the transaction whichever
    # statement reads it, so the lock brings it along.
    # Only the token's and the execution's own columns: what they run comes from the
    # proposal's (the view has their old copies too, for the previous release).
    LOCK_PROPOSAL_SQL = f"""
SELECT now() AS tx_now, {PROPOSAL_COLUMNS},
    {", ".join(TOKEN_PREFIX + name for name in names(TOKEN_COLUMNS))},
    {", ".join(EXECUTION_PREFIX + name for name in names(EXECUTION_OWN))}, purged
FROM writegate.lock_proposal(%s)"""

    TRANSITION_PROPOSAL_SQL = """
UPDATE writegate.proposals
SET status = %(new)s,
    decided_by = COALESCE(%(decided_by)s, decided_by),
    decided_at = CASE WHEN %(decided_by)s::text IS NULL THEN decided_at ELSE %(now)s END,
    superseded_by = COALESCE(%(superseded_by)s, superseded_by),
    decision_reason = COALESCE(%(reason)s, decision_reason)
WHERE proposal_id = %(proposal_id)s AND status = %(expected)s
RETURNING proposal_id"""

    # The columns the token copies of its proposal are the database's to fill
    # (writegate.token_from_proposal, migration 10), while they exist.
    INSERT_TOKEN_SQL = f"""
INSERT INTO writegate.tokens ({TOKEN_COLUMNS}, consumed_at)
VALUES ({", ".join(f"%({name})s" for name in names(TOKEN_COLUMNS))}, NULL)"""

    # Rows made whole elsewhere (a benchmark's seed, a copy of a ledger), many at once:
    # COPY, one per table, each row's values in the order of the columns named.
    LOAD_PROPOSALS_SQL = f"COPY writegate.proposals ({PROPOSAL_COLUMNS}) FROM STDIN"

    LOAD_TOKENS_SQL = f"COPY writegate.tokens ({TOKEN_COLUMNS}, consumed_at) FROM STDIN"

    LOAD_EXECUTIONS_SQL = f"COPY writegate.executions ({EXECUTION_OWN}) FROM STDIN"

    SELECT_TOKEN_SQL = f"SELECT {TOKEN_COLUMNS} FROM writegate.tokens WHERE token_hash = %s"

    SELECT_TOKEN_FOR_PROPOSAL_SQL = (
        f"SELECT {TOKEN_COLUMNS} FROM writegate.tokens WHERE proposal_id = %s"
    )

    # Second approval, revocation and the approvers' queue (the tiers feature).
    APPROVE_SECOND_SQL = """
UPDATE writegate.proposals
SET status = 'confirmed', second_approver = %(approver)s, second_approved_at = %(now)s
WHERE proposal_id = %(proposal_id)s AND status = 'awaiting_second_approval'
  AND subject <> %(approver)s
RETURNING proposal_id"""

    REVOKE_PROPOSAL_SQL = """
UPDATE writegate.proposals SET status = 'revoked', revoked_by = %(by)s, revoked_at = %(now)s
WHERE proposal_id = %(proposal_id)s AND status = %(expected)s
RETURNING proposal_id"""

    # A thread's proposals still open (a question, or confirmed and not run yet).
    SELECT_THREAD_PENDING_SQL = f"""
SELECT {PROPOSAL_COLUMNS} FROM writegate.proposals
WHERE thread_id = %s
  AND status IN ('awaiting_confirmation', 'awaiting_second_approval', 'confirmed')
ORDER BY created_at"""

    SELECT_AWAITING_SECOND_SQL = f"""
SELECT {PROPOSAL_COLUMNS} FROM writegate.proposals
WHERE tenant_id = %s AND status = 'awaiting_second_approval' AND expires_at > %s
ORDER BY created_at LIMIT %s"""

    # A page of the second approver's queue: keyset on (created_at, proposal_id), neither
    # ever updated; `{where}` only of AWAITING_FILTERS' and AWAITING_AFTER's fixed texts.
    AWAITING_SECOND_PAGE_SQL = f"""
SELECT {PROPOSAL_COLUMNS} FROM writegate.proposals
WHERE tenant_id = %(tenant_id)s AND status = 'awaiting_second_approval'
  AND expires_at > %(now)s{{where}}
ORDER BY created_at {{direction}}, proposal_id {{direction}}
LIMIT %(limit)s"""

    REPLACE_TOKEN_HASH_SQL = """
UPDATE writegate.tokens SET token_hash = %(new_hash)s, expires_at = %(expires_at)s
WHERE proposal_id = %(proposal_id)s AND status = 'issued'
RETURNING token_hash"""

    REVOKE_TOKEN_SQL = """
UPDATE writegate.tokens SET status = 'revoked'
WHERE proposal_id = %s AND status = 'issued'
RETURNING token_hash"""

    SELECT_EXECUTION_SQL = (
        f"SELECT {EXECUTION_COLUMNS} FROM writegate.executions e JOIN {EXECUTION_JOIN} WHERE "
    )

    # propose's one read before it writes: the call's own proposal if it has one (a
    # re-run); else the thread's open proposal for the same request and the request's
    # open execution. The execution's columns come prefixed, apart from the proposal's.
    LOOK_UP_CALL_SQL = f"""
SELECT now() AS tx_now, c.*, x.*
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    (SELECT true AS same_call, {PROPOSAL_COLUMNS} FROM writegate.proposals
     WHERE thread_id = %(thread_id)s AND tool_call_id = %(tool_call_id)s
       AND (message_id = %(message_id)s
            -- asked before message ids were recorded (a database adopted from the
            -- layout before the schema) and still waiting: the same question
            OR (message_id = '' AND status IN ({PENDING_SQL})))
     ORDER BY message_id = %(message_id)s DESC LIMIT 1)
    UNION ALL
    (SELECT false, {PROPOSAL_COLUMNS} FROM writegate.proposals
     WHERE thread_id = %(thread_id)s AND fingerprint = %(fingerprint)s
       AND status IN ({PENDING_SQL})
       AND expires_at > COALESCE(%(now)s::timestamptz, now())
     ORDER BY created_at DESC LIMIT 1)
    ORDER BY same_call DESC LIMIT 1
) AS c ON true
LEFT JOIN LATERAL (
    SELECT {_PREFIXED_EXECUTION_COLUMNS}
    FROM writegate.proposals p JOIN writegate.executions e ON e.proposal_id = p.proposal_id
    WHERE p.tenant_id = %(tenant_id)s AND p.fingerprint = %(fingerprint)s
      AND p.status = 'executed' AND e.status IN ({OPEN_EXECUTION_SQL})
    LIMIT 1
) AS x ON c.same_call IS NOT TRUE"""

    # `now` may be null: the transaction's own now(), which RETURNING then reports. The
    # audit rows (`audit`, a JSON list, or null for none) are written by the same statement
    # only if the guard held: a recorded outcome is one statement with its audit row.
    TRANSITION_EXECUTION_SQL = f"""
WITH done AS (
UPDATE writegate.executions
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
RETURNING {EXECUTION_OWN}
), audited AS (
INSERT INTO writegate.audit ({AUDIT_COLUMNS})
SELECT {AUDIT_COLUMNS}
FROM jsonb_populate_recordset(NULL::writegate.audit, %(audit)s::jsonb) WITH ORDINALITY
WHERE EXISTS (SELECT 1 FROM done)
ORDER BY ordinality
)
SELECT {EXECUTION_COLUMNS} FROM done e JOIN {EXECUTION_JOIN}"""

    SELECT_AUDIT_SQL = f"""
SELECT audit_id, created_at, {AUDIT_COLUMNS} FROM writegate.audit
WHERE tenant_id = %(tenant_id)s
  AND (%(thread_id)s::text IS NULL OR thread_id = %(thread_id)s)
  AND (%(proposal_id)s::text IS NULL OR proposal_id = %(proposal_id)s)
ORDER BY audit_id
LIMIT %(limit)s"""

    # A page of the audit: keyset on audit_id (a bigserial, never updated), after the
    # cursor's row, oldest or newest first. `{where}` is made only of AUDIT_FILTERS' and
    # AUDIT_AFTER's fixed texts, one per filter given, so each shape plans on its index.
    AUDIT_PAGE_SQL = f"""
SELECT audit_id, created_at, {AUDIT_COLUMNS} FROM writegate.audit
WHERE tenant_id = %(tenant_id)s{{where}}
ORDER BY audit_id {{direction}}
LIMIT %(limit)s"""

    SET_TRACEPARENT_SQL = """
UPDATE writegate.proposals SET traceparent = %s WHERE proposal_id = %s"""

    SELECT_TRACEPARENT_SQL = """
SELECT p.traceparent FROM writegate.proposals p
WHERE p.proposal_id = %(proposal_id)s
   OR p.proposal_id = (SELECT t.proposal_id FROM writegate.tokens t
                       WHERE t.token_hash = %(token_hash)s)
LIMIT 1"""

    FIND_TOMBSTONE_BY_TOKEN_SQL = (
        f"SELECT {TOMBSTONE_COLUMNS} FROM writegate.tombstones WHERE token_hash = %s"
    )

    FIND_TOMBSTONE_BY_KEY_SQL = (
        f"SELECT {TOMBSTONE_COLUMNS} FROM writegate.tombstones WHERE request_key = %s"
    )
