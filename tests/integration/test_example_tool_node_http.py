"""The library example: a hand-built graph protecting a tool that calls an HTTP API."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command

from examples.tool_node_http import PaymentsApi, build, payment_tools, settle
from writegate import Writegate
from writegate.approval.models import Identity
from writegate.approval.reconcile import receipt_for
from writegate.graph.scripted import ScriptedChatModel

IDENTITY = Identity("u1", "t1")
CONFIG = {"configurable": {"user_id": "u1", "tenant_id": "t1"}}


@pytest.fixture
def api() -> Iterator[PaymentsApi]:
    server = PaymentsApi().start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def wg(create_database: Callable[[], str], api: PaymentsApi) -> Iterator[Writegate]:
    with Writegate.open(create_database(), tools=payment_tools(api.url, timeout=2.0)) as gate:
        yield gate


def pay_once(wg: Writegate, thread: str) -> tuple[dict[str, Any], str]:
    call = {"name": "pay", "args": {"account": "acct_1", "cents": 1250}, "id": "call_1"}
    model = ScriptedChatModel(script=[AIMessage("", tool_calls=[call]), AIMessage("ok")])
    graph = build(wg, model)
    config = {"configurable": {**CONFIG["configurable"], "thread_id": thread}}
    out = graph.invoke({"messages": [HumanMessage("pay")]}, config)
    proposal_id = out["__interrupt__"][0].value["proposal_id"]
    out = graph.invoke(Command(resume={"action": "confirm", "proposal_id": proposal_id}), config)
    message = [m for m in out["messages"] if isinstance(m, ToolMessage)][-1]
    return json.loads(str(message.content)), proposal_id


def test_a_confirmed_payment_reaches_the_api_once_with_its_request_key(
    wg: Writegate, api: PaymentsApi
) -> None:
    receipt, _ = pay_once(wg, "http_ok")
    assert receipt["status"] == "succeeded"
    assert list(api.payments) == [receipt["request_key"]]
    assert receipt["result"]["payment_id"] == "pay_0"


def test_a_lost_answer_is_settled_by_lookup_with_exactly_one_payment(
    wg: Writegate, api: PaymentsApi
) -> None:
    api.drop_next_answer = True
    told, proposal_id = pay_once(wg, "http_lost")
    assert told["code"] == "outcome_unknown"
    assert len(api.payments) == 1  # it did apply; nobody heard
    settled = settle(wg)
    assert [(s.previous_status, s.status, s.action) for s in settled] == [
        ("unknown", "succeeded", "found")
    ]
    receipt = receipt_for(wg.runtime.store, IDENTITY, proposal_id)
    assert receipt.result["payment_id"] == "pay_0"
    assert len(api.payments) == 1


def test_without_a_lookup_a_lost_answer_goes_to_a_person_and_is_never_sent_again(
    create_database: Callable[[], str], api: PaymentsApi
) -> None:
    tools = payment_tools(api.url, timeout=2.0, with_lookup=False)
    with Writegate.open(create_database(), tools=tools) as wg:
        api.drop_next_answer = True
        told, _ = pay_once(wg, "http_no_lookup")
        assert told["code"] == "outcome_unknown"
        settled = settle(wg)
    assert [(s.status, s.action) for s in settled] == [("escalated", "escalated")]
    assert len(api.payments) == 1
