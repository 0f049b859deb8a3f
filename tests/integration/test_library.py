"""writegate as a library: a user's own tools, declared with the public API only,
behind `wg.tool_node()` in a hand-built graph and behind `wg.build_agent(model)`."""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

from tests.integration.library_helpers import (
    LEDGER,
    OWNERS,
    SEEN,
    TENANT,
    THREADS,
    USER,
    VERSIONS,
    asked,
    balance,
    confirm,
    hand_built,
    last_tool,
    new_account,
    notify,
    pay,
    payments,
    run_config,
    scripted,
    tool_call,
)
from writegate import Writegate, write_tool
from writegate.approval.errors import NotFound

AUDIT_SQL = "SELECT event, status FROM writegate.audit WHERE thread_id = %s AND tool_name = %s"


@tool
def _ping(account: str, config: RunnableConfig) -> dict[str, Any]:
    """Ping the owner of an account (takes no `request_key` argument).

    Args:
        account: The account id.
    """
    given = config["configurable"]
    LEDGER.setdefault(given["request_key"], {"account": account})
    return {"status": "sent", **{k: given[k] for k in ("request_key", "user_id", "tenant_id")}}


ping = write_tool(_ping, side_effect="external", name="ping")


@pytest.fixture(scope="module")
def wg(create_database: Callable[[], str]) -> Iterator[Writegate]:
    with Writegate.open(create_database(), tools=[pay, balance, notify, ping]) as gate:
        yield gate


def thread() -> str:
    return f"lib_{secrets.token_hex(5)}"


def start_payment(wg: Writegate, account: str, amount: int = 1250) -> tuple[Any, dict, Any]:
    call = tool_call("pay", account=account, cents=amount)
    graph = hand_built(wg, scripted([call], "ok", "ok, still"))
    config = run_config(thread())
    out = graph.invoke({"messages": [HumanMessage("pay")]}, config)
    (interrupt,) = asked(out)
    return graph, config, interrupt


def test_nothing_runs_before_the_person_confirms(wg: Writegate) -> None:
    account = new_account()
    _, _, interrupt = start_payment(wg, account)
    value = interrupt.value
    assert payments(account) == 0
    assert value["operation"] == "pay" and value["resource"] == f"account:{account}"
    assert value["preview"]["fields"][1] == {
        "name": "cents",
        "value": 1250,
        "display": "12.50 EUR",
    }
    assert value["action_requests"][0]["name"] == "pay"


def test_confirm_runs_once_and_a_replay_from_the_checkpoint_sends_nothing_more(
    wg: Writegate,
) -> None:
    account = new_account()
    graph, config, interrupt = start_payment(wg, account)
    waiting = graph.get_state(config).config  # the checkpoint that asks the question
    out = graph.invoke(Command(resume=confirm(interrupt)), config)
    receipt = last_tool(out)
    assert receipt["status"] == "succeeded"
    assert receipt["result"]["cents"] == 1250
    assert receipt["result"]["by"] == USER  # the function acted for the confirmed user
    assert receipt["request_key"].startswith(f"pay:{TENANT}:account:{account}:")
    # Resuming the old checkpoint again re-runs the tool node from its start.
    again = graph.invoke(Command(resume=confirm(interrupt)), waiting)
    assert last_tool(again)["execution_id"] == receipt["execution_id"]
    assert payments(account) == 1


def test_langchain_approve_decision_runs_it(wg: Writegate) -> None:
    account = new_account()
    graph, config, _ = start_payment(wg, account)
    out = graph.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    assert last_tool(out)["status"] == "succeeded"
    assert payments(account) == 1


def test_decline_runs_nothing_and_tells_the_model(wg: Writegate) -> None:
    account = new_account()
    graph, config, interrupt = start_payment(wg, account)
    decline = {"action": "decline", "proposal_id": interrupt.value["proposal_id"]}
    out = graph.invoke(Command(resume=decline), config)
    assert last_tool(out)["code"] == "declined"
    assert payments(account) == 0


def test_an_edit_asks_again_with_the_new_preview_and_runs_the_edited_arguments(
    wg: Writegate,
) -> None:
    account = new_account()
    graph, config, interrupt = start_payment(wg, account)
    edit = {
        "action": "edit",
        "proposal_id": interrupt.value["proposal_id"],
        "args": {"account": account, "cents": 900},
    }
    (second,) = asked(graph.invoke(Command(resume=edit), config))
    assert second.value["proposal_id"] != interrupt.value["proposal_id"]
    assert second.value["preview"]["fields"][1]["display"] == "9.00 EUR"
    assert payments(account) == 0
    out = graph.invoke(Command(resume=confirm(second)), config)
    assert last_tool(out)["result"]["cents"] == 900
    assert payments(account) == 1


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (lambda account: VERSIONS.update({account: 2}), "state_changed"),
        (lambda account: OWNERS.update({account: "user_other"}), "not_found"),
    ],
    ids=["version_moved", "no_longer_owned"],
)
def test_validate_runs_again_at_execution_and_a_change_since_the_proposal_runs_nothing(
    wg: Writegate, change: Callable[[str], None], code: str
) -> None:
    account = new_account()
    graph, config, interrupt = start_payment(wg, account)
    change(account)  # while the person was reading the preview
    out = graph.invoke(Command(resume=confirm(interrupt)), config)
    assert last_tool(out)["code"] == code
    assert payments(account) == 0


