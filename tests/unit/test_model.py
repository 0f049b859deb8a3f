"""Model configuration against a fake OpenAI-compatible server, and the scripted model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)

from tests.fakes import FakeOpenAIServer, FakeToolCall
from writegate.demo.model import demo_chat_model as build_chat_model
from writegate.demo.model import describe_demo_model as describe_model
from writegate.demo.scripted import PREFIX
from writegate.demo.scripted import DemoChatModel as ScriptedChatModel
from writegate.graph.model import (
    PLACEHOLDER_API_KEY,
    check_strict_tool_specs,
    resolve_model_config,
)

ENV_VARS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "WRITEGATE_MODEL")


def _spec(name: str, properties: dict[str, Any]) -> dict[str, Any]:
    parameters = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    function = {"name": name, "description": name, "parameters": parameters, "strict": True}
    return {"type": "function", "function": function}


TOOLS = [
    _spec("get_order", {"order_id": {"type": "string"}}),
    _spec(
        "refund_order",
        {
            "order_id": {"type": "string"},
            "amount_minor": {"type": "integer", "minimum": 1},
            "currency": {"type": "string", "enum": ["CNY", "USD", "EUR"]},
            "reason": {"type": "string"},
        },
    ),
    _spec("update_ticket", {"ticket_id": {"type": "string"}, "status": {"type": "string"}}),
    _spec("create_ticket", {"title": {"type": "string"}, "description": {"type": "string"}}),
    _spec("list_orders", {}),
    _spec("list_tickets", {}),
]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def fake_openai(clean_env: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        for name, value in fake.env(model="gpt-test-mini").items():
            clean_env.setenv(name, value)
        yield fake


def _assert_strict_request(body: dict[str, Any]) -> None:
    assert body["model"] == "gpt-test-mini"
    assert body["temperature"] == 0
    assert body["parallel_tool_calls"] is True
    assert [t["function"]["name"] for t in body["tools"]] == [t["function"]["name"] for t in TOOLS]
    for tool in body["tools"]:
        assert tool["function"]["strict"] is True
        assert tool["function"]["parameters"]["additionalProperties"] is False
    refund = body["tools"][1]["function"]["parameters"]
    assert refund["properties"]["currency"]["enum"] == ["CNY", "USD", "EUR"]
    assert refund["properties"]["amount_minor"]["type"] == "integer"


def test_openai_non_streaming_parallel_tool_calls(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue_tool_calls(
        FakeToolCall("get_order", {"order_id": "ord_1001"}, id="call_a"),
        FakeToolCall("get_order", {"order_id": "ord_1002"}, id="call_b"),
    )
    reply = build_chat_model(TOOLS).invoke([HumanMessage("refund ord_1001 and ord_1002")])
    assert isinstance(reply, AIMessage)
    assert [(c["id"], c["name"], c["args"]) for c in reply.tool_calls] == [
        ("call_a", "get_order", {"order_id": "ord_1001"}),
        ("call_b", "get_order", {"order_id": "ord_1002"}),
    ]
    (body,) = fake_openai.chat_requests
    assert body["stream"] is False
    _assert_strict_request(body)
    assert fake_openai.requests[0].headers["authorization"] == "Bearer test-key"


def test_openai_streaming_parallel_tool_calls(fake_openai: FakeOpenAIServer) -> None:
    refund = {"order_id": "ord_1001", "amount_minor": 19900, "currency": "CNY", "reason": "late"}
    fake_openai.enqueue_tool_calls(
        FakeToolCall("refund_order", refund),
        FakeToolCall("update_ticket", {"ticket_id": "tkt_7", "status": "resolved"}),
    )
    chunks = list(build_chat_model(TOOLS).stream([HumanMessage("go")]))
    assert len(chunks) > 4  # arguments really arrived in pieces
    full = chunks[0]
    for chunk in chunks[1:]:
        full = full + chunk
    assert isinstance(full, AIMessageChunk)
    assert [(c["name"], c["args"]) for c in full.tool_calls] == [
        ("refund_order", refund),
        ("update_ticket", {"ticket_id": "tkt_7", "status": "resolved"}),
    ]
    assert all(c["id"] for c in full.tool_calls)
    (body,) = fake_openai.chat_requests
    assert body["stream"] is True
    _assert_strict_request(body)


def test_openai_streaming_text(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue_text("The refund was declined, so nothing was done.")
    chunks = list(build_chat_model(TOOLS).stream([HumanMessage("status?")]))
    assert (
        "".join(str(c.content) for c in chunks) == "The refund was declined, so nothing was done."
    )
    assert fake_openai.pending == 0


def test_base_url_without_key_uses_placeholder(
    fake_openai: FakeOpenAIServer, clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.delenv("OPENAI_API_KEY")
    fake_openai.enqueue_text("hello")
    reply = build_chat_model(TOOLS).invoke([HumanMessage("hi")])
    assert reply.content == "hello"
    assert fake_openai.requests[-1].headers["authorization"] == f"Bearer {PLACEHOLDER_API_KEY}"
    expected = f"gpt-test-mini at {fake_openai.base_url} (no API key, placeholder sent)"
    assert describe_model() == expected


def test_fake_server_lists_models_and_rejects_empty_queue(fake_openai: FakeOpenAIServer) -> None:
    models = httpx.get(f"{fake_openai.base_url}/models").json()
    assert [m["id"] for m in models["data"]] == ["gpt-4o-mini"]
    response = httpx.post(f"{fake_openai.base_url}/chat/completions", json={"messages": []})
    assert response.status_code == 400
    assert "no scripted reply" in response.json()["error"]["message"]


def test_without_env_uses_scripted_model(clean_env: pytest.MonkeyPatch) -> None:
    assert describe_model() == "scripted demo model (no OPENAI_API_KEY set)"
    model = build_chat_model(TOOLS)
    assert isinstance(model, ScriptedChatModel)
    assert model.tool_names == tuple(t["function"]["name"] for t in TOOLS)
    reply = model.invoke([HumanMessage("list orders")])
    assert [c["name"] for c in reply.tool_calls] == ["list_orders"]


def test_config_with_key_only_and_key_is_hidden() -> None:
    config = resolve_model_config({"OPENAI_API_KEY": "sk-secret"})
    assert (config.kind, config.model, config.base_url) == ("openai", "gpt-4o-mini", None)
    assert "sk-secret" not in repr(config)
    assert describe_model({"OPENAI_API_KEY": "sk-secret"}) == "gpt-4o-mini at the OpenAI API"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda f: f.pop("strict"), "strict: true"),
        (lambda f: f["parameters"].pop("additionalProperties"), "additionalProperties"),
        (lambda f: f["parameters"]["required"].pop(), "require every field"),
    ],
)
def test_non_strict_specs_are_rejected(mutate: Any, message: str) -> None:
    spec = json.loads(json.dumps(TOOLS[1]))
    mutate(spec["function"])
    with pytest.raises(ValueError, match=message):
        check_strict_tool_specs([spec])


# --- scripted model rules -------------------------------------------------------------

ORDER = {"id": "ord_1001", "payable_minor": 19900, "refunded_minor": 4900, "currency": "CNY"}


def _step(model: Any, history: list[BaseMessage]) -> AIMessage:
    reply = model.invoke(history)
    history.append(reply)
    return reply


def _answer(history: list[BaseMessage], reply: AIMessage, *results: Any) -> None:
    for call, result in zip(reply.tool_calls, results, strict=True):
        content = result if isinstance(result, str) else json.dumps(result)
        history.append(ToolMessage(content, tool_call_id=call["id"]))


def _refund_args(text: str, order: dict[str, Any] = ORDER) -> dict[str, Any] | str:
    """Run a refund request to the point where refund_order is called (or not)."""
    model = ScriptedChatModel().bind_tools(TOOLS)
    history: list[BaseMessage] = [HumanMessage(text)]
    lookup = _step(model, history)
    assert [c["name"] for c in lookup.tool_calls] == ["get_order"]
    _answer(history, lookup, order)
    refund = _step(model, history)
    if not refund.tool_calls:
        return str(refund.content)
    (call,) = refund.tool_calls
    assert call["name"] == "refund_order"
    return call["args"]


def test_scripted_full_refund_flow_and_receipt_summary() -> None:
    model = ScriptedChatModel().bind_tools(TOOLS)
    history: list[BaseMessage] = [HumanMessage("Please refund ord_1001 because it arrived broken")]
    lookup = _step(model, history)
    assert lookup.tool_calls[0]["args"] == {"order_id": "ord_1001"}
    assert lookup.tool_calls[0]["id"] == "call_1_0"
    _answer(history, lookup, ORDER)
    refund = _step(model, history)
    assert refund.tool_calls[0]["args"] == {
        "order_id": "ord_1001",
        "amount_minor": 15000,
        "currency": "CNY",
        "reason": "it arrived broken",
    }
    assert refund.tool_calls[0]["id"] == "call_3_0"
    receipt = {"execution_id": "exec_42", "provider_ref": "re_abc"}
    _answer(history, refund, {"status": "succeeded", "receipt": receipt})
    final = _step(model, history)
    assert not final.tool_calls
    assert str(final.content).startswith(PREFIX)
    assert "exec_42" in str(final.content) and "re_abc" in str(final.content)
    # Next turn: ids keep growing with the history, so they never repeat in a thread.
    history.append(HumanMessage("refund ord_1001"))
    assert _step(model, history).tool_calls[0]["id"] == "call_7_0"


@pytest.mark.parametrize(
    ("text", "amount", "currency", "reason"),
    [
        ("refund ord_1001 50.00", 5000, "CNY", "customer request"),
        ("refund ord_1001 199 CNY reason: damaged box.", 19900, "CNY", "damaged box"),
        ("请给ord_1001退款 ¥19.99 因为 质量问题", 1999, "CNY", "质量问题"),
    ],
)
def test_scripted_explicit_amounts(text: str, amount: int, currency: str, reason: str) -> None:
    args = _refund_args(text)
    assert args == {
        "order_id": "ord_1001",
        "amount_minor": amount,
        "currency": currency,
        "reason": reason,
    }


@pytest.mark.parametrize(
    ("text", "order", "question"),
    [
        ("refund ord_1001 50", {**ORDER, "currency": None}, "Which currency"),
        ("refund ord_1001 50 USD", ORDER, "in CNY, not USD"),
        ("refund ord_1001 10 or 20", ORDER, "several amounts"),
        ("refund ord_1001 1.005", ORDER, "more than two decimals"),
        ("refund ord_1001", {**ORDER, "refunded_minor": 19900}, "nothing left"),
    ],
)
def test_scripted_asks_instead_of_guessing(text: str, order: dict[str, Any], question: str) -> None:
    answer = _refund_args(text, order)
    assert isinstance(answer, str) and answer.startswith(PREFIX) and question in answer


@pytest.mark.parametrize(
    ("result", "expected", "not_expected"),
    [
        (
            {"code": "declined", "message": "person said no", "retryable": False},
            ["declined", "was not done", "will not retry"],
            ["succeeded"],
        ),
        (
            {"status": "outcome_unknown"},
            ["unknown", "reconciled", "must not be repeated"],
            ["succeeded"],
        ),
        (
            {"error": {"code": "provider_unavailable", "message": "503", "retryable": True}},
            ["provider_unavailable", "was not done", "safe to ask"],
            ["will not retry"],
        ),
    ],
)
def test_scripted_reports_failed_writes_without_retrying(
    result: dict[str, Any], expected: list[str], not_expected: list[str]
) -> None:
    model = ScriptedChatModel().bind_tools(TOOLS)
    history: list[BaseMessage] = [HumanMessage("refund ord_1001")]
    _answer(history, _step(model, history), ORDER)
    _answer(history, _step(model, history), result)
    final = _step(model, history)
    assert final.tool_calls == []
    for text in expected:
        assert text in str(final.content)
    for text in not_expected:
        assert text not in str(final.content)


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        (
            "set tkt_9 to in progress",
            [("update_ticket", {"ticket_id": "tkt_9", "status": "in_progress"})],
        ),
        (
            "create ticket: Printer jams\ndescription: tray 2 only",
            [("create_ticket", {"title": "Printer jams", "description": "tray 2 only"})],
        ),
        ("show my orders", [("list_orders", {})]),
        ("list tickets please", [("list_tickets", {})]),
        (
            "refund ord_1 and ord_2",
            [("get_order", {"order_id": "ord_1"}), ("get_order", {"order_id": "ord_2"})],
        ),
    ],
)
def test_scripted_first_calls(text: str, calls: list[tuple[str, dict[str, Any]]]) -> None:
    reply = ScriptedChatModel().invoke([HumanMessage(text)])
    assert [(c["name"], c["args"]) for c in reply.tool_calls] == calls
    assert [c["id"] for c in reply.tool_calls] == [f"call_1_{i}" for i in range(len(calls))]


def test_scripted_help_missing_tool_and_read_summary() -> None:
    help_reply = ScriptedChatModel().invoke([HumanMessage("hello")])
    assert str(help_reply.content).startswith(PREFIX + "I only understand")
    only_reads = ScriptedChatModel().bind_tools(TOOLS[:1])
    assert "not available" in str(only_reads.invoke([HumanMessage("list tickets")]).content)
    model = ScriptedChatModel()
    history: list[BaseMessage] = [HumanMessage("list orders")]
    orders = [{"id": "ord_1", "status": "paid"}, {"id": "ord_2", "status": "refunded"}]
    _answer(history, _step(model, history), {"orders": orders})
    summary = str(_step(model, history).content)
    assert "2 item(s)" in summary and "ord_1 (paid)" in summary


def test_scripted_explicit_script_in_order_shared_with_bound_copy() -> None:
    script = [
        AIMessage("", tool_calls=[{"name": "list_orders", "args": {}, "id": None}]),
        AIMessage("done"),
    ]
    model = ScriptedChatModel(script=script)
    bound = model.bind_tools(TOOLS)
    first = bound.invoke([HumanMessage("x")])
    assert first.tool_calls[0]["id"] == "call_1_0"
    assert model.invoke([HumanMessage("x")]).content == "done"
    assert len(model.calls) == 2
    with pytest.raises(RuntimeError, match="ran out of replies"):
        bound.invoke([HumanMessage("x")])


def test_scripted_tool_calls_are_typed_like_a_real_models() -> None:
    """LangChain v1's create_agent sends each call on only if it says `type: tool_call`."""
    script = [AIMessage("", tool_calls=[{"name": "list_orders", "args": {}, "id": "c1"}])]
    scripted_call = ScriptedChatModel(script=script).invoke([HumanMessage("x")]).tool_calls[0]
    planned_call = ScriptedChatModel().invoke([HumanMessage("list orders")]).tool_calls[0]
    assert scripted_call.get("type") == planned_call.get("type") == "tool_call"


def test_feeding_a_scripted_model_drops_the_replies_it_already_gave() -> None:
    model = ScriptedChatModel(script=[])
    bound = model.bind_tools([])
    for turn in range(3):
        model.feed([AIMessage(content=f"first {turn}"), AIMessage(content=f"second {turn}")])
        assert bound.invoke([HumanMessage("go")]).content == f"first {turn}"
        assert bound.invoke([HumanMessage("go")]).content == f"second {turn}"
        assert model.script is not None and len(model.script) == 2
