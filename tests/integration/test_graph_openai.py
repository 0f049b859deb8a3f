"""The graph with the real ChatOpenAI client against a fake OpenAI-compatible server.

The environment selects the model exactly as in production (OPENAI_API_KEY,
OPENAI_BASE_URL, WRITEGATE_MODEL); langchain-openai streams under LangGraph's
`stream_mode="messages"`, the fake proposes a refund, the person confirms, and the
model's next request carries the receipt as a JSON tool message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessageChunk, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from tests.fakes import openai_server
from tests.integration.graph_helpers import (
    config,
    confirm,
    new_id,
    new_order,
    open_graph_runtime,
    refunds_at_provider,
    statuses,
)
from writegate.demo.model import demo_chat_model
from writegate.demo.prompt import DEMO_PROMPT
from writegate.graph.build import build_graph
from writegate.runtime.wiring import Runtime

FINAL_TEXT = "The refund of ¥199.00 went through; the receipt is on file."


@pytest.fixture(scope="module")
def rt(create_database: Callable[[], str]) -> Iterator[Runtime]:
    with open_graph_runtime(create_database) as runtime:
        yield runtime


@pytest.fixture
def fake_openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[openai_server.FakeOpenAIServer]:
    with openai_server.FakeOpenAIServer() as fake:
        for name, value in fake.env(model="gpt-test-mini").items():
            monkeypatch.setenv(name, value)
        yield fake


def _stream_text(graph: Any, value: Any, cfg: RunnableConfig) -> str:
    """Run the graph in LangGraph's messages mode; return the text the model streamed."""
    pieces = []
    for chunk, _meta in graph.stream(value, cfg, stream_mode="messages"):
        if isinstance(chunk, AIMessageChunk) and isinstance(chunk.content, str):
            pieces.append(chunk.content)
    return "".join(pieces)


def test_chat_openai_proposes_streams_and_reads_the_receipt(
    rt: Runtime, fake_openai: openai_server.FakeOpenAIServer
) -> None:
    thread, order = new_id("t"), new_order(rt)
    args = {"order_id": order, "amount_minor": 19900, "currency": "CNY", "reason": "broken"}
    fake_openai.enqueue_tool_calls(openai_server.FakeToolCall("refund_order", args, id="call_oa1"))
    # the model chosen from the environment
    model = demo_chat_model(rt.registry.openai_tools())
    graph = build_graph(rt, model=model, checkpointer=rt.checkpointer, system_prompt=DEMO_PROMPT)
    cfg = config(thread)

    _stream_text(graph, {"messages": [HumanMessage(f"refund {order}, it broke")]}, cfg)
    (asked,) = graph.get_state(cfg).interrupts
    assert asked.value["tool_call_id"] == "call_oa1" and asked.value["args"] == args
    assert refunds_at_provider(rt, order) == 0

    fake_openai.enqueue_text(FINAL_TEXT)
    streamed = _stream_text(graph, Command(resume=confirm(asked.value["proposal_id"])), cfg)
    assert streamed == FINAL_TEXT
    assert graph.get_state(cfg).values["messages"][-1].content == FINAL_TEXT
    assert refunds_at_provider(rt, order) == 1
    assert statuses(rt, thread) == ["executed"]
    assert fake_openai.pending == 0

    first, last = fake_openai.chat_requests[0], fake_openai.chat_requests[-1]
    assert len(fake_openai.chat_requests) == 2
    assert first["stream"] is True and first["model"] == "gpt-test-mini"
    names = {tool["function"]["name"] for tool in first["tools"]}
    assert {"refund_order", "get_order", "create_ticket", "update_ticket"} <= names
    for tool in first["tools"]:
        assert tool["function"]["strict"] is True
        parameters = tool["function"]["parameters"]
        assert parameters["additionalProperties"] is False
        assert sorted(parameters["required"]) == sorted(parameters["properties"])
    (tool_message,) = [m for m in last["messages"] if m["role"] == "tool"]
    assert tool_message["tool_call_id"] == "call_oa1"
    receipt = json.loads(tool_message["content"])
    assert receipt["status"] == "succeeded" and receipt["result"]["amount_minor"] == 19900
    assert last["messages"][0]["role"] == "system"
