"""What LangChain's front ends send, exactly as they send it, on each of the three ways in.

- Agent Chat UI (src/lib/ensure-tool-responses.ts): before a new message it writes a
  ToolMessage of its own for every tool call whose model message no tool message
  follows, id `do-not-render-<uuid>`, the call's name, content
  "Successfully handled tool call.".
- Agent Chat UI's "Mark as Resolved": `Command(goto="__end__")`, run with the thread's
  head `checkpoint`, as its stream hook sends every run.
- Agent Inbox: a `HumanResponse` list (`accept`, `response`, `edit`, `ignore`), and its
  "Ignore" button, a state update with no values as `__end__`.

Effects are counted at the tests' own downstream (`pay`'s ledger).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.types import Command
from typer.testing import CliRunner

from tests.fakes.openai_server import FakeOpenAIServer, FakeToolCall
from tests.integration import test_boundaries as edge
from tests.integration.front_end_payloads import CLIENT_CONTENT, chat_input
from tests.integration.library_helpers import (
    TENANT,
    USER,
    asked,
    confirm,
    last_tool,
    new_account,
    payments,
    run_config,
)
from tests.integration.test_boundaries import ask_to_pay, audit_of, chat_model, proposal_row, thread
from writegate import Identity, Writegate
from writegate.__main__ import command

# test_boundaries' fixtures: its database, Writegate, the three ways in, the fake OpenAI.
db, wg, way, openai = edge.db, edge.wg, edge.way, edge.openai


def new_chat_message(graph: Any, config: Any, text: str) -> tuple[dict[str, Any], list[Any]]:
    """Send `text` as Agent Chat UI's composer does: its tool messages, then the message."""
    thread = [m.model_dump() for m in graph.get_state(config).values["messages"]]
    sent = chat_input(thread, text)
    return graph.invoke(sent, config), sent["messages"][:-1]


# -- 1. Agent Chat UI's own tool messages -----------------------------------------------


def test_a_client_written_tool_message_answers_nothing_and_the_proposal_is_cancelled(
    way: Any, wg: Writegate, db: str, openai: FakeOpenAIServer
) -> None:
    old, new = new_account(), new_account()
    graph, config = way(wg, chat_model(openai)), run_config(thread())
    openai.enqueue_tool_calls(FakeToolCall("pay", {"account": old, "cents": 100}, id="call_old"))
    (question,) = asked(graph.invoke({"messages": [HumanMessage("pay the old one")]}, config))
    first = question.value["proposal_id"]

    openai.enqueue_tool_calls(FakeToolCall("pay", {"account": new, "cents": 300}, id="call_new"))
    out, client_made = new_chat_message(graph, config, "actually pay the new one instead")
    assert [m["tool_call_id"] for m in client_made] == ["call_old"]

    # The proposal is cancelled as superseded, audited; nothing ran.
    assert proposal_row(db, first)["status"] == "cancelled"
    assert audit_of(db, first)[-1]["status"] == "cancelled"
    assert payments(old) == 0
    # The model read one tool message for the call, writegate's, and never the client's.
    assert openai.pending == 0
    sent = openai.chat_requests[-1]["messages"]
    assert CLIENT_CONTENT not in json.dumps(sent)
    at = next(i for i, m in enumerate(sent) if m.get("tool_calls"))
    assert [m["role"] for m in sent[at : at + 3]] == ["assistant", "tool", "user"]
    told = json.loads(sent[at + 1]["content"])
    assert sent[at + 1]["tool_call_id"] == "call_old" and told["code"] == "cancelled"
    # The thread keeps the client's message id (the UI hides it) with writegate's words.
    kept = {m.id: m for m in graph.get_state(config).values["messages"]}
    replaced = kept[client_made[0]["id"]]
    assert isinstance(replaced, ToolMessage) and replaced.tool_call_id == "call_old"
    assert json.loads(str(replaced.content))["code"] == "cancelled"
    # The new request is asked on its own; confirming it runs it, never the old one.
    (again,) = asked(out)
    assert again.value["proposal_id"] != first
    openai.enqueue_text("paid the new one")
    receipt = last_tool(graph.invoke(Command(resume=confirm(again)), config))
    assert receipt["status"] == "succeeded"
    assert (payments(old), payments(new)) == (0, 1)
    # The old question is gone: a late confirm of it runs nothing.
    late = graph.invoke(Command(resume=confirm(question)), config)
    assert not asked(late) and payments(old) == 0


