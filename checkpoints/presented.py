"""Which approval questions reached a client: `approval.store.PresentedQuestions` on PostgreSQL."""

from __future__ import annotations

from writegate.checkpoints.pool import Pool

# The first record of a question wins; a re-raised interrupt records nothing new.
INSERT_PRESENTED_SQL = """
INSERT INTO wg_presented (thread_id, checkpoint_ns, interrupt_index, proposal_id)
VALUES (%s, %s, %s, %s)
ON CONFLICT (thread_id, checkpoint_ns, interrupt_index) DO NOTHING
"""
SELECT_PRESENTED_SQL = """
SELECT 1 FROM wg_presented
WHERE thread_id = %s AND checkpoint_ns = %s AND interrupt_index = %s AND proposal_id = %s
"""


class PgPresentedQuestions:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    def record(self, thread_id: str, checkpoint_ns: str, index: int, proposal_id: str) -> None:
        with self.pool.connection() as conn:
            conn.execute(INSERT_PRESENTED_SQL, (thread_id, checkpoint_ns, index, proposal_id))

    def was_presented(
        self, thread_id: str, checkpoint_ns: str, index: int, proposal_id: str
    ) -> bool:
        with self.pool.connection() as conn:
            params = (thread_id, checkpoint_ns, index, proposal_id)
            return conn.execute(SELECT_PRESENTED_SQL, params).fetchone() is not None
