"""A second approver works from Agent Inbox, through `langgraph dev` with the example auth
handler (`langgraph.auth.json`) and threads checkpointed in the database.

Each person has their own token (examples/server_auth.py). The requester asks for a
refund above the second-approver threshold and confirms it; the approver's inbox (Agent
Inbox's own thread search: interrupted threads of graph `writegate`) then lists that
thread, and nobody else's. The approver answers it as Agent Inbox does (a run on the
requester's thread with `command.resume`): accept runs the write once, respond declines
it; both are audited under the approver's name, and the requester's thread holds the
receipt or the decline. Refunds are counted at the demo provider's table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient
from psycopg.rows import dict_row

from tests.app_db import setup_app
from tests.integration.studio_helpers import POSTGRES_CHECKPOINTER, langgraph_dev
from writegate.demo.seed import seed_demo

pytestmark = pytest.mark.slow

INSERT_ORDER_SQL = """
INSERT INTO orders (order_id, tenant_id, user_id, currency, payable_minor, refunded_minor,
                    shipping_address, version)
VALUES (%s, 'tenant_hz', 'user_42', 'CNY', 800000, 0, '', 1)"""
REFUNDS_SQL = "SELECT amount_minor FROM provider.refunds WHERE order_id = %s"
STATUSES_SQL = "SELECT status FROM writegate.proposals WHERE thread_id = %s ORDER BY created_at"
AUDIT_SQL = (
    "SELECT a.event, a.status, a.user_id, a.approver, a.error_code FROM writegate.audit a "
    "JOIN writegate.proposals p USING (proposal_id) WHERE p.thread_id = %s ORDER BY a.audit_id"
)
SAID_SQL = (
    "SELECT a.result->>'person_said' AS person_said FROM writegate.audit a JOIN "
    "writegate.proposals p USING (proposal_id) "
    "WHERE p.thread_id = %s AND a.event = 'second_decline'"
)
# What Agent Inbox searches: interrupted threads of the inbox's graph.
INBOX_SEARCH: Any = {"status": "interrupted", "metadata": {"graph_id": "writegate"}, "limit": 100}
ACCEPT = [{"type": "accept", "args": None}]
REASON = "Not without the customer's receipt"


@pytest.fixture
def served(create_database: Callable[[], str], tmp_path: Path) -> Iterator[tuple[str, str]]:
    url = create_database()
    setup_app(url)
    with psycopg.connect(url, autocommit=True) as conn:
        seed_demo(conn)
        for order_id in ("ord_8000", "ord_8001", "ord_8002"):
            conn.execute(INSERT_ORDER_SQL, (order_id,))
    checkpointer = {"checkpointer": POSTGRES_CHECKPOINTER}
    with langgraph_dev(tmp_path, url, checkpointer, "langgraph.auth.json") as base_url:
        yield base_url, url


def _rows(url: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return conn.execute(sql, params).fetchall()


def _question(client: SyncLangGraphClient, thread_id: str) -> dict[str, Any]:
    [pending] = client.threads.get_state(thread_id)["interrupts"]
    value: dict[str, Any] = pending["value"]
    return value


def _asked(client: SyncLangGraphClient, order_id: str, confirm: bool = True) -> str:
    """A thread of the requester's whose refund of `order_id` waits for its second
    approver (or, `confirm` false, for the requester's own confirm)."""
    thread_id: str = client.threads.create()["thread_id"]
    ask: Any = {"messages": [{"role": "user", "content": f"Please refund {order_id}, it broke"}]}
    client.runs.wait(thread_id, "writegate", input=ask)
    asked = _question(client, thread_id)
    assert asked["preview"]["confirmation"]["tier"] == "second_approver"
    if confirm:
        shown = {f["name"]: f["display"] for f in asked["preview"]["fields"]}["amount_minor"]
        answer = {"action": "confirm", "proposal_id": asked["proposal_id"], "retyped": shown}
        client.runs.wait(thread_id, "writegate", command={"resume": answer})
        assert _question(client, thread_id)["awaiting"]["what"] == "second_approval"
    return thread_id


def _listed(client: SyncLangGraphClient) -> set[str]:
    return {t["thread_id"] for t in client.threads.search(**INBOX_SEARCH)}


def _answer(
    client: SyncLangGraphClient, owner: SyncLangGraphClient, thread_id: str, resume: Any
) -> None:
    """Agent Inbox's answer (`runs.create` with `command.resume`), waited for as the
    thread's owner (the approver reads the thread only while it waits for them)."""
    run = client.runs.create(thread_id, "writegate", command={"resume": resume})
    owner.runs.join(thread_id, run["run_id"])


def test_a_second_approver_answers_from_agent_inbox(served: tuple[str, str]) -> None:
    base_url, url = served
    requester, approver, colleague, stranger = (
        get_sync_client(url=base_url, api_key=token)
        for token in ("demo-user-42", "demo-approver", "demo-user-7", "demo-approver-sh")
    )
    refunds = lambda order: [r["amount_minor"] for r in _rows(url, REFUNDS_SQL, order)]  # noqa: E731
    statuses = lambda thread: [r["status"] for r in _rows(url, STATUSES_SQL, thread)]  # noqa: E731

    approved, declined = _asked(requester, "ord_8000"), _asked(requester, "ord_8001")
    unconfirmed = _asked(requester, "ord_8002", confirm=False)

    # Whose inbox lists what: the approver, the two threads awaiting their approval (not
    # the one that waits for its requester); a colleague without the role, and an
    # approver of another tenant, none; the requester, their own three.
    assert _listed(approver) == {approved, declined}
    assert _listed(colleague) == set() and _listed(stranger) == set()
    assert _listed(requester) == {approved, declined, unconfirmed}
    assert approver.threads.get_state(approved)["interrupts"]  # the card opens
    for outsider in (colleague, stranger):
        with pytest.raises(httpx.HTTPStatusError) as hidden:
            outsider.threads.get_state(approved)
        assert hidden.value.response.status_code == 404

    # The requester cannot be their own second approver: refused, asked again, nothing ran.
    requester.runs.wait(approved, "writegate", command={"resume": ACCEPT})
    again = _question(requester, approved)
    assert again["error"]["code"] == "self_approval" and again["awaiting"]
    assert statuses(approved) == ["awaiting_second_approval"] and refunds("ord_8000") == []

    # The approver may answer, nothing else: no message, no edit, no state update, no
    # copy, not at another checkpoint, and nothing on a thread that waits for its
    # requester; each refused before it runs.
    edit = [{"type": "edit", "args": {"action": "refund_order", "args": {"amount_minor": "1"}}}]
    message: Any = {"messages": [{"role": "user", "content": "refund it twice"}]}
    head = requester.threads.get_state(approved)["checkpoint"]["checkpoint_id"]
    refused = [
        lambda: approver.runs.create(approved, "writegate", command={"resume": edit}),
        lambda: approver.runs.create(approved, "writegate", input=message),
        lambda: approver.threads.update_state(approved, None, as_node="__end__"),
        lambda: approver.threads.copy(approved),
        lambda: approver.runs.create(
            approved, "writegate", command={"resume": ACCEPT}, checkpoint_id=head
        ),
        lambda: approver.runs.create(unconfirmed, "writegate", command={"resume": ACCEPT}),
    ]
    for attempt in refused:
        with pytest.raises(httpx.HTTPStatusError) as no:
            attempt()
        assert no.value.response.status_code in (403, 404), no.value.response.text
    assert statuses(approved) == ["awaiting_second_approval"] and refunds("ord_8000") == []

    # Accept: the refund runs once, audited as the approver's approval.
    _answer(approver, requester, approved, ACCEPT)
    assert statuses(approved) == ["executed"] and refunds("ord_8000") == [800000]
    rows = [tuple(r.values()) for r in _rows(url, AUDIT_SQL, approved)]
    assert ("second_approval", "confirmed", "approver_1", "approver_1", None) in rows
    assert rows[-1] == ("execute", "succeeded", "user_42", "approver_1", None)
    # The requester's thread holds the receipt; nobody is asked any more.
    state = requester.threads.get_state(approved)
    assert state["interrupts"] == []
    last = state["values"]["messages"][-1]
    assert last["type"] == "tool" and json.loads(last["content"])["status"] == "succeeded"
    # It left the approver's inbox, and a second accept (a stale card) runs nothing.
    assert _listed(approver) == {declined}
    with pytest.raises(httpx.HTTPStatusError):
        approver.runs.create(approved, "writegate", command={"resume": ACCEPT})
    assert refunds("ord_8000") == [800000]

    # Respond: declined with no refund, audited as the approver's; the requester's
    # thread says so.
    _answer(approver, requester, declined, [{"type": "response", "args": REASON}])
    assert statuses(declined) == ["declined"] and refunds("ord_8001") == []
    rows = [tuple(r.values()) for r in _rows(url, AUDIT_SQL, declined)]
    assert rows[-1] == ("second_decline", "declined", "approver_1", "approver_1", None)
    [said] = _rows(url, SAID_SQL, declined)
    assert said["person_said"] == REASON
    last = requester.threads.get_state(declined)["values"]["messages"][-1]
    assert last["type"] == "tool" and json.loads(last["content"])["code"] == "declined"
    assert REASON in last["content"]  # the requester's model reads the approver's words
    assert _listed(approver) == set()

    # The requester's next message: the model reads the receipt; nothing runs again.
    more: Any = {"messages": [{"role": "user", "content": "thanks, is it done?"}]}
    requester.runs.wait(approved, "writegate", input=more)
    messages = requester.threads.get_state(approved)["values"]["messages"]
    assert messages[-1]["type"] == "ai" and messages[-1]["content"]
    assert refunds("ord_8000") == [800000] and statuses(approved) == ["executed"]
