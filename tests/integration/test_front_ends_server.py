"""Agent Chat UI's and Agent Inbox's exact payloads through `langgraph dev` and the SDK.

Agent Chat UI's stream hook sends every run with the thread head's `checkpoint`,
`stream_mode=["values"]`, subgraphs and resumable streams on: "Mark as Resolved"
(`command={"goto": "__end__"}`) and a new message after its own tool messages
(tests/integration/front_end_payloads.py). Agent Inbox resumes with a `HumanResponse`
list, and its "Ignore" is `threads.update_state(values=None, as_node="__end__")`, which
the operator's orphan check finds where the thread is checkpointed in writegate's
database. Effects are counted at the simulated provider.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph_sdk import get_sync_client
from psycopg.rows import dict_row

from tests.app_db import setup_app
from tests.integration.front_end_payloads import CLIENT_CONTENT, DO_NOT_RENDER, chat_input
from tests.integration.studio_helpers import POSTGRES_CHECKPOINTER, langgraph_dev
from writegate import Writegate
from writegate.demo.seed import seed_demo

pytestmark = pytest.mark.slow

IDENTITY = {"user_id": "user_42", "tenant_id": "tenant_hz"}
CONFIG: Any = {"configurable": dict(IDENTITY)}
REQUEST = {"messages": [{"role": "user", "content": "Please refund ord_1001, it arrived broken"}]}
REASON = "Wrong order: the customer meant another one"
STATUSES_SQL = "SELECT status FROM writegate.proposals WHERE thread_id = %s ORDER BY created_at"
REFUNDS_SQL = "SELECT amount_minor FROM provider.refunds WHERE order_id = %s ORDER BY created_at"
AUDIT_SQL = (
    "SELECT status, user_id, result FROM writegate.audit WHERE proposal_id = %s "
    "ORDER BY audit_id DESC LIMIT 1"
)


@pytest.fixture(params=["in-memory", "postgres"])
def served(
    request: pytest.FixtureRequest, create_database: Callable[[], str], tmp_path: Path
) -> Iterator[tuple[str, str, str]]:
    url = create_database()
    setup_app(url)
    with psycopg.connect(url, autocommit=True) as conn:
        seed_demo(conn)
    extra = {"checkpointer": POSTGRES_CHECKPOINTER} if request.param == "postgres" else None
    with langgraph_dev(tmp_path, url, extra) as base_url:
        yield base_url, url, request.param


def _rows(url: str, sql: str, *params: Any) -> list[Any]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return conn.execute(sql, params).fetchall()


def _ui_run(client: Any, thread_id: str, **payload: Any) -> None:
    """A run as Agent Chat UI's stream hook sends it: with the head's checkpoint."""
    head = dict(client.threads.get_state(thread_id)["checkpoint"])
    head.pop("thread_id", None)
    stream = client.runs.stream(
        thread_id, "writegate", config=CONFIG, checkpoint=head, stream_mode=["values"],
        stream_subgraphs=True, stream_resumable=True, **payload,
    )  # fmt: skip
    for _ in stream:
        pass


def _asked(client: Any, thread_id: str) -> dict[str, Any]:
    [pending] = client.threads.get_state(thread_id)["interrupts"]
    value: dict[str, Any] = pending["value"]
    return value


def _asking(client: Any) -> tuple[str, dict[str, Any]]:
    thread_id = client.threads.create()["thread_id"]
    client.runs.wait(thread_id, "writegate", input=REQUEST, config=CONFIG)
    return thread_id, _asked(client, thread_id)


def _inbox(client: Any, thread_id: str, response: list[dict[str, Any]]) -> None:
    """Agent Inbox's answer: `runs.create` with `command.resume`, then wait for it."""
    run = client.runs.create(thread_id, "writegate", command={"resume": response}, config=CONFIG)
    client.runs.join(thread_id, run["run_id"])


def test_front_end_payloads_through_the_server(served: tuple[str, str, str]) -> None:
    base_url, url, checkpointer = served
    client = get_sync_client(url=base_url, api_key=None)
    statuses = lambda thread: [r["status"] for r in _rows(url, STATUSES_SQL, thread)]  # noqa: E731

    # Agent Chat UI, "Mark as Resolved" with the run's checkpoint: cancelled, audited.
    resolved, _ = _asking(client)
    _ui_run(client, resolved, input={}, command={"goto": "__end__"})
    assert client.threads.get_state(resolved)["interrupts"] == []
    assert statuses(resolved) == ["cancelled"]

    # Agent Chat UI, a new message after its own tool messages: the old proposal is
    # cancelled and the thread keeps writegate's words under the client's message id.
    chatted, _ = _asking(client)
    before = client.threads.get_state(chatted)["values"]["messages"]
    sent = chat_input(before, "what are my orders?")
    _ui_run(client, chatted, input=sent)
    assert statuses(chatted)[0] == "cancelled"
    after = client.threads.get_state(chatted)["values"]["messages"]
    tools = [m for m in after if m["type"] == "tool"]
    theirs = [m for m in tools if m["id"].startswith(DO_NOT_RENDER)]
    assert [m["id"] for m in theirs] == [sent["messages"][0]["id"]]
    assert json.loads(theirs[0]["content"])["code"] == "cancelled"
    assert CLIENT_CONTENT not in json.dumps(after)

    # Agent Inbox: respond declines with the person's text, in the audit too.
    declined, question = _asking(client)
    _inbox(client, declined, [{"type": "response", "args": REASON}])
    [row] = _rows(url, AUDIT_SQL, question["proposal_id"])
    assert row["status"] == "declined" and row["result"]["person_said"] == REASON
    # Edit (the card's fields under `arguments`, its form's strings), then accept.
    edited, question = _asking(client)
    form = {k: str(v) for k, v in question["action_requests"][0]["arguments"].items()}
    change = {"action": "refund_order", "args": {**form, "amount_minor": "1000"}}
    _inbox(client, edited, [{"type": "edit", "args": change}])
    again = _asked(client, edited)
    assert again["args"]["amount_minor"] == 1000 and "error" not in again
    _inbox(client, edited, [{"type": "accept", "args": None}])
    assert statuses(edited) == ["superseded", "executed"]
    # Ignore as an answer cancels.
    ignored, _ = _asking(client)
    _inbox(client, ignored, [{"type": "ignore", "args": None}])
    assert statuses(ignored) == ["cancelled"]
    assert [r["amount_minor"] for r in _rows(url, REFUNDS_SQL, "ord_1001")] == [1000]

    # Agent Inbox's "Ignore" button: a state update as `__end__`; writegate runs not.
    left, question = _asking(client)
    client.threads.update_state(left, None, as_node="__end__")
    assert statuses(left) == ["awaiting_confirmation"]
    with Writegate.open(url, tools=[]) as wg:
        ended = [p.proposal_id for p in wg.end_orphaned("operator:test", timedelta(0))]
    if checkpointer == "postgres":  # its checkpoints are here: the operator finds it
        assert question["proposal_id"] in ended and statuses(left) == ["cancelled"]
        [row] = _rows(url, AUDIT_SQL, question["proposal_id"])
        assert (row["status"], row["user_id"]) == ("cancelled", "operator:test")
    else:  # the server's memory holds the thread: nothing here to judge it by
        assert ended == [] and statuses(left) == ["awaiting_confirmation"]
    assert [r["amount_minor"] for r in _rows(url, REFUNDS_SQL, "ord_1001")] == [1000]
