"""Where a user's world begins, for each of the three ways in (`wg.tool_node()` in a
hand-built graph, `wg.middleware()` in `create_agent`, `wg.build_agent()`): another
tenant's user, a new message while a question waits, a tool-call id a provider reuses,
"Mark as Resolved", a person's reason for rejecting, and a malformed answer.

Effects are counted at the tests' own downstream (`pay`'s ledger); what the model was
sent is read off a fake OpenAI-compatible server that, like OpenAI, refuses a history
with an unanswered tool call.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.types import Command
from psycopg.rows import dict_row

from tests.fakes.openai_server import FakeOpenAIServer, FakeToolCall
from tests.integration.library_helpers import (
    TENANT,
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
from writegate import Writegate, WritegateError


@pytest.fixture(scope="module")
def db(create_database: Callable[[], str]) -> str:
    return create_database()


@pytest.fixture(scope="module")
def wg(db: str) -> Iterator[Writegate]:
    with Writegate.open(db, tools=[pay, balance]) as gate:
        yield gate


def middleware(wg: Writegate, model: Any) -> Any:
    return create_agent(
        model, tools=[pay, balance], middleware=[wg.middleware()], checkpointer=wg.checkpointer
    )


def build_agent(wg: Writegate, model: Any) -> Any:
    return wg.build_agent(model)


WAYS = {"tool_node": hand_built, "middleware": middleware, "build_agent": build_agent}


@pytest.fixture(params=sorted(WAYS))
def way(request: pytest.FixtureRequest) -> Callable[[Writegate, Any], Any]:
    return WAYS[request.param]


def thread() -> str:
    return f"edge_{secrets.token_hex(5)}"


def ask_to_pay(way: Any, wg: Writegate, account: str, *replies: Any) -> tuple[Any, Any, Any]:
    model = scripted([tool_call("pay", account=account, cents=250)], *replies)
    graph, config = way(wg, model), run_config(thread())
    (question,) = asked(graph.invoke({"messages": [HumanMessage("pay")]}, config))
    return graph, config, question


def proposal_row(db: str, proposal_id: str) -> dict[str, Any]:
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT status, tenant_id, subject FROM writegate.proposals WHERE proposal_id = %s",
            (proposal_id,),
        ).fetchone()
    assert row is not None
    return {"status": row[0], "tenant_id": row[1], "subject": row[2]}


def audit_of(db: str, proposal_id: str) -> list[dict[str, Any]]:
    with psycopg.connect(db, row_factory=dict_row) as conn:
        return conn.execute(
            "SELECT event, status, tenant_id, user_id, result FROM writegate.audit "
            "WHERE proposal_id = %s ORDER BY audit_id",
            (proposal_id,),
        ).fetchall()


# -- 3. another identity on the owner's thread ------------------------------------------

INTRUDERS = {
    "same user, other tenant": (USER, "tenant_other"),
    "other user, same tenant": ("user_other", TENANT),
    "other user, other tenant": ("user_other", "tenant_other"),
}


@pytest.mark.parametrize("intruder", sorted(INTRUDERS))
def test_another_identity_answering_the_owners_question_learns_nothing_and_changes_nothing(
    way: Any, wg: Writegate, db: str, intruder: str
) -> None:
    account = new_account()
    graph, config, question = ask_to_pay(way, wg, account, "paid", "paid")
    proposal_id = question.value["proposal_id"]
    audit_before = audit_of(db, proposal_id)
    user, tenant = INTRUDERS[intruder]
    theirs = {"configurable": {**config["configurable"], "user_id": user, "tenant_id": tenant}}
    with pytest.raises(WritegateError) as refused:
        graph.invoke(Command(resume=confirm(question)), theirs)
    assert refused.value.code == "not_found"
    told = json.dumps(refused.value.to_dict()) + str(refused.value)
    assert proposal_id not in told and account not in told
    # Nothing changed: the proposal, its audit, the owner's question; no payment.
    assert proposal_row(db, proposal_id)["status"] == "awaiting_confirmation"
    assert audit_of(db, proposal_id) == audit_before
    assert [i.value["proposal_id"] for i in graph.get_state(config).interrupts] == [proposal_id]
    assert payments(account) == 0
    receipt = last_tool(graph.invoke(Command(resume=confirm(question)), config))
    assert receipt["status"] == "succeeded"
    assert payments(account) == 1


# -- 4. a new user message while a question waits ----------------------------------------


@pytest.fixture
def openai() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


def chat_model(server: FakeOpenAIServer) -> ChatOpenAI:
    return ChatOpenAI(
        model="gpt-4o-mini", base_url=server.base_url, api_key="test-key", max_retries=0
    )


def test_a_new_message_while_a_question_waits_cancels_it_before_the_model_runs(
    way: Any, wg: Writegate, db: str, openai: FakeOpenAIServer
) -> None:
    old, new = new_account(), new_account()
    graph, config = way(wg, chat_model(openai)), run_config(thread())
    openai.enqueue_tool_calls(FakeToolCall("pay", {"account": old, "cents": 100}, id="call_old"))
    (question,) = asked(graph.invoke({"messages": [HumanMessage("pay the old one")]}, config))
    first = question.value["proposal_id"]

    openai.enqueue_tool_calls(FakeToolCall("pay", {"account": new, "cents": 300}, id="call_new"))
    out = graph.invoke({"messages": [HumanMessage("actually pay the new one instead")]}, config)

    # The model ran once more, on a history OpenAI accepts (the fake refuses any other),
    # where the waiting call is answered, as cancelled, right after the call itself.
    assert openai.pending == 0
    sent = openai.chat_requests[-1]["messages"]
    at = next(i for i, m in enumerate(sent) if m.get("tool_calls"))
    assert [m["role"] for m in sent[at : at + 3]] == ["assistant", "tool", "user"]
    assert sent[at + 1]["tool_call_id"] == "call_old"
    assert json.loads(sent[at + 1]["content"])["code"] == "cancelled"
    # The new request has a question of its own; the old proposal is cancelled, audited.
    (again,) = asked(out)
    assert again.value["proposal_id"] != first and again.value["args"]["account"] == new
    assert proposal_row(db, first)["status"] == "cancelled"
    assert audit_of(db, first)[-1]["status"] == "cancelled"
    # The thread stays usable: the new one runs once, the old one never.
    openai.enqueue_text("paid the new one")
    receipt = last_tool(graph.invoke(Command(resume=confirm(again)), config))
    assert receipt["status"] == "succeeded"
    assert (payments(old), payments(new)) == (0, 1)
    openai.enqueue_text("anything else?")
    graph.invoke({"messages": [HumanMessage("thanks")]}, config)  # a valid history still
    assert openai.pending == 0


# -- 5. a tool-call id reused in a later turn -----------------------------------------


def test_a_tool_call_id_reused_in_a_later_turn_is_a_new_request(way: Any, wg: Writegate) -> None:
    account = new_account()

    def call(cents: int) -> dict[str, Any]:
        args = {"account": account, "cents": cents}
        return {"name": "pay", "args": args, "id": "call_0", "type": "tool_call"}

    model = scripted([call(5)], "paid", [call(5)], "paid again", [call(7)], "paid 7")
    graph, config = way(wg, model), run_config(thread())
    for turn, cents in enumerate((5, 5, 7), start=1):
        out = graph.invoke({"messages": [HumanMessage(f"pay {cents}")]}, config)
        (question,) = asked(out)  # asked every time: never an old receipt, never a conflict
        assert question.value["args"]["cents"] == cents
        assert payments(account) == turn - 1
        receipt = last_tool(graph.invoke(Command(resume=confirm(question)), config))
        assert receipt["status"] == "succeeded" and receipt["result"]["cents"] == cents
        assert payments(account) == turn


# -- 6. "Mark as Resolved" ---------------------------------------------------------------


def test_mark_as_resolved_cancels_the_question_on_every_way_in(
    way: Any, wg: Writegate, db: str
) -> None:
    account = new_account()
    graph, config, question = ask_to_pay(way, wg, account, "ok", "ok")
    out = graph.invoke(Command(goto="__end__"), config)
    assert not asked(out)
    said = last_tool(out)
    assert said["code"] == "cancelled"
    assert proposal_row(db, question.value["proposal_id"])["status"] == "cancelled"
    assert graph.get_state(config).interrupts == ()
    assert payments(account) == 0
    # A confirm that comes after it runs nothing.
    late = graph.invoke(Command(resume=confirm(question)), config)
    assert not asked(late) and payments(account) == 0


# -- 7. the person's reason for rejecting -------------------------------------------------

REASON = "Wrong order: customer meant ord_1002"


@pytest.mark.parametrize("shape", ["langchain", "writegate"])
def test_the_persons_reason_for_rejecting_reaches_the_model_and_the_audit(
    way: Any, wg: Writegate, db: str, shape: str
) -> None:
    account = new_account()
    graph, config, question = ask_to_pay(way, wg, account, "understood")
    proposal_id = question.value["proposal_id"]
    answer = (
        {"decisions": [{"type": "reject", "message": REASON}]}
        if shape == "langchain"
        else {"action": "decline", "proposal_id": proposal_id, "reason": REASON}
    )
    said = last_tool(graph.invoke(Command(resume=answer), config))
    assert said["code"] == "declined"
    assert said["person_said"] == REASON  # marked as the person's own words
    decline = audit_of(db, proposal_id)[-1]
    assert decline["status"] == "declined" and decline["result"]["person_said"] == REASON
    assert payments(account) == 0


@pytest.mark.parametrize(
    ("reason", "code"),
    [("bad\x00reason", "validation_failed"), ("x" * 2001, "invalid_decision")],
    ids=["control character", "too long"],
)
def test_a_reason_that_breaks_the_text_rules_is_refused_and_the_question_stands(
    way: Any, wg: Writegate, reason: str, code: str
) -> None:
    account = new_account()
    graph, config, _ = ask_to_pay(way, wg, account, "ok")
    out = graph.invoke(
        Command(resume={"decisions": [{"type": "reject", "message": reason}]}), config
    )
    (again,) = asked(out)
    assert again.value["error"]["code"] == code
    assert payments(account) == 0


# -- 9. a malformed answer ---------------------------------------------------------------


def test_a_malformed_answer_is_told_which_shapes_are_accepted(way: Any, wg: Writegate) -> None:
    account = new_account()
    graph, config, question = ask_to_pay(way, wg, account, "ok")
    (again,) = asked(graph.invoke(Command(resume={"type": "approve"}), config))
    error = again.value["error"]
    assert error["code"] == "invalid_decision"
    message = error["message"]
    assert "discriminator" not in message
    for accepted in ('"action"', '"confirm"', '"decisions"', '"approve"', '"reject"', '"edit"'):
        assert accepted in message
    assert question.value["proposal_id"] in message  # the example answers this very question
    assert payments(account) == 0
