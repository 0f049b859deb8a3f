"""`langgraph dev` serves the graph from langgraph.json, offline, and the SDK drives it.

The server runs as its own process group on a free loopback port, in a scratch folder
(`studio_helpers.langgraph_dev`). Once with the server's in-memory checkpointer, once
with writegate's Postgres one opted in through the `checkpointer` key. Each run: request
a refund, read the approval interrupt, confirm it through `command={"resume": ...}`, read
the receipt, and count exactly one refund at the provider, even after the confirm is
replayed.
"""

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
from tests.integration.studio_helpers import POSTGRES_CHECKPOINTER, langgraph_dev
from writegate.demo.seed import seed_demo

IDENTITY = {"user_id": "user_42", "tenant_id": "tenant_hz"}
REQUEST = "Please refund ord_1001 because the item arrived broken"
COUNT_REFUNDS_SQL = "SELECT count(*) FROM provider.refunds WHERE order_id = %s"
COUNT_THREAD_CHECKPOINTS_SQL = "SELECT count(*) FROM checkpoints WHERE thread_id = %s"

pytestmark = pytest.mark.slow


@pytest.fixture(params=["in-memory", "postgres"])
def studio(
    request: pytest.FixtureRequest, create_database: Callable[[], str], tmp_path: Path
) -> Iterator[tuple[str, str, str]]:
    """(server URL, test database URL, checkpointer kind) of a running `langgraph dev`."""
    url = create_database()
    setup_app(url)
    with psycopg.connect(url, autocommit=True) as conn:
        seed_demo(conn)
    extra = {"checkpointer": POSTGRES_CHECKPOINTER} if request.param == "postgres" else None
    with langgraph_dev(tmp_path, url, extra) as base_url:
        yield base_url, url, request.param


