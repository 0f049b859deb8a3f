"""The third way in: `wg.middleware()` in LangChain v1's `create_agent`, over a user's
own tools (the same `pay` and `balance` as the library tests), sync and async."""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.types import Command

from tests.integration.library_helpers import (
    SEEN,
    TENANT,
    THREADS,
    balance,
    new_account,
    pay,
    payments,
    run_config,
    scripted,
    tool_call,
)
from writegate import Writegate, write_tool
from writegate.graph.identity import MissingIdentity

AUDIT_SQL = "SELECT event, status FROM writegate.audit WHERE thread_id = %s AND tool_name = %s"


@pytest.fixture(scope="module")
def wg(create_database: Callable[[], str]) -> Iterator[Writegate]:
    with Writegate.open(create_database(), tools=[pay, balance]) as gate:
        yield gate


@dataclass
class Session:
    """What a host puts in the run context: the authenticated user."""

    user_id: str
    tenant_id: str


@tool
def shout(text: str) -> str:
    """Say something loudly (a plain LangChain tool writegate was not given).

    Args:
        text: What to say.
    """
    return text.upper()


@write_tool(side_effect="irreversible")
def wipe(target: str, *, request_key: str) -> dict[str, Any]:
    """Wipe a target (a write tool writegate was not given).

    Args:
        target: What to wipe.
    """
    WIPED.append(target)
    return {"wiped": target}


WIPED: list[str] = []


def agent_for(wg: Writegate, *turns: Any, checkpointer: Any = None, **options: Any) -> Any:
    return create_agent(
        scripted(*turns),
        tools=[pay, balance, shout, wipe],
        middleware=[wg.middleware()],
        checkpointer=checkpointer or wg.checkpointer,
        **options,
    )


def thread() -> str:
    return f"mw_{secrets.token_hex(5)}"


def asked(out: dict[str, Any]) -> list[Any]:
    return list(out.get("__interrupt__", []))


def tool_bodies(out: dict[str, Any]) -> list[Any]:
    return [json.loads(str(m.content)) for m in out["messages"] if isinstance(m, ToolMessage)]


def confirm(interrupt: Any) -> dict[str, Any]:
    return {"action": "confirm", "proposal_id": interrupt.value["proposal_id"]}


def start_payment(wg: Writegate, account: str, cents: int = 1250) -> tuple[Any, dict, Any]:
    # One reply after each run of the tool node: a replay runs the model again too.
    agent = agent_for(wg, [tool_call("pay", account=account, cents=cents)], *["done"] * 4)
    config = run_config(thread())
    (interrupt,) = asked(agent.invoke({"messages": [HumanMessage("pay")]}, config))
    return agent, config, interrupt


def test_nothing_runs_before_the_person_confirms_and_the_question_is_the_same(
    wg: Writegate,
) -> None:
    account = new_account()
    _, _, interrupt = start_payment(wg, account)
    value = interrupt.value
    assert payments(account) == 0
    assert value["type"] == "writegate.approval"
    assert value["operation"] == "pay" and value["resource"] == f"account:{account}"
    assert value["preview"]["fields"][1]["display"] == "12.50 EUR"
    assert value["respond_with"]["confirm"] == confirm(interrupt)
    assert value["action_requests"][0]["name"] == "pay"
    assert value["review_configs"][0]["allowed_decisions"] == ["approve", "edit", "reject"]


def test_confirm_runs_once_and_a_second_confirm_from_the_old_checkpoint_sends_nothing_more(
    wg: Writegate,
) -> None:
    account = new_account()
    agent, config, interrupt = start_payment(wg, account)
    # The checkpoint that asks the question, resumed by the same authenticated host.
    checkpoint = agent.get_state(config).config["configurable"]
    waiting = {"configurable": {**config["configurable"], **checkpoint}}
    out = agent.invoke(Command(resume=confirm(interrupt)), config)
    (receipt,) = tool_bodies(out)
    assert receipt["status"] == "succeeded" and receipt["result"]["cents"] == 1250
    assert out["messages"][-1].content == "done"
    assert payments(account) == 1
    for _ in range(2):  # a double click, a replay: the tool node runs again from its start
        again = agent.invoke(Command(resume=confirm(interrupt)), waiting)
        assert tool_bodies(again)[-1]["execution_id"] == receipt["execution_id"]
    assert payments(account) == 1


def test_decline_runs_nothing_and_tells_the_model_declined(wg: Writegate) -> None:
    account = new_account()
    agent, config, interrupt = start_payment(wg, account)
    decline = {"action": "decline", "proposal_id": interrupt.value["proposal_id"]}
    out = agent.invoke(Command(resume=decline), config)
    (told,) = tool_bodies(out)
    assert told["code"] == "declined" and "advice" in told
    assert payments(account) == 0


