"""The bench's statement classifier: which table family a statement touches, whether it
writes, and whether its commit waits for the disk (bench/counting.py)."""

from __future__ import annotations

from writegate.bench.counting import Tally, classify
from writegate.checkpoints.ledger_sql import LedgerSQL
from writegate.checkpoints.presented import INSERT_PRESENTED_SQL
from writegate.checkpoints.timelines import NOTE_TIMELINE_SQL

CLAIM_SQL, LOCK_PROPOSAL_SQL, PROPOSE_SQL = (
    LedgerSQL.CLAIM_SQL,
    LedgerSQL.LOCK_PROPOSAL_SQL,
    LedgerSQL.PROPOSE_SQL,
)


def test_a_data_modifying_cte_is_a_write_and_a_ledger_table_is_the_ledgers() -> None:
    assert classify(PROPOSE_SQL)[:2] == ("ledger", True)  # a ledger function's write
    assert classify(CLAIM_SQL)[:2] == ("ledger", True)
    assert classify(INSERT_PRESENTED_SQL)[:2] == ("ledger", True)  # names checkpoint_ns
    assert classify("WITH x AS (SELECT 1) SELECT * FROM writegate.proposals")[:2] == (
        "ledger",
        False,
    )
    assert classify("SELECT * FROM writegate.proposals FOR UPDATE")[:2] == ("ledger", True)
    assert classify(LOCK_PROPOSAL_SQL)[:2] == ("ledger", True)  # its lock is taken inside
    # A new connection's note of its timeline is the connection's cost, not a write's.
    assert classify(NOTE_TIMELINE_SQL)[:2] == ("timeline", True)
    assert classify("INSERT INTO checkpoints (thread_id) VALUES (%s)")[:2] == (
        "checkpointer",
        True,
    )


def test_a_commit_that_does_not_wait_for_the_disk_is_not_counted_durable() -> None:
    assert classify(INSERT_PRESENTED_SQL)[2] is True
    assert classify("SET LOCAL synchronous_commit TO off")[2] is True
    assert classify(PROPOSE_SQL)[2] is False
    tally = Tally()
    tally.transaction(["ledger"], writes=True, relaxed=True)
    tally.transaction(["ledger"], writes=True)
    assert tally.snapshot()["transactions"] == {"ledger:async_write": 1, "ledger:write": 1}
