"""Which approval questions reached a client: `approval.store.PresentedQuestions` on PostgreSQL."""

from __future__ import annotations

from psycopg.errors import ForeignKeyViolation

from writegate.approval.errors import NotFound
from writegate.checkpoints.namespace import for_schema
from writegate.checkpoints.outage import outage_mapped
from writegate.checkpoints.pool import Pool

# The first record of a question wins; a re-raised interrupt records nothing new. One
# statement, its own transaction: `set_config(..., true)` relaxes only that transaction's
# commit (it is read at the commit and reset right after it), so the pooled connection
# keeps its setting, and a refused insert rolls the whole statement back by itself.
INSERT_PRESENTED_SQL = """
WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true))
INSERT INTO writegate.presented (thread_id, checkpoint_ns, interrupt_index, proposal_id)
SELECT %s::text, %s::text, %s::integer, %s::text FROM relaxed
ON CONFLICT (thread_id, checkpoint_ns, interrupt_index) DO NOTHING
"""
SELECT_PRESENTED_SQL = """
SELECT 1 FROM writegate.presented
WHERE thread_id = %s AND checkpoint_ns = %s AND interrupt_index = %s AND proposal_id = %s
"""


class PgPresentedQuestions:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.insert_sql = for_schema(INSERT_PRESENTED_SQL, pool.schema)
        self.select_sql = for_schema(SELECT_PRESENTED_SQL, pool.schema)

    def record(self, thread_id: str, checkpoint_ns: str, index: int, proposal_id: str) -> None:
        """Recorded without waiting for the disk: a client can only see the question once
        the run's checkpoint holding its interrupt has committed, after this, and that
        commit's WAL flush covers this record too. Should the server crash before it, the
        question was never shown, and an answer naming no proposal is refused (safe)."""
        params = (thread_id, checkpoint_ns, index, proposal_id)
        try:
            with outage_mapped(), self.pool.connection() as conn:
                conn.execute(self.insert_sql, params)
        except ForeignKeyViolation as exc:
            # The thread's checkpoint asks about a proposal the ledger does not have: a
            # failover to a standby that missed the last commits lost the proposal's row
            # (and kept the checkpoint). Never a question about nothing: not found.
            raise NotFound(
                "this approval is no longer in the ledger (lost in a database failover)",
                proposal_id=proposal_id,
            ) from exc

    def was_presented(
        self, thread_id: str, checkpoint_ns: str, index: int, proposal_id: str
    ) -> bool:
        with self.pool.connection() as conn:
            params = (thread_id, checkpoint_ns, index, proposal_id)
            return conn.execute(self.select_sql, params).fetchone() is not None
