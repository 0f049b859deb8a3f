"""The same checks for each of the three ways in (`wg.tool_node()` in a hand-built
graph, `wg.middleware()` in `create_agent`, and `wg.build_agent()`), over the library
tests' own `pay` and `balance`: who acts comes from the host (the run config or the run
context), never from the model's arguments or the resume payload; and a read and a
write in one turn work under `ainvoke` / `astream` with the `AsyncPostgresSaver`."""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command

from tests.integration.library_helpers import (
    SEEN,
    TENANT,
    THREADS,
    USER,
    asked,
    balance,
    confirm,
    hand_built,
    last_tool,
    new_account,
    pay,
    payments,
    run_config,
    scripted,
    tool_call,
)
from writegate import Writegate
from writegate.graph.identity import MissingIdentity
from writegate.testing import ScriptedChatModel

OTHER = "user_other"
FORGED = {"user_id": OTHER, "tenant_id": "tenant_other"}


@pytest.fixture(scope="module")
def wg(create_database: Callable[[], str]) -> Iterator[Writegate]:
    with Writegate.open(create_database(), tools=[pay, balance]) as gate:
        yield gate


def _tool_node(wg: Writegate, turns: list[Any], checkpointer: Any = None) -> Any:
    return hand_built(wg, scripted(*turns), checkpointer=checkpointer)


def _middleware(wg: Writegate, turns: list[Any], checkpointer: Any = None) -> Any:
    return create_agent(
        scripted(*turns),
        tools=[pay, balance],
        middleware=[wg.middleware()],
        checkpointer=checkpointer or wg.checkpointer,
    )


def _build_agent(wg: Writegate, turns: list[Any], checkpointer: Any = None) -> Any:
    return wg.build_agent(scripted(*turns), checkpointer=checkpointer)


WAYS = {"tool_node": _tool_node, "middleware": _middleware, "build_agent": _build_agent}


@pytest.fixture(params=sorted(WAYS))
def way(request: pytest.FixtureRequest) -> Callable[..., Any]:
    return WAYS[request.param]


def thread() -> str:
    return f"ids_{secrets.token_hex(5)}"


def ask_to_pay(way: Any, wg: Writegate, account: str) -> tuple[Any, dict[str, Any], Any]:
    graph = way(wg, [[tool_call("pay", account=account, cents=250)], *["done"] * 3])
    config = run_config(thread())
    (interrupt,) = asked(graph.invoke({"messages": [HumanMessage("pay")]}, config))
    return graph, config, interrupt


@pytest.mark.parametrize("name", ["pay", "balance"])
def test_a_user_named_in_the_model_arguments_is_refused_and_nothing_runs(
    way: Any, wg: Writegate, name: str
) -> None:
    account = new_account(owner=OTHER)  # the model names its owner as the one acting
    args = {"account": account, **FORGED, "tenant_id": TENANT}
    args |= {"cents": 5} if name == "pay" else {}
    graph, seen = way(wg, [[tool_call(name, **args)], "ok"]), len(SEEN)
    out = graph.invoke({"messages": [HumanMessage("go")]}, run_config(thread()))
    assert not asked(out)
    assert last_tool(out)["code"] == "validation_failed"
    assert len(SEEN) == seen  # refused before the tool's own check even ran
    assert payments(account) == 0


def test_a_writegate_event_naming_a_user_is_refused_and_the_question_stands(
    way: Any, wg: Writegate
) -> None:
    account = new_account()
    graph, config, interrupt = ask_to_pay(way, wg, account)
    forged = {**confirm(interrupt), **FORGED}
    (again,) = asked(graph.invoke(Command(resume=forged), config))
    assert again.value["error"]["code"] == "invalid_decision"
    assert payments(account) == 0


def test_a_langchain_decision_naming_a_user_runs_for_the_authenticated_user_only(
    way: Any, wg: Writegate
) -> None:
    account = new_account()
    graph, config, _ = ask_to_pay(way, wg, account)
    answer = {"decisions": [{"type": "approve", **FORGED}], **FORGED}
    receipt = last_tool(graph.invoke(Command(resume=answer), config))
    assert receipt["status"] == "succeeded"
    assert receipt["result"]["by"] == USER  # the extra keys were ignored
    assert SEEN[-1].user_id == USER and SEEN[-1].tenant_id == TENANT
    assert payments(account) == 1


