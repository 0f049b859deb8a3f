"""SQL for reading the ledger and the checkpoints for lists a person looks at: pending
approvals, recent ones, a thread's, the threads themselves. Read-only, never a write."""

from __future__ import annotations

from writegate.checkpoints.ledger_sql import after_created
from writegate.checkpoints.namespace import Statements
from writegate.checkpoints.statuses import PENDING_SQL

PROPOSAL_COLUMNS = """
proposal_id, thread_id, tool_call_id, subject, tenant_id, operation, resource, args,
args_digest, preview, policy_version, status, superseded_by, decided_by, decided_at,
second_approver, created_at, expires_at"""

MINE_FILTERS = {
    "pending": f"status IN ({PENDING_SQL}) AND expires_at > now()",
    "status": "status = %(status)s",
    "thread_id": "thread_id = %(thread_id)s",
    "proposal_id": "proposal_id = %(proposal_id)s",
    "operation": "operation = %(operation)s",
}
MINE_AFTER = after_created("proposal_id")


class ViewsSQL(Statements):
    """The read views' statements, written for the default schema;
    `sql_for(ViewsSQL, schema)` holds them for another."""

    NOW_SQL = "SELECT now() AS now"

    # A page of a requester's proposals: keyset on (created_at, proposal_id), neither ever
    # updated (core migration 9 indexes it); `{where}` only of MINE_FILTERS' and
    # MINE_AFTER's fixed texts. `pending`: open, and not past expiry on the database clock
    # (right-open); a confirmed one is open only while its thread still asks (after a
    # second approval), which the HTTP service checks against the thread.
    MINE_PAGE_SQL = f"""
SELECT {PROPOSAL_COLUMNS} FROM writegate.proposals
WHERE tenant_id = %(tenant_id)s AND subject = %(subject)s{{where}}
ORDER BY created_at {{direction}}, proposal_id {{direction}}
LIMIT %(limit)s"""

    # Each with its execution's id, if it ran (one at most: writegate.executions.proposal_id
    # is unique).
    LIST_THREAD_PROPOSALS_SQL = f"""
SELECT {PROPOSAL_COLUMNS},
    (SELECT e.execution_id FROM writegate.executions e
     WHERE e.proposal_id = writegate.proposals.proposal_id) AS execution_id
FROM writegate.proposals
WHERE thread_id = %s AND tenant_id = %s AND subject = %s
ORDER BY created_at, proposal_id"""

    SELECT_EXECUTIONS_FOR_SQL = """
SELECT proposal_id, execution_id, status FROM writegate.executions
WHERE proposal_id = ANY(%s)"""

    # A page of threads: those checkpointed here (top-level checkpoints only, checkpoint_ns
    # = '': subgraph checkpoints are not threads) and those known only to the ledger, by a
    # pending proposal (made over HTTP or MCP). Keyset on `(first_at, thread_id)`: a
    # thread's first checkpoint, or its first proposal if that came earlier, a time that
    # never changes once the thread exists (its last activity does, so it is a column and
    # not the key). `{where}` only of THREADS_AFTER's fixed texts.
    THREADS_PAGE_SQL = f"""
WITH checkpointed AS (
    SELECT thread_id,
           max(metadata->>'user_id') AS user_id,
           max(metadata->>'tenant_id') AS tenant_id,
           count(*) AS checkpoints,
           min((checkpoint->>'ts')::timestamptz) AS first_at,
           max((checkpoint->>'ts')::timestamptz) AS updated_at
    FROM checkpoints
    WHERE checkpoint_ns = ''
      AND (%(user_id)s::text IS NULL OR metadata->>'user_id' = %(user_id)s)
      AND (%(tenant_id)s::text IS NULL OR metadata->>'tenant_id' = %(tenant_id)s)
    GROUP BY thread_id
), ledger_only AS (
    SELECT thread_id, max(subject) AS user_id, max(tenant_id) AS tenant_id,
           0::bigint AS checkpoints, NULL::timestamptz AS first_at,
           NULL::timestamptz AS updated_at
    FROM writegate.proposals
    WHERE status IN ({PENDING_SQL})
      AND (%(user_id)s::text IS NULL OR subject = %(user_id)s)
      AND (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
      AND thread_id NOT IN (SELECT thread_id FROM checkpointed)
    GROUP BY thread_id
), threads AS (
    SELECT thread_id, user_id, tenant_id, checkpoints, updated_at,
           least(first_at, (SELECT min(p.created_at) FROM writegate.proposals p
                            WHERE p.thread_id = known.thread_id)) AS first_at
    FROM (SELECT * FROM checkpointed UNION ALL SELECT * FROM ledger_only) AS known
)
SELECT thread_id, user_id, tenant_id, checkpoints, updated_at, first_at
FROM threads
WHERE true{{where}}
ORDER BY first_at {{direction}}, thread_id {{direction}}
LIMIT %(limit)s"""

    # Pending (approval/models.py PENDING): a question open, or confirmed and not executed;
    # those of the threads on a page.
    PENDING_PROPOSALS_SQL = f"""
SELECT proposal_id, thread_id, subject, tenant_id, operation, status, preview,
       expires_at, expires_at <= now() AS expired, created_at
FROM writegate.proposals
WHERE status IN ({PENDING_SQL})
  AND thread_id = ANY(%(thread_ids)s)
  AND (%(user_id)s::text IS NULL OR subject = %(user_id)s)
  AND (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
ORDER BY created_at, proposal_id
"""

    # A page of pending proposals older than `%(older_than)s` (of a tenant, or all), keyset
    # on (created_at, proposal_id): the ones `writegate orphans` judges against their thread.
    PENDING_PAGE_SQL = f"""
SELECT proposal_id, thread_id, created_at
FROM writegate.proposals
WHERE status IN ({PENDING_SQL})
  AND created_at <= now() - %(older_than)s
  AND (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s){{where}}
ORDER BY created_at {{direction}}, proposal_id {{direction}}
LIMIT %(limit)s"""


THREADS_AFTER = after_created("thread_id", at="first_at")
PENDING_AFTER = after_created("proposal_id")