def test_a_client_tool_message_after_an_executed_write_keeps_the_receipt(
    way: Any, wg: Writegate, db: str
) -> None:
    account = new_account()
    graph, config, question = ask_to_pay(way, wg, account, "paid", "anything else?")
    receipt = last_tool(graph.invoke(Command(resume=confirm(question)), config))
    assert receipt["status"] == "succeeded"
    out, client_made = new_chat_message(graph, config, "thanks")
    assert client_made == []  # the UI writes none where writegate answered
    assert last_tool(out)["status"] == "succeeded" and payments(account) == 1


# -- 2. "Mark as Resolved" with the run's checkpoint ---------------------------------------


@pytest.mark.parametrize("with_checkpoint", [True, False], ids=["checkpoint", "no checkpoint"])
def test_mark_as_resolved_as_agent_chat_ui_sends_it_cancels_the_question(
    way: Any, wg: Writegate, db: str, with_checkpoint: bool
) -> None:
    account = new_account()
    graph, config, question = ask_to_pay(way, wg, account, "ok", "ok")
    head = graph.get_state(config).config["configurable"]
    run = dict(config["configurable"])
    if with_checkpoint:
        run |= {"checkpoint_id": head["checkpoint_id"], "checkpoint_ns": ""}
    out = graph.invoke(Command(goto="__end__"), {"configurable": run})
    assert not asked(out)
    assert last_tool(out)["code"] == "cancelled"
    proposal_id = question.value["proposal_id"]
    assert proposal_row(db, proposal_id)["status"] == "cancelled"
    assert audit_of(db, proposal_id)[-1]["status"] == "cancelled"
    assert graph.get_state(config).interrupts == ()
    late = graph.invoke(Command(resume=confirm(question)), config)
    assert not asked(late) and payments(account) == 0


# -- 4. Agent Inbox's answers ---------------------------------------------------------------

REASON = "Wrong account: the customer meant the other one"


def inbox_edit(question: Any, **changes: Any) -> list[dict[str, Any]]:
    """Agent Inbox's edit: its card's action request, values as its form sends them."""
    args = {
        k: str(v)
        for k, v in {**question.value["action_requests"][0]["arguments"], **changes}.items()
    }
    return [{"type": "edit", "args": {"action": question.value["operation"], "args": args}}]


def test_agent_inbox_accept_approves_and_runs_once(way: Any, wg: Writegate, db: str) -> None:
    account = new_account()
    graph, config, question = ask_to_pay(way, wg, account, "paid")
    out = graph.invoke(Command(resume=[{"type": "accept", "args": None}]), config)
    assert last_tool(out)["status"] == "succeeded" and payments(account) == 1
    assert proposal_row(db, question.value["proposal_id"])["status"] == "executed"


def test_agent_inbox_response_declines_with_the_persons_reason(
    way: Any, wg: Writegate, db: str
) -> None:
    account = new_account()
    graph, config, question = ask_to_pay(way, wg, account, "understood")
    proposal_id = question.value["proposal_id"]
    said = last_tool(graph.invoke(Command(resume=[{"type": "response", "args": REASON}]), config))
    assert said["code"] == "declined" and said["person_said"] == REASON
    decline = audit_of(db, proposal_id)[-1]
    assert decline["status"] == "declined" and decline["result"]["person_said"] == REASON
    assert payments(account) == 0


def test_agent_inbox_edit_is_validated_and_asked_again(way: Any, wg: Writegate, db: str) -> None:
    account = new_account()
    graph, config, question = ask_to_pay(way, wg, account, "paid")
    # The card shows the arguments under Agent Inbox's key as under LangChain's.
    action = question.value["action_requests"][0]
    assert action["arguments"] == action["args"] == question.value["args"]
    (again,) = asked(graph.invoke(Command(resume=inbox_edit(question, cents=400)), config))
    assert again.value["proposal_id"] != question.value["proposal_id"]
    assert again.value["args"]["cents"] == 400 and payments(account) == 0
    out = graph.invoke(Command(resume=[{"type": "accept", "args": None}]), config)
    assert last_tool(out)["result"]["cents"] == 400 and payments(account) == 1


def test_agent_inbox_ignore_cancels(way: Any, wg: Writegate, db: str) -> None:
    account = new_account()
    graph, config, question = ask_to_pay(way, wg, account, "ok")
    out = graph.invoke(Command(resume=[{"type": "ignore", "args": None}]), config)
    assert last_tool(out)["code"] == "cancelled"
    proposal_id = question.value["proposal_id"]
    assert proposal_row(db, proposal_id)["status"] == "cancelled"
    assert audit_of(db, proposal_id)[-1]["user_id"] is not None
    late = graph.invoke(Command(resume=[{"type": "accept", "args": None}]), config)
    assert not asked(late) and payments(account) == 0


