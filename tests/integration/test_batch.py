"""Batch approval: `close_tickets` on PostgreSQL.

One confirmation covers exactly the frozen set of tickets: a set that grew or shrank
before execution is refused whole; each ticket runs under its own derived key with its
own receipt; a failed ticket neither stops nor repeats the others; a replay is refused.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.integration.tier_helpers import TENANT, open_runtime, token_of, tokens_of
from writegate.approval import errors
from writegate.approval.canonical import digest
from writegate.approval.models import Identity
from writegate.runtime.wiring import Runtime

INSERT_TICKET_SQL = """
INSERT INTO tickets (ticket_id, tenant_id, user_id, title, description, status)
VALUES (%s, %s, %s, %s, 'batch test', %s)"""
SET_STATUS_SQL = "UPDATE tickets SET status = %s, version = version + 1 WHERE ticket_id = %s"
RETITLE_SQL = "UPDATE tickets SET title = 'changed', version = version + 1 WHERE ticket_id = %s"
TICKETS_SQL = "SELECT ticket_id, status, version FROM tickets WHERE ticket_id = ANY(%s)"
ITEMS_SQL = """
SELECT request_key, item, status FROM batch_items WHERE batch_request_key = %s ORDER BY item"""


@pytest.fixture(scope="module")
def rt(create_database: Callable[[], str]) -> Iterator[Runtime]:
    with open_runtime(create_database) as runtime:
        yield runtime


@pytest.fixture
def owner() -> Identity:
    """A user of this test alone, so the filter sees only this test's tickets."""
    return Identity("user_b" + secrets.token_hex(4), TENANT)


def add_tickets(rt: Runtime, owner: Identity, *statuses: str) -> list[str]:
    ids = []
    with rt.pool.connection() as conn:
        for status in statuses:
            ticket_id = "tkt_b" + secrets.token_hex(4)
            conn.execute(INSERT_TICKET_SQL, (ticket_id, TENANT, owner.user_id, ticket_id, status))
            ids.append(ticket_id)
    return ids


def sql(rt: Runtime, query: str, *params: Any) -> list[dict[str, Any]]:
    with rt.pool.connection() as conn:
        cursor = conn.execute(query, params)
        return list(cursor.fetchall()) if cursor.description else []


def statuses(rt: Runtime, ids: list[str]) -> dict[str, str]:
    return {row["ticket_id"]: row["status"] for row in sql(rt, TICKETS_SQL, ids)}


def propose_close(rt: Runtime, owner: Identity, ticket_ids: list[str] | None = None) -> Any:
    return rt.service.propose(
        owner,
        thread_id="th_" + secrets.token_hex(4),
        tool_call_id="call_" + secrets.token_hex(4),
        tool_name="close_tickets",
        raw_args={"ticket_ids": ticket_ids},
    )


def test_the_proposal_freezes_the_sorted_set_its_count_filter_and_digest(rt, owner):
    resolved = add_tickets(rt, owner, "resolved", "resolved", "resolved")
    add_tickets(rt, owner, "open")
    add_tickets(rt, Identity("user_b_other", TENANT), "resolved")
    proposal = propose_close(rt, owner)
    args = proposal.args
    assert args["ticket_ids"] == sorted(resolved) and args["count"] == 3
    assert args["filter"] == {"status": "resolved", "ticket_ids": None}
    assert args["set_digest"] == digest(sorted(resolved))
    assert proposal.args_digest == digest(args)  # the confirmed digest covers the set
    shown = {f["name"]: f for f in proposal.preview["fields"]}
    assert all(ticket_id in shown["ticket_ids"]["display"] for ticket_id in resolved)
    assert shown["count"]["display"] == "3 tickets"
    assert proposal.preview["irreversible"] is True
    assert proposal.preview["confirmation"]["tier"] == "one_click"


@pytest.mark.parametrize(
    ("count", "tier"), [(3, "one_click"), (50, "retype"), (200, "second_approver")]
)
def test_the_size_of_a_batch_moves_its_tier(rt, owner, count, tier):
    add_tickets(rt, owner, *["resolved"] * count)
    block = propose_close(rt, owner).preview["confirmation"]
    assert block["tier"] == tier
    if count >= 50:
        assert any(reason.startswith(f"{count} items at once") for reason in block["reasons"])


