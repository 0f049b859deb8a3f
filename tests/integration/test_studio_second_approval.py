"""Under LangGraph Server (`langgraph dev`), the second approver's approval runs the write,
and `resume_requester` resumes the requester's thread: its question resolves with the
receipt and the model says so, with no answer from the requester. Refunds are counted
at the demo provider's table, which the test owns."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.schema import Command, Config

from tests.app_db import setup_app
from tests.integration.studio_helpers import langgraph_dev
from writegate import Identity, ProposalView, resume_requester
from writegate.demo.runtime import open_demo
from writegate.demo.seed import seed_demo

pytestmark = pytest.mark.slow

ORDER = "ord_8000"
INSERT_ORDER_SQL = """
INSERT INTO orders (order_id, tenant_id, user_id, currency, payable_minor, refunded_minor,
                    shipping_address, version)
VALUES (%s, 'tenant_hz', 'user_42', 'CNY', 800000, 0, '', 1)"""
COUNT_REFUNDS_SQL = "SELECT count(*) FROM provider.refunds WHERE order_id = %s"
APPROVER = Identity("approver_1", "tenant_hz", frozenset({"approver"}))


@pytest.fixture
def studio(create_database: Callable[[], str], tmp_path: Path) -> Iterator[tuple[str, str]]:
    url = create_database()
    setup_app(url)
    with psycopg.connect(url, autocommit=True) as conn:
        seed_demo(conn)
        conn.execute(INSERT_ORDER_SQL, (ORDER,))
    with langgraph_dev(tmp_path, url) as base_url:
        yield base_url, url


def refunds(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(COUNT_REFUNDS_SQL, (ORDER,)).fetchone()
    assert row is not None
    return int(row[0])


def question(client: Any, thread_id: str) -> dict[str, Any]:
    [pending] = client.threads.get_state(thread_id)["interrupts"]
    value: dict[str, Any] = pending["value"]
    return value


def test_the_approval_runs_it_and_the_hook_tells_the_requesters_thread(
    studio: tuple[str, str],
) -> None:
    base_url, url = studio
    client = get_sync_client(url=base_url, api_key=None)
    config: Config = {"configurable": {"user_id": "user_42", "tenant_id": "tenant_hz"}}
    thread_id = client.threads.create()["thread_id"]
    ask = {"messages": [{"role": "user", "content": f"Please refund {ORDER}, it broke"}]}
    client.runs.wait(thread_id, "writegate", input=ask, config=config)
    asked = question(client, thread_id)
    assert asked["preview"]["confirmation"]["tier"] == "second_approver"
    shown = {f["name"]: f["display"] for f in asked["preview"]["fields"]}["amount_minor"]
    confirm = {"action": "confirm", "proposal_id": asked["proposal_id"], "retyped": shown}
    command: Command = {"resume": confirm}
    client.runs.wait(thread_id, "writegate", command=command, config=config)
    assert question(client, thread_id)["awaiting"]["what"] == "second_approval"
    assert refunds(url) == 0

    # The application: its approver approves; that runs the refund, once.
    runtime = open_demo(url, setup=False).runtime
    try:
        approved = runtime.executor.approve_as_second(APPROVER, asked["proposal_id"])
    finally:
        runtime.close()
    view = ProposalView.of(approved.proposal, approved.outcome_body())
    assert view.status == "executed" and refunds(url) == 1

    run = resume_requester(client, view)  # the documented hook
    client.runs.join(thread_id, run["run_id"])
    state = client.threads.get_state(thread_id)
    assert state["interrupts"] == [] and state["next"] == []
    messages = state["values"]["messages"]
    tools = [json.loads(m["content"]) for m in messages if m["type"] == "tool"]
    assert tools[-1]["execution_id"] == approved.outcome_body()["execution_id"]
    assert messages[-1]["type"] == "ai" and messages[-1]["content"]  # the model tells them
    assert refunds(url) == 1
