"""Threads and what waits on each, for listing: LangGraph's checkpoints plus the ledger.

Threads come from LangGraph's `checkpoints` table (the run config's user and tenant
are in each checkpoint's metadata); pending approvals come from writegate's ledger, so a
proposal made outside a chat (HTTP, MCP) is listed too, under its own thread.
"""

from __future__ import annotations

from typing import Any

from writegate.checkpoints.pool import Pool
from writegate.checkpoints.statuses import PENDING_SQL

# Top-level checkpoints only (checkpoint_ns = ''): subgraph checkpoints are not threads.
LIST_THREADS_SQL = """
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
FROM wg_proposals
WHERE status IN ({PENDING_SQL})
  AND (%(user_id)s::text IS NULL OR subject = %(user_id)s)
  AND (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
ORDER BY created_at
LIMIT %(limit)s
"""


def threads_with_pending(
    pool: Pool, *, user_id: str | None, tenant_id: str | None, limit: int
) -> tuple[list[Any], list[Any]]:
    """Recent threads and the pending proposals, both filtered by user and tenant."""
    params = {"user_id": user_id, "tenant_id": tenant_id, "limit": limit}
    with pool.connection() as conn:
        listed = conn.execute(LIST_THREADS_SQL, params).fetchall()
        pending = conn.execute(PENDING_PROPOSALS_SQL, params).fetchall()
    return listed, pending