def test_two_writes_in_one_turn_ask_one_question_each(wg: Writegate) -> None:
    first, second = new_account(), new_account()
    calls = [
        tool_call("pay", account=first, cents=100),
        tool_call("pay", account=second, cents=200),
    ]
    graph, config = hand_built(wg, scripted(calls, "ok")), run_config(thread())
    pending = asked(graph.invoke({"messages": [HumanMessage("pay both")]}, config))
    assert len(pending) == 2 and payments(first) + payments(second) == 0
    answers = {item.id: confirm(item) for item in pending}
    out = graph.invoke(Command(resume=answers), config)
    results = [json.loads(str(m.content)) for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [r["status"] for r in results] == ["succeeded", "succeeded"]
    assert (payments(first), payments(second)) == (1, 1)


def test_a_read_runs_at_once_and_is_audited(wg: Writegate) -> None:
    account, thread_id = new_account(), thread()
    graph = hand_built(wg, scripted([tool_call("balance", account=account)], "ok"))
    out = graph.invoke({"messages": [HumanMessage("balance")]}, run_config(thread_id))
    assert last_tool(out) == {"status": "ok", "account": account, "payments": 0}
    with wg.runtime.pool.connection() as conn:
        rows = conn.execute(AUDIT_SQL, (thread_id, "balance")).fetchall()
    assert [(row["event"], row["status"]) for row in rows] == [("read", "succeeded")]


def test_someone_elses_account_is_not_found_and_nothing_is_asked(wg: Writegate) -> None:
    account = new_account(owner="user_other")
    graph = hand_built(wg, scripted([tool_call("pay", account=account, cents=5)], "ok"))
    out = graph.invoke({"messages": [HumanMessage("pay")]}, run_config(thread()))
    assert not asked(out)
    assert last_tool(out)["code"] == "not_found"


def test_identity_comes_from_the_run_context(wg: Writegate) -> None:
    account = new_account(owner="user_ctx")
    graph = hand_built(wg, scripted([tool_call("pay", account=account, cents=5)], "ok"))
    config = {"configurable": {"thread_id": thread()}}
    context = {"user_id": "user_ctx", "tenant_id": TENANT}
    out = graph.invoke({"messages": [HumanMessage("pay")]}, config, context=context)
    (interrupt,) = asked(out)
    assert SEEN[-1].user_id == "user_ctx"
    out = graph.invoke(Command(resume=confirm(interrupt)), config, context=context)
    assert last_tool(out)["status"] == "succeeded"
    assert payments(account) == 1


def test_build_agent_runs_writegates_graph_over_a_user_tool(wg: Writegate) -> None:
    account = new_account()
    model = scripted([tool_call("pay", account=account, cents=700)], "done")
    agent, config = wg.build_agent(model), run_config(thread())
    (interrupt,) = asked(agent.invoke({"messages": [HumanMessage("pay")]}, config))
    assert payments(account) == 0
    out = agent.invoke(Command(resume=confirm(interrupt)), config)
    assert last_tool(out)["status"] == "succeeded"
    assert out["messages"][-1].content == "done"
    assert payments(account) == 1


async def _tool_node_async(wg: Writegate, account: str) -> dict[str, Any]:
    loop_thread, validations = threading.get_ident(), len(THREADS)
    model = scripted([tool_call("pay", account=account, cents=300)], "ok")
    async with wg.async_checkpointer() as saver:
        graph, config = hand_built(wg, model, checkpointer=saver), run_config(thread())
        (interrupt,) = asked(await graph.ainvoke({"messages": [HumanMessage("pay")]}, config))
        assert payments(account) == 0
        chunks = [c async for c in graph.astream(Command(resume=confirm(interrupt)), config)]
        assert chunks
        # The ledger and the tool's validator ran off the event loop's thread.
        assert len(THREADS) > validations and loop_thread not in THREADS[validations:]
        return dict((await graph.aget_state(config)).values)


def test_tool_node_under_ainvoke_and_astream_with_the_async_saver(wg: Writegate) -> None:
    account = new_account()
    state = asyncio.run(_tool_node_async(wg, account))
    assert last_tool(state)["status"] == "succeeded"
    assert payments(account) == 1


async def _agent_async(wg: Writegate, account: str) -> dict[str, Any]:
    model = scripted([tool_call("pay", account=account, cents=400)], "done")
    async with wg.async_checkpointer() as saver:
        agent, config = wg.build_agent(model, checkpointer=saver), run_config(thread())
        (interrupt,) = asked(await agent.ainvoke({"messages": [HumanMessage("pay")]}, config))
        result: dict[str, Any] = await agent.ainvoke(Command(resume=confirm(interrupt)), config)
        return result


def test_build_agent_under_ainvoke_with_the_async_saver(wg: Writegate) -> None:
    account = new_account()
    out = asyncio.run(_agent_async(wg, account))
    assert last_tool(out)["status"] == "succeeded"
    assert payments(account) == 1


def test_the_user_is_never_taken_from_the_resume(wg: Writegate) -> None:
    account = new_account()
    graph, config, interrupt = start_payment(wg, account)
    forged = {**confirm(interrupt), "user_id": "user_other"}
    out = graph.invoke(Command(resume=forged), config)
    assert asked(out)  # an unknown key is refused: the same question stands
    assert asked(out)[0].value["error"]["code"] == "invalid_decision"
    assert payments(account) == 0


def test_another_user_resuming_the_thread_is_refused_and_the_question_stands(
    wg: Writegate,
) -> None:
    account = new_account()
    graph, config, interrupt = start_payment(wg, account)
    intruder = run_config(config["configurable"]["thread_id"], user="user_other")
    with pytest.raises(NotFound):
        graph.invoke(Command(resume=confirm(interrupt)), intruder)
    assert payments(account) == 0
    out = graph.invoke(Command(resume=confirm(interrupt)), config)
    assert last_tool(out)["status"] == "succeeded"
    assert payments(account) == 1


def test_a_wrapped_langchain_tool_gets_its_request_key_only_after_confirmation(
    wg: Writegate,
) -> None:
    account = new_account()
    graph = hand_built(wg, scripted([tool_call("notify", account=account)], "ok"))
    config = run_config(thread())
    (interrupt,) = asked(graph.invoke({"messages": [HumanMessage("notify")]}, config))
    assert "request_key" not in interrupt.value["args"]
    assert payments(account) == 0
    receipt = last_tool(graph.invoke(Command(resume=confirm(interrupt)), config))
    assert receipt["status"] == "succeeded"
    assert receipt["result"] == {"status": "sent", "key_seen": receipt["request_key"]}
    assert payments(account) == 1


def test_a_wrapped_langchain_tool_without_the_argument_gets_the_key_in_its_config(
    wg: Writegate,
) -> None:
    account = new_account()
    graph = hand_built(wg, scripted([tool_call("ping", account=account)], "ok"))
    config = run_config(thread())
    (interrupt,) = asked(graph.invoke({"messages": [HumanMessage("ping")]}, config))
    assert interrupt.value["args"] == {"account": account}
    assert payments(account) == 0
    receipt = last_tool(graph.invoke(Command(resume=confirm(interrupt)), config))
    assert receipt["result"] == {
        "status": "sent",
        "request_key": receipt["request_key"],
        "user_id": USER,
        "tenant_id": TENANT,
    }
    assert payments(account) == 1


def test_a_registered_read_tool_runs_audited_even_in_a_plain_tool_node(wg: Writegate) -> None:
    account, thread_id = new_account(), thread()
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([balance, pay]))
    builder.add_edge(START, "tools")
    calls = [tool_call("balance", account=account), tool_call("pay", account=account, cents=1)]
    out = builder.compile().invoke(
        {"messages": [AIMessage("", tool_calls=calls)]}, run_config(thread_id)
    )
    read, write = (json.loads(str(m.content)) for m in out["messages"][-2:])
    assert read == {"status": "ok", "account": account, "payments": 0}
    assert write["code"] == "unprotected"  # a write still only runs behind the gate
    assert payments(account) == 0
    with wg.runtime.pool.connection() as conn:
        rows = conn.execute(AUDIT_SQL, (thread_id, "balance")).fetchall()
    assert [(row["event"], row["status"]) for row in rows] == [("read", "succeeded")]


