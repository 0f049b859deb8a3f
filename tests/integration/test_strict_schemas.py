"""What the model is told about writegate's tools, under each way in, on the wire.

With the real ChatOpenAI client against the fake OpenAI-compatible server, which
records each request: under `wg.build_agent()` and under `create_agent` with
`wg.middleware()`, every writegate tool reaches the model as a strict function (closed
object, every field required), beside the other tools as they were given. In a
hand-built graph the model is bound by its owner, so the schema is what they bind;
there, as everywhere, writegate's own check is what holds: arguments the schema does
not allow are refused (`validation_failed`) and nothing is proposed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from pydantic import SecretStr

from tests.fakes.openai_server import FakeOpenAIServer, FakeToolCall
from writegate import Writegate, write_tool

pytestmark = pytest.mark.integration

sent: list[str] = []


@write_tool(side_effect="external", resource=lambda args: f"mailbox:{args['to']}")
def send_note(to: str, copies: int, *, request_key: str) -> dict:
    """Send a note.

    Args:
        to: Who gets it.
        copies: How many copies.
    """
    sent.append(request_key)
    return {"to": to}


@tool
def weather(city: str) -> str:
    """The weather in a city (a plain LangChain tool, not writegate's)."""
    return "sunny"


@pytest.fixture(scope="module")
def wg(create_database: Callable[[], str]) -> Iterator[Writegate]:
    with Writegate.open(create_database(), tools=[send_note]) as opened:
        yield opened


@pytest.fixture
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


def _model(fake: FakeOpenAIServer) -> ChatOpenAI:
    return ChatOpenAI(
        model="gpt-4o-mini",
        api_key=SecretStr("test-key"),
        base_url=fake.base_url,
        use_responses_api=False,
        max_retries=0,
    )


def _config() -> dict[str, Any]:
    return {"configurable": {"thread_id": uuid.uuid4().hex, "user_id": "u1", "tenant_id": "t1"}}


def _tools_sent(fake: FakeOpenAIServer) -> dict[str, dict[str, Any]]:
    """The tools of the model's first request, by name."""
    return {t["function"]["name"]: t["function"] for t in fake.chat_requests[0]["tools"]}


def _assert_strict(function: dict[str, Any]) -> None:
    assert function["strict"] is True
    parameters = function["parameters"]
    assert parameters["additionalProperties"] is False
    assert sorted(parameters["required"]) == sorted(parameters["properties"]) == ["copies", "to"]


def _hand_built(wg: Writegate, model: Any) -> Any:
    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("before_model", wg.before_model())
    builder.add_node("agent", agent)
    builder.add_node("tools", wg.tool_node())
    builder.add_edge(START, "before_model")
    builder.add_edge("before_model", "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=wg.checkpointer)


def test_build_agent_tells_the_model_a_strict_schema(wg: Writegate, fake: FakeOpenAIServer) -> None:
    fake.enqueue_text("Nothing to send.")
    wg.build_agent(_model(fake)).invoke({"messages": [("user", "hi")]}, _config())
    _assert_strict(_tools_sent(fake)["send_note"])


def test_the_middleware_tells_the_model_a_strict_schema(
    wg: Writegate, fake: FakeOpenAIServer
) -> None:
    fake.enqueue_text("Nothing to send.")
    agent = create_agent(
        _model(fake),
        [send_note, weather],
        middleware=[wg.middleware()],
        checkpointer=wg.checkpointer,
    )
    agent.invoke({"messages": [("user", "hi")]}, _config())
    tools = _tools_sent(fake)
    _assert_strict(tools["send_note"])
    assert "strict" not in tools["weather"]  # a tool writegate was not given stays as it was


@pytest.mark.parametrize("way", ["hand_built", "middleware", "build_agent"])
def test_arguments_the_schema_does_not_allow_are_refused_on_every_way_in(
    way: str, wg: Writegate, fake: FakeOpenAIServer
) -> None:
    extra = {"to": "bob", "copies": 1, "user_id": "someone_else"}
    fake.enqueue_tool_calls(FakeToolCall("send_note", extra, id="call_1"))
    fake.enqueue_text("It was refused.")
    model = _model(fake)
    if way == "hand_built":
        graph = _hand_built(wg, model.bind_tools([send_note]))  # the owner's own binding
    elif way == "middleware":
        graph = create_agent(
            model, [send_note], middleware=[wg.middleware()], checkpointer=wg.checkpointer
        )
    else:
        graph = wg.build_agent(model)
    before = len(sent)
    out = graph.invoke({"messages": [("user", "send bob a note")]}, _config())
    assert "__interrupt__" not in out  # nothing proposed, nobody asked
    [answer] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert json.loads(str(answer.content))["code"] == "validation_failed"
    assert len(sent) == before