def _refunds(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(COUNT_REFUNDS_SQL, ("ord_1001",)).fetchone()
    assert row is not None
    return int(row[0])


def _receipts(state: Any) -> list[dict[str, Any]]:
    messages = state["values"]["messages"]
    tools = [m for m in messages if m["type"] == "tool" and m["name"] == "refund_order"]
    return [json.loads(m["content"]) for m in tools]


def test_studio_server_runs_a_confirmed_refund_exactly_once(
    studio: tuple[str, str, str],
) -> None:
    base_url, url, checkpointer = studio
    client = get_sync_client(url=base_url, api_key=None)
    config: Config = {"configurable": dict(IDENTITY)}  # identity from the host, per run
    thread_id = client.threads.create()["thread_id"]

    run_input: dict[str, Any] = {"messages": [{"role": "user", "content": REQUEST}]}
    client.runs.wait(thread_id, "writegate", input=run_input, config=config)
    state: Any = client.threads.get_state(thread_id)
    [pending] = state["interrupts"]
    request = pending["value"]
    preview = {f["name"]: f["display"] for f in request["preview"]["fields"]}
    assert request["type"] == "writegate.approval" and request["operation"] == "refund_order"
    assert preview["amount_minor"] == "¥199.00" and request["args"]["amount_minor"] == 19900
    [action] = request["action_requests"]
    assert action["name"] == "refund_order" and action["args"] == request["args"]
    assert _refunds(url) == 0  # proposed, not done

    confirm: Command = {"resume": {"action": "confirm", "proposal_id": request["proposal_id"]}}
    client.runs.wait(thread_id, "writegate", command=confirm, config=config)
    state = client.threads.get_state(thread_id)
    [receipt] = _receipts(state)
    assert receipt["status"] == "succeeded"
    assert receipt["args_digest"] == request["args_digest"]
    assert state["interrupts"] == [] and state["next"] == []
    assert _refunds(url) == 1

    # A replayed confirm on the finished thread: still one refund, still one receipt.
    client.runs.wait(thread_id, "writegate", command=confirm, config=config)
    assert len(_receipts(client.threads.get_state(thread_id))) == 1
    assert _refunds(url) == 1

    if checkpointer == "postgres":  # the thread's checkpoints live beside the ledgers
        with psycopg.connect(url) as conn:
            row = conn.execute(COUNT_THREAD_CHECKPOINTS_SQL, (thread_id,)).fetchone()
        assert row is not None and row[0] > 0


AMOUNTS_SQL = "SELECT amount_minor FROM provider.refunds WHERE order_id = %s ORDER BY created_at"
THREAD_STATUSES_SQL = (
    "SELECT status FROM writegate.proposals WHERE thread_id = %s ORDER BY created_at"
)


def _query(url: str, sql: str, *params: Any) -> list[Any]:
    with psycopg.connect(url) as conn:
        return [row[0] for row in conn.execute(sql, params).fetchall()]


def _asked(client: Any, thread_id: str) -> dict[str, Any]:
    state = client.threads.get_state(thread_id)
    [pending] = state["interrupts"]
    value: dict[str, Any] = pending["value"]
    return value


def _answer(client: Any, thread_id: str, resume: Any, config: Config) -> dict[str, Any]:
    """Answer as Agent Chat UI does, then read the question that stands, if any."""
    command: Command = {"resume": resume}
    client.runs.wait(thread_id, "writegate", command=command, config=config)
    state = client.threads.get_state(thread_id)
    return state["interrupts"][0]["value"] if state["interrupts"] else {}


def _shows_refusal(asked: dict[str, Any], code: str) -> None:
    """The UI shows only the description: the refusal opens it, lines stay apart."""
    description = asked["action_requests"][0]["description"]
    assert asked["error"]["code"] == code
    assert description.startswith(f"Refused ({code})")
    assert "\n\n" in description and "¥" in description


@pytest.mark.parametrize("studio", ["in-memory"], indirect=True)
def test_agent_chat_ui_payloads_through_the_studio_server(studio: tuple[str, str, str]) -> None:
    base_url, url, _ = studio
    client = get_sync_client(url=base_url, api_key=None)
    config: Config = {"configurable": dict(IDENTITY)}
    run_input: dict[str, Any] = {"messages": [{"role": "user", "content": REQUEST}]}

    # "Mark as Resolved": the question is cancelled, audited, and the run ends.
    resolved = client.threads.create()["thread_id"]
    client.runs.wait(resolved, "writegate", input=run_input, config=config)
    assert _asked(client, resolved)["operation"] == "refund_order"
    end: Command = {"goto": "__end__"}
    client.runs.wait(resolved, "writegate", input={}, command=end, config=config)
    state: Any = client.threads.get_state(resolved)
    assert state["interrupts"] == [] and state["next"] == []
    last = state["values"]["messages"][-1]
    assert last["type"] == "tool" and json.loads(last["content"])["code"] == "cancelled"
    assert _query(url, THREAD_STATUSES_SQL, resolved) == ["cancelled"]
    assert _refunds(url) == 0

    # Decision types: only LangChain's approve, edit and reject are taken.
    thread_id = client.threads.create()["thread_id"]
    client.runs.wait(thread_id, "writegate", input=run_input, config=config)
    first = _asked(client, thread_id)
    refused = _answer(
        client, thread_id, {"decisions": [{"type": "respond", "message": "hi"}]}, config
    )
    _shows_refusal(refused, "invalid_decision")
    assert "approve, edit, reject" in refused["error"]["message"]

    # The edit form sends strings: canonical text is read, anything else refused.
    form = {"order_id": "ord_1001", "currency": "CNY", "reason": "arrived broken"}
    for bad in ("01000", "1000.0", " 1000"):
        edit = {
            "type": "edit",
            "edited_action": {"name": "refund_order", "args": {**form, "amount_minor": bad}},
        }
        refused = _answer(client, thread_id, {"decisions": [edit]}, config)
        _shows_refusal(refused, "validation_failed")
        assert refused["proposal_id"] == first["proposal_id"]
    edit = {
        "type": "edit",
        "edited_action": {"name": "refund_order", "args": {**form, "amount_minor": "1000"}},
    }
    fresh = _answer(client, thread_id, {"decisions": [edit]}, config)
    assert fresh["proposal_id"] != first["proposal_id"] and "error" not in fresh
    assert fresh["args"]["amount_minor"] == 1000
    assert not fresh["action_requests"][0]["description"].startswith("Refused")

    assert _answer(client, thread_id, {"decisions": [{"type": "approve"}]}, config) == {}
    [receipt] = _receipts(client.threads.get_state(thread_id))
    assert receipt["status"] == "succeeded" and receipt["args_digest"] == fresh["args_digest"]
    assert _query(url, AMOUNTS_SQL, "ord_1001") == [1000]
