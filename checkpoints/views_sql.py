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

    # Top-level checkpoints only (checkpoint_ns = ''): subgraph checkpoints are not threads.
    LIST_CHECKPOINT_THREADS_SQL = """
SELECT thread_id,
       max(metadata->>'user_id') AS user_id,
       max(metadata->>'tenant_id') AS tenant_id,
       count(*) AS checkpoints,
       max(checkpoint->>'ts') AS updated_at
FROM checkpoints
WHERE checkpoint_ns = ''
  AND (%(user_id)s::text IS NULL OR metadata->>'user_id' = %(user_id)s)
  AND (%(tenant_id)s::text IS NULL OR metadata->>'tenant_id' = %(tenant_id)s)
GROUP BY thread_id
ORDER BY max(checkpoint->>'ts') DESC
LIMIT %(limit)s
"""

    # Pending (approval/models.py PENDING): a question open, or confirmed and not executed.
    PENDING_PROPOSALS_SQL = f"""
SELECT proposal_id, thread_id, subject, tenant_id, operation, status, preview,
       expires_at, expires_at <= now() AS expired, created_at
FROM writegate.proposals
WHERE status IN ({PENDING_SQL})
  AND (%(user_id)s::text IS NULL OR subject = %(user_id)s)
  AND (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
ORDER BY created_at
LIMIT %(limit)s
"""