@pytest.mark.parametrize(
    ("decision", "expected"),
    [
        ({"type": "approve"}, ("succeeded", 1250, 1)),
        ({"type": "reject", "message": "not today"}, ("declined", None, 0)),
    ],
)
def test_langchain_approve_and_reject_decisions(
    wg: Writegate, decision: dict[str, Any], expected: tuple[str, int | None, int]
) -> None:
    account = new_account()
    agent, config, _ = start_payment(wg, account)
    out = agent.invoke(Command(resume={"decisions": [decision]}), config)
    (body,) = tool_bodies(out)
    cents = body["result"]["cents"] if "result" in body else None
    assert (body.get("status") or body["code"], cents, payments(account)) == expected


def _writegate_edit(interrupt: Any, args: dict[str, Any]) -> dict[str, Any]:
    return {"action": "edit", "proposal_id": interrupt.value["proposal_id"], "args": args}


def _langchain_edit(interrupt: Any, args: dict[str, Any]) -> dict[str, Any]:
    edited = {"name": interrupt.value["operation"], "args": args}
    return {"decisions": [{"type": "edit", "edited_action": edited}]}


@pytest.mark.parametrize("edit", [_writegate_edit, _langchain_edit])
def test_an_edit_asks_again_with_the_new_preview_and_runs_only_the_edited_arguments(
    wg: Writegate, edit: Callable[[Any, dict[str, Any]], dict[str, Any]]
) -> None:
    account = new_account()
    agent, config, first = start_payment(wg, account)
    answer = edit(first, {"account": account, "cents": 4000})
    (second,) = asked(agent.invoke(Command(resume=answer), config))
    assert second.value["proposal_id"] != first.value["proposal_id"]
    assert second.value["preview"]["fields"][1]["display"] == "40.00 EUR"
    assert payments(account) == 0
    out = agent.invoke(Command(resume=confirm(second)), config)
    assert [body["result"]["cents"] for body in tool_bodies(out)] == [4000]
    assert payments(account) == 1


def test_two_writes_in_one_turn_ask_one_question_each(wg: Writegate) -> None:
    first, second = new_account(), new_account()
    calls = [
        tool_call("pay", account=first, cents=100),
        tool_call("pay", account=second, cents=200),
    ]
    agent, config = agent_for(wg, calls, "ok"), run_config(thread())
    pending = asked(agent.invoke({"messages": [HumanMessage("pay both")]}, config))
    assert len(pending) == 2 and payments(first) + payments(second) == 0
    out = agent.invoke(Command(resume={item.id: confirm(item) for item in pending}), config)
    assert [body["status"] for body in tool_bodies(out)] == ["succeeded", "succeeded"]
    assert (payments(first), payments(second)) == (1, 1)


def test_the_same_write_twice_in_one_turn_asks_once_and_refuses_the_twin(wg: Writegate) -> None:
    account = new_account()
    first, twin = (
        tool_call("pay", account=account, cents=300),
        tool_call("pay", cents=300, account=account),
    )
    agent, config = agent_for(wg, [first, twin], "ok", "ok"), run_config(thread())
    out = agent.invoke({"messages": [HumanMessage("pay twice")]}, config)
    (question,) = asked(out)
    assert question.value["resource"] == f"account:{account}"
    out = agent.invoke(Command(resume={question.id: confirm(question)}), config)
    said = {
        m.tool_call_id: json.loads(str(m.content))
        for m in out["messages"]
        if isinstance(m, ToolMessage)
    }
    assert said[first["id"]]["status"] == "succeeded"
    assert said[twin["id"]]["code"] == "validation_failed"
    assert said[twin["id"]]["details"]["duplicate_of"] == first["id"]
    assert payments(account) == 1


def test_two_calls_sharing_an_id_are_both_refused(wg: Writegate) -> None:
    first, second = new_account(), new_account()
    shared = [
        tool_call("pay", account=first, cents=100),
        tool_call("pay", account=second, cents=200),
    ]
    shared[1]["id"] = shared[0]["id"]
    agent = agent_for(wg, shared, "ok")
    out = agent.invoke({"messages": [HumanMessage("pay both")]}, run_config(thread()))
    assert not asked(out)
    bodies = tool_bodies(out)
    assert [body["code"] for body in bodies] == ["validation_failed", "validation_failed"]
    assert payments(first) + payments(second) == 0


