"""Presented questions on PostgreSQL (checkpoints/presented.py): recorded in one round
trip without waiting for the disk, visible to every connection, first record wins, and
the relaxed commit stays inside its own transaction."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from tests.app_db import setup_app
from tests.integration.ledger_helpers import new_order, propose_refund
from writegate.approval.errors import NotFound
from writegate.checkpoints.presented import PgPresentedQuestions
from writegate.demo.runtime import open_demo


def test_a_recorded_question_is_seen_by_others_and_the_setting_does_not_leak(
    create_database: Callable[[], str],
) -> None:
    url = create_database()
    setup_app(url)
    with open_demo(url, setup=False, max_connections=1).runtime as rt:
        first = propose_refund(rt, new_order(rt), thread="th_presented")
        second = propose_refund(rt, new_order(rt), thread="th_presented")
        presented = PgPresentedQuestions(rt.pool)
        presented.record("th_presented", "write:1", 0, first.proposal_id)
        presented.record("th_presented", "write:1", 0, second.proposal_id)  # first one wins
        assert presented.was_presented("th_presented", "write:1", 0, first.proposal_id)
        assert not presented.was_presented("th_presented", "write:1", 0, second.proposal_id)
        assert not presented.was_presented("th_presented", "write:1", 1, first.proposal_id)
        with rt.pool.connection() as conn:  # the pool's one connection, used by record
            setting = conn.execute("SHOW synchronous_commit").fetchone()
            assert setting is not None and setting["synchronous_commit"] == "on"
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with psycopg.connect(url) as other:
        row = other.execute(
            "SELECT proposal_id FROM writegate.presented WHERE thread_id = 'th_presented'"
        ).fetchall()
        assert row == [(first.proposal_id,)]


def test_a_failed_record_leaves_the_connection_idle(create_database: Callable[[], str]) -> None:
    """A record naming no stored proposal (lost in a failover) is refused by its foreign
    key, told as `not_found`; the transaction is rolled back there, and the pool's one
    connection is clean for the next caller."""
    url = create_database()
    setup_app(url)
    with open_demo(url, setup=False, max_connections=1).runtime as rt:
        presented = PgPresentedQuestions(rt.pool)
        with pytest.raises(NotFound):
            presented.record("th_presented", "write:1", 0, "prop_missing")
        with rt.pool.connection() as conn:
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert not presented.was_presented("th_presented", "write:1", 0, "prop_missing")