@pytest.mark.parametrize("change", ["grows", "shrinks"])
def test_a_set_that_changed_before_execution_is_refused_whole(rt, owner, change):
    ids = add_tickets(rt, owner, "resolved", "resolved", "open")
    proposal = propose_close(rt, owner)
    token = token_of(rt, proposal, who=owner)
    if change == "grows":
        sql(rt, SET_STATUS_SQL, "resolved", ids[2])
    else:
        sql(rt, SET_STATUS_SQL, "open", ids[0])
    with pytest.raises(errors.ScopeChanged) as caught:
        rt.executor.execute(owner, token)
    moved = caught.value.details["added" if change == "grows" else "removed"]
    assert moved == [ids[2] if change == "grows" else ids[0]]
    assert "closed" not in statuses(rt, ids).values()
    assert tokens_of(rt, proposal.proposal_id) == 1  # refused, nothing consumed
    assert sql(rt, ITEMS_SQL, proposal.request_key) == []


def test_named_tickets_never_grow_into_others(rt, owner):
    first, second, later = add_tickets(rt, owner, "resolved", "resolved", "open")
    proposal = propose_close(rt, owner, [second, first, first])
    assert proposal.args["ticket_ids"] == sorted([first, second])
    token = token_of(rt, proposal, who=owner)
    sql(rt, SET_STATUS_SQL, "resolved", later)  # resolved, but not named
    receipt = rt.executor.execute(owner, token)
    assert receipt.result["status"] == "closed" and receipt.result["count"] == 2
    assert statuses(rt, [first, second, later]) == {
        first: "closed",
        second: "closed",
        later: "resolved",
    }


def test_naming_a_ticket_that_cannot_close_proposes_nothing(rt, owner):
    resolved, still_open = add_tickets(rt, owner, "resolved", "open")
    with pytest.raises(errors.InvalidTransition):
        propose_close(rt, owner, [resolved, still_open])
    with pytest.raises(errors.NotFound):
        propose_close(rt, owner, [resolved, "tkt_not_yours"])


def test_a_failed_item_keeps_its_own_receipt_and_the_others_close(rt, owner):
    ids = add_tickets(rt, owner, "resolved", "resolved", "resolved")
    proposal = propose_close(rt, owner)
    token = token_of(rt, proposal, who=owner)
    changed = sorted(ids)[1]
    sql(rt, RETITLE_SQL, changed)  # still resolved, but not the version that was shown
    receipt = rt.executor.execute(owner, token)
    result = receipt.result
    assert (result["status"], result["succeeded"], result["failed"]) == ("partial", 2, 1)
    by_item = {item["ticket_id"]: item for item in result["items"]}
    assert by_item[changed]["status"] == "failed"
    assert by_item[changed]["error"]["code"] == "state_changed"
    for ticket_id in ids:
        assert by_item[ticket_id]["request_key"] == f"{proposal.request_key}#{ticket_id}"
    assert statuses(rt, ids) == {i: "resolved" if i == changed else "closed" for i in ids}
    rows = sql(rt, ITEMS_SQL, proposal.request_key)
    assert [(r["item"], r["status"]) for r in rows] == [
        (i, "failed" if i == changed else "succeeded") for i in sorted(ids)
    ]


def test_a_replayed_batch_is_already_consumed_and_changes_nothing(rt, owner):
    ids = add_tickets(rt, owner, "resolved", "resolved")
    proposal = propose_close(rt, owner)
    token = token_of(rt, proposal, who=owner)
    first = rt.executor.execute(owner, token)
    before = sql(rt, TICKETS_SQL, ids)
    with pytest.raises(errors.AlreadyConsumed) as caught:
        rt.executor.execute(owner, token)
    assert caught.value.details["receipt"]["execution_id"] == first.execution_id
    assert sql(rt, TICKETS_SQL, ids) == before
    assert len(sql(rt, ITEMS_SQL, proposal.request_key)) == 2


def test_a_batch_where_every_item_fails_consumes_nothing(rt, owner):
    ids = add_tickets(rt, owner, "resolved", "resolved")
    proposal = propose_close(rt, owner)
    token = token_of(rt, proposal, who=owner)
    for ticket_id in ids:
        sql(rt, RETITLE_SQL, ticket_id)
    with pytest.raises(errors.StateChanged):
        rt.executor.execute(owner, token)
    assert statuses(rt, ids) == dict.fromkeys(ids, "resolved")
    assert sql(rt, ITEMS_SQL, proposal.request_key) == []