@pytest.mark.parametrize(
    "answer",
    [
        [{"type": "respond", "args": "hi"}],
        [{"type": "response", "args": None}],
        [{"type": "accept", "args": None}, {"type": "ignore", "args": None}],
        [],
        ["accept"],
    ],
    ids=["unknown type", "response without text", "two answers", "empty", "bare string"],
)
def test_anything_else_in_a_list_is_refused_naming_the_shapes(
    way: Any, wg: Writegate, db: str, answer: Any
) -> None:
    account = new_account()
    graph, config, question = ask_to_pay(way, wg, account, "paid")
    (again,) = asked(graph.invoke(Command(resume=answer), config))
    assert again.value["error"]["code"] == "invalid_decision"
    assert '"accept"' in again.value["error"]["message"]
    assert proposal_row(db, question.value["proposal_id"])["status"] == "awaiting_confirmation"
    assert payments(account) == 0


# -- 5. a thread ended or deleted outside writegate ------------------------------------------


def test_agent_inbox_ignore_state_update_leaves_an_orphan_an_operator_ends(
    way: Any, wg: Writegate, db: str
) -> None:
    account = new_account()
    graph, config, question = ask_to_pay(way, wg, account, "ok")
    proposal_id = question.value["proposal_id"]
    assert proposal_id not in [p.proposal_id for p in wg.orphaned(timedelta(0))]
    # Agent Inbox's "Ignore": no values, as `__end__`. Nothing of writegate runs.
    graph.update_state(config, None, as_node="__end__")
    assert graph.get_state(config).interrupts == ()
    assert proposal_id in [p.proposal_id for p in wg.orphaned(timedelta(0))]
    assert proposal_id not in [p.proposal_id for p in wg.orphaned(timedelta(hours=1))]
    ended = wg.end_orphaned("operator:test", timedelta(0))
    assert proposal_id in [p.proposal_id for p in ended]
    assert proposal_row(db, proposal_id)["status"] == "cancelled"
    row = audit_of(db, proposal_id)[-1]
    assert row["status"] == "cancelled" and row["user_id"] == "operator:test"
    assert row["result"]["reason"] == "thread_ended"
    assert proposal_id not in [p.proposal_id for p in wg.orphaned(timedelta(0))]
    late = graph.invoke(Command(resume=[{"type": "accept", "args": None}]), config)
    assert not asked(late) and payments(account) == 0


def test_ending_a_deleted_thread_cancels_only_its_owners_proposals(
    way: Any, wg: Writegate, db: str
) -> None:
    account = new_account()
    graph, config, question = ask_to_pay(way, wg, account, "ok")
    proposal_id, thread_id = question.value["proposal_id"], config["configurable"]["thread_id"]
    assert wg.end_thread(Identity("user_other", TENANT), thread_id, deleted=True) == []
    assert proposal_row(db, proposal_id)["status"] == "awaiting_confirmation"
    assert wg.end_thread(Identity(USER, TENANT), thread_id, deleted=True) == [proposal_id]
    row = audit_of(db, proposal_id)[-1]
    assert (row["status"], row["user_id"]) == ("cancelled", USER)
    assert row["result"]["reason"] == "thread_deleted"
    late = graph.invoke(Command(resume=confirm(question)), config)
    assert not asked(late) and payments(account) == 0


def test_writegate_orphans_lists_then_ends_them(wg: Writegate, db: str) -> None:
    graph, config, question = ask_to_pay(edge.hand_built, wg, new_account(), "ok")
    proposal_id = question.value["proposal_id"]
    graph.update_state(config, None, as_node="__end__")
    runner, app = CliRunner(), command()
    env = {"DATABASE_URL": db, "COLUMNS": "250"}
    listed = runner.invoke(app, ["orphans", "--older-than", "0"], env=env)
    assert listed.exit_code == 0 and proposal_id in listed.output
    assert proposal_row(db, proposal_id)["status"] == "awaiting_confirmation"
    ended = runner.invoke(app, ["orphans", "--older-than", "0", "--end", "--by", "ops"], env=env)
    assert ended.exit_code == 0 and "cancelled by ops" in ended.output
    assert proposal_row(db, proposal_id)["status"] == "cancelled"
    assert audit_of(db, proposal_id)[-1]["user_id"] == "ops"