def test_an_edit_whose_arguments_name_a_user_is_refused_and_nothing_runs(
    way: Any, wg: Writegate
) -> None:
    account = new_account()
    graph, config, interrupt = ask_to_pay(way, wg, account)
    args = {"account": account, "cents": 250, **FORGED}
    edit = {"action": "edit", "proposal_id": interrupt.value["proposal_id"], "args": args}
    out = graph.invoke(Command(resume=edit), config)
    pending = asked(out)
    refused = pending[0].value["error"] if pending else last_tool(out)
    assert refused["code"] == "validation_failed"
    assert payments(account) == 0


def test_identity_from_the_run_context_alone(way: Any, wg: Writegate) -> None:
    account = new_account(owner="user_ctx")
    graph = way(wg, [[tool_call("pay", account=account, cents=5)], *["ok"] * 3])
    config, context = (
        {"configurable": {"thread_id": thread()}},
        {
            "user_id": "user_ctx",
            "tenant_id": TENANT,
        },
    )
    (interrupt,) = asked(graph.invoke({"messages": [HumanMessage("pay")]}, config, context=context))
    receipt = last_tool(graph.invoke(Command(resume=confirm(interrupt)), config, context=context))
    assert receipt["result"]["by"] == "user_ctx"
    assert payments(account) == 1


def test_config_and_context_naming_different_users_is_refused_before_anything_runs(
    way: Any, wg: Writegate
) -> None:
    account = new_account()
    graph, seen = way(wg, [[tool_call("pay", account=account, cents=5)], "ok"]), len(SEEN)
    context = {"user_id": OTHER, "tenant_id": TENANT}
    with pytest.raises(MissingIdentity):
        graph.invoke({"messages": [HumanMessage("pay")]}, run_config(thread()), context=context)
    assert len(SEEN) == seen and payments(account) == 0


AUDIT_SQL = "SELECT event, status FROM writegate.audit WHERE thread_id = %s AND tool_name = %s"


async def _read_and_write_async(way: Any, wg: Writegate, account: str) -> tuple[Any, int]:
    loop_thread, validations = threading.get_ident(), len(THREADS)
    calls = [tool_call("balance", account=account), tool_call("pay", account=account, cents=75)]
    async with wg.async_checkpointer() as saver:
        graph, config = way(wg, [calls, *["done"] * 3], checkpointer=saver), run_config(thread())
        (interrupt,) = asked(await graph.ainvoke({"messages": [HumanMessage("go")]}, config))
        assert interrupt.value["operation"] == "pay" and payments(account) == 0
        chunks = [c async for c in graph.astream(Command(resume=confirm(interrupt)), config)]
        state = (await graph.aget_state(config)).values
    # The ledger and the tool's validator ran off the event loop's thread.
    assert len(THREADS) > validations and loop_thread not in THREADS[validations:]
    return state, len(chunks)


def test_a_read_and_a_write_under_ainvoke_and_astream_with_the_async_saver(
    way: Any, wg: Writegate
) -> None:
    account = new_account()
    state, chunks = asyncio.run(_read_and_write_async(way, wg, account))
    assert chunks > 0
    said = {
        m.name: json.loads(str(m.content)) for m in state["messages"] if isinstance(m, ToolMessage)
    }
    assert said["balance"] == {"status": "ok", "account": account, "payments": 0}
    assert said["pay"]["status"] == "succeeded" and said["pay"]["result"]["cents"] == 75
    assert payments(account) == 1


def _shape(value: dict[str, Any], account: str) -> str:
    """The interrupt value with what differs per proposal replaced by placeholders."""
    text = json.dumps(value, sort_keys=True)
    for key in ("proposal_id", "tool_call_id", "args_digest", "expires_at"):
        text = text.replace(str(value[key]), key.upper())
    return text.replace(account, "ACCOUNT")


def test_the_interrupt_value_is_the_same_for_the_three_ways_in(wg: Writegate) -> None:
    shapes = {}
    for name, way in WAYS.items():
        account = new_account()
        _, _, interrupt = ask_to_pay(way, wg, account)
        shapes[name] = _shape(interrupt.value, account)
    assert shapes["middleware"] == shapes["tool_node"] == shapes["build_agent"]
    assert '"action_requests"' in shapes["tool_node"] and '"respond_with"' in shapes["tool_node"]


class _BoundAlready(ScriptedChatModel):
    """A model its caller bound to the tools with options of their own."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        raise AssertionError("build_agent bound the model again")


def test_build_agent_uses_a_model_bound_already_as_it_is(wg: Writegate) -> None:
    model = _BoundAlready(script=[AIMessage("hello")])
    with pytest.raises(AssertionError, match="bound the model again"):
        wg.build_agent(model)
    agent = wg.build_agent(model, bind_tools=False)
    out = agent.invoke({"messages": [HumanMessage("hi")]}, run_config(thread()))
    assert out["messages"][-1].text == "hello"