def test_a_read_runs_at_once_and_is_audited(wg: Writegate) -> None:
    account, thread_id = new_account(), thread()
    agent = agent_for(wg, [tool_call("balance", account=account)], "ok")
    out = agent.invoke({"messages": [HumanMessage("balance")]}, run_config(thread_id))
    assert tool_bodies(out) == [{"status": "ok", "account": account, "payments": 0}]
    with wg.runtime.pool.connection() as conn:
        rows = conn.execute(AUDIT_SQL, (thread_id, "balance")).fetchall()
    assert [(row["event"], row["status"]) for row in rows] == [("read", "succeeded")]


def test_a_plain_tool_passes_and_an_unregistered_write_tool_never_runs(wg: Writegate) -> None:
    calls = [tool_call("shout", text="hi"), tool_call("wipe", target="prod")]
    agent = agent_for(wg, calls, "ok")
    out = agent.invoke({"messages": [HumanMessage("go")]}, run_config(thread()))
    assert not asked(out)
    said = {m.name: m for m in out["messages"] if isinstance(m, ToolMessage)}
    assert said["shout"].content == "HI"
    assert json.loads(str(said["wipe"].content))["code"] == "unprotected"
    assert WIPED == []


def test_identity_comes_from_the_run_context_schema(wg: Writegate) -> None:
    account = new_account(owner="user_ctx")
    agent = agent_for(
        wg, [tool_call("pay", account=account, cents=5)], "ok", context_schema=Session
    )
    config = {"configurable": {"thread_id": thread()}}
    session = Session("user_ctx", TENANT)
    (interrupt,) = asked(agent.invoke({"messages": [HumanMessage("pay")]}, config, context=session))
    assert SEEN[-1].user_id == "user_ctx"
    out = agent.invoke(Command(resume=confirm(interrupt)), config, context=session)
    assert tool_bodies(out)[-1]["status"] == "succeeded"
    assert payments(account) == 1


def test_without_an_identity_the_run_fails_before_the_model_runs(wg: Writegate) -> None:
    model = scripted([tool_call("pay", account=new_account(), cents=5)], "ok")
    agent = create_agent(model, tools=[pay], middleware=[wg.middleware()])
    with pytest.raises(MissingIdentity):
        agent.invoke({"messages": [HumanMessage("pay")]}, {"configurable": {"thread_id": "x"}})
    assert model.calls == []


def test_the_user_is_never_taken_from_the_model_or_the_resume(wg: Writegate) -> None:
    account = new_account()
    agent, config, interrupt = start_payment(wg, account)
    forged = {**confirm(interrupt), "user_id": "user_other"}
    out = agent.invoke(Command(resume=forged), config)
    (again,) = asked(out)  # an unknown key is refused: the same question stands
    assert again.value["error"]["code"] == "invalid_decision"
    assert payments(account) == 0
    stolen = new_account(owner="user_other")  # the model names someone else's account
    agent = agent_for(wg, [tool_call("pay", account=stolen, cents=5)], "ok")
    out = agent.invoke({"messages": [HumanMessage("pay")]}, run_config(thread()))
    assert not asked(out) and tool_bodies(out)[-1]["code"] == "not_found"


async def _async_run(wg: Writegate, account: str) -> tuple[dict[str, Any], list[Any]]:
    loop_thread, validations = threading.get_ident(), len(THREADS)
    async with wg.async_checkpointer() as saver:
        agent = agent_for(
            wg, [tool_call("pay", account=account, cents=300)], "done", checkpointer=saver
        )
        config = run_config(thread())
        (interrupt,) = asked(await agent.ainvoke({"messages": [HumanMessage("pay")]}, config))
        assert payments(account) == 0
        resume = Command(resume=confirm(interrupt))
        chunks = [chunk async for chunk in agent.astream(resume, config)]
        # The ledger and the tool's validator ran off the event loop's thread.
        assert len(THREADS) > validations and loop_thread not in THREADS[validations:]
        return dict((await agent.aget_state(config)).values), chunks


def test_under_ainvoke_and_astream_with_the_async_saver(wg: Writegate) -> None:
    account = new_account()
    state, chunks = asyncio.run(_async_run(wg, account))
    assert chunks
    assert tool_bodies(state)[-1]["status"] == "succeeded"
    assert state["messages"][-1].content == "done"
    assert payments(account) == 1


def test_the_middleware_adds_no_step_to_the_agents_loop(wg: Writegate) -> None:
    # A before-model hook would be a node of its own: a step and its checkpoint more on
    # every model call. Reconciled news rides inside the model's node instead.
    plain = create_agent(scripted("ok"), tools=[pay, balance, shout, wipe])
    assert set(agent_for(wg, "ok").get_graph().nodes) == set(plain.get_graph().nodes)
