"""Hostile text from the application's own data is shown inert on every way in.

An order's shipping address (which the refund preview shows as its target) carries a
cursor-up escape, a carriage return, hidden-text SGR, an 8-bit CSI and a bidi override.
Whatever way the person reads the preview (MCP elicitation and tool results, the
interrupt value, the model's ToolMessage, the HTTP API behind the page, the terminal),
none of those characters arrives raw: each is shown as its escape. The machine values
(the arguments and their digest) are exactly what they were.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import psycopg
import pytest
from fastapi.testclient import TestClient
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command

from tests.integration.http_fixtures import make_key, seeded_database, sse_events
from tests.integration.mcp_helpers import Person, accept, cli_confirm, stdio_session
from tests.integration.test_mcp import EXECUTE, REQUEST, execute_args, ok, refund
from writegate import PreviewField, ToolPreview, Writegate, write_tool
from writegate.approval.canonical import digest
from writegate.demo.runtime import open_demo
from writegate.surfaces.web import create_app

# Up two lines, a carriage return and hidden text, then an 8-bit CSI and a bidi override.
HOSTILE = "12 Elm St\x1b[2A\r\x1b[8mhidden\x9b2K \u202egnp.exe"
RAW = ("\x1b", "\r", "\x9b", "\u202e")
SHOWN = ("\\x1b[2A", "\\r", "\\x9b2K", "\\u202e")
UPDATE_ADDRESS_SQL = "UPDATE orders SET shipping_address = %s WHERE order_id = %s"


def assert_inert(text: str, what: str) -> None:
    for char in RAW:
        assert char not in text, f"{char!r} reached {what} raw: {text!r}"
    for escape in SHOWN:
        assert escape in text, f"{escape!r} is not shown in {what}: {text!r}"


@pytest.fixture(scope="module")
def hostile_url(create_database: Callable[[], str]) -> str:
    url = seeded_database(create_database)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(UPDATE_ADDRESS_SQL, (HOSTILE, "ord_1001"))
    return url


def test_mcp_elicitation_and_results_show_the_address_inert(hostile_url: str) -> None:
    person, args = Person(accept), refund(110)

    async def scenario() -> tuple[Any, Any]:
        async with stdio_session(hostile_url, "user_42", person=person) as (session, _):
            asked = await session.call_tool(REQUEST, args)
            done = await session.call_tool(EXECUTE, execute_args(ok(asked)))
            return asked, done

    asked, done = anyio.run(scenario)
    assert len(person.shown) == 1
    assert_inert(person.shown[0], "the MCP elicitation message")
    assert_inert(asked.content[0].text, "the MCP request tool's result text")
    assert ok(done)["status"] == "succeeded"
    for char in RAW:
        assert char not in done.content[0].text


def _over_http(url: str) -> tuple[str, dict[str, Any]]:
    """Propose a refund of ord_1001 through the HTTP service; its id and its view."""
    runtime = open_demo(url, setup=False).runtime
    try:
        who = {"Authorization": "Bearer " + make_key(url, "user_42")}
        with TestClient(create_app(runtime)) as client:
            thread = client.post("/v1/threads", headers=who).json()["thread_id"]
            reply = client.post(
                f"/v1/threads/{thread}/messages",
                headers=who,
                json={"content": "refund 1.00 CNY of ord_1001 because it arrived broken"},
            )
            approvals = [data for kind, data in sse_events(reply.text) if kind == "approval"]
            assert approvals, reply.text
            pid = str(approvals[0]["proposal_id"])
            view = client.get(f"/v1/approvals/{pid}", headers=who)
    finally:
        runtime.close()
    assert view.status_code == 200, view.text
    return pid, view.json()


def test_terminal_confirm_shows_the_address_inert(hostile_url: str) -> None:
    pid, _ = _over_http(hostile_url)
    shown = cli_confirm(hostile_url, pid, "user_42", "n")
    assert_inert(shown.stdout, "writegate confirm")


def test_http_api_behind_the_page_shows_the_address_inert(hostile_url: str) -> None:
    _, view = _over_http(hostile_url)
    # The page renders these values: the JSON decoded is what it puts on screen.
    assert_inert(view["target"], "the approval view's target")
    for field in view["fields"]:
        assert not any(char in json.dumps(field, ensure_ascii=False) for char in RAW)


# A user's own tool whose preview shows a record's title from their database.
TITLES = {"doc_1": "Quarterly\x1b[2A\r\x1b[8mhidden\x9b2K \u202egnp.exe"}
RAN: list[dict[str, Any]] = []


def _rename_preview(args: dict[str, Any]) -> ToolPreview:
    old = TITLES[args["doc_id"]]
    return ToolPreview(
        fields=[PreviewField("title", args["title"], label=old)],
        impact=f"{old} is renamed",
        title=f"Rename {old}",
        target=old,
    )


@write_tool(
    side_effect="reversible",
    resource=lambda args: f"doc:{args['doc_id']}",
    preview=_rename_preview,
)
def rename_doc(doc_id: str, title: str, *, request_key: str) -> dict[str, Any]:
    """Rename a document."""
    RAN.append({"doc_id": doc_id, "title": title})
    return {"doc_id": doc_id, "title": title}


def test_interrupt_value_and_tool_message_show_it_inert(database_url: str) -> None:
    args = {"doc_id": "doc_1", "title": "Q3 \u05e9\u05dc\u05d5\u05dd report"}
    call = {"name": "rename_doc", "args": args, "id": "call_1", "type": "tool_call"}
    config = {"configurable": {"thread_id": "t-inert", "user_id": "u1", "tenant_id": "acme"}}
    with Writegate.open(database_url, tools=[rename_doc]) as wg:
        builder = StateGraph(MessagesState)
        builder.add_node("tools", wg.tool_node())
        builder.add_edge(START, "tools")
        builder.add_edge("tools", END)
        graph = builder.compile(checkpointer=wg.checkpointer)
        first = graph.invoke({"messages": [AIMessage("", tool_calls=[call])]}, config)
        (question,) = first["__interrupt__"]
        value = question.value
        assert value["args"] == args  # machine values exactly as the model sent them
        assert value["args_digest"] == digest(args)
        preview = value["preview"]
        for text in (preview["title"], preview["target"], preview["impact"]):
            assert_inert(text, "the interrupt's preview")
        assert_inert(preview["fields"][0]["label"], "a field's label")
        assert preview["fields"][0]["value"] == args["title"]  # the machine value as sent
        assert_inert(value["action_requests"][0]["description"], "the card's description")
        resume = {"action": "confirm", "proposal_id": value["proposal_id"]}
        done = graph.invoke(Command(resume=resume), config)
    assert [args] == RAN
    (message,) = [m for m in done["messages"] if isinstance(m, ToolMessage)]
    assert json.loads(str(message.content))["status"] == "succeeded"