def test_a_registered_read_called_with_bad_arguments_in_a_plain_tool_node_is_refused_and_audited(
    wg: Writegate,
) -> None:
    account, thread_id = new_account(), thread()
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([balance]))
    builder.add_edge(START, "tools")
    call = tool_call("balance", account=account, user_id="user_other")
    out = builder.compile().invoke(
        {"messages": [AIMessage("", tool_calls=[call])]}, run_config(thread_id)
    )
    refused = json.loads(str(out["messages"][-1].content))  # JSON, not a validation trace
    assert refused["code"] == "validation_failed" and refused["retryable"] is False
    with wg.runtime.pool.connection() as conn:
        rows = conn.execute(AUDIT_SQL, (thread_id, "balance")).fetchall()
    assert [(row["event"], row["status"]) for row in rows] == [("read", "rejected")]


def test_open_without_a_url_resolves_database_url_and_shares_one_pool_until_closed(
    create_database: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = create_database()
    monkeypatch.setenv("DATABASE_URL", url)
    with Writegate.open(tools=[ping]) as opened:  # a write: no read binding is moved
        assert opened.runtime.url == url
        assert isinstance(opened.checkpointer, PostgresSaver)
        assert opened.checkpointer.conn is opened.runtime.pool  # one pool, one database
        pool = opened.runtime.pool
        assert not pool.closed
    assert pool.closed
