"""Resuming an approval: only a structured decision for the asked proposal counts.

Every test drives the real graph (Postgres checkpointer, real ledger, simulated
provider) with a scripted model and checks both what the model is told (the
ToolMessage) and what happened: refunds at the provider, proposals in the ledger.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command

from tests.integration.graph_helpers import (
    config,
    confirm,
    db_now,
    new_id,
    new_order,
    only_interrupt,
    open_graph_runtime,
    proposals,
    provider_amounts,
    refund_call,
    refunded_minor,
    refunds_at_provider,
    scripted_graph,
    start_refund,
    statuses,
    tokens_issued,
    tool_content,
    tool_messages,
)
from writegate.approval.errors import NotFound
from writegate.demo.runtime import open_demo
from writegate.runtime.wiring import Runtime

AWAITING = ["awaiting_confirmation"]


@pytest.fixture(scope="module")
def rt(create_database: Callable[[], str]) -> Iterator[Runtime]:
    with open_graph_runtime(create_database) as runtime:
        yield runtime


def _last_result(out: dict[str, Any]) -> tuple[ToolMessage, dict[str, Any]]:
    message = tool_messages(out)[-1]
    return message, tool_content(message)


def test_confirm_executes_once_and_a_second_confirm_changes_nothing(rt: Runtime) -> None:
    thread, order = new_id("t"), new_order(rt)
    graph, asked = start_refund(rt, thread, order)
    pid = asked.value["proposal_id"]
    assert refunds_at_provider(rt, order) == 0  # a tool call is a request, not a fact

    out = graph.invoke(Command(resume=confirm(pid)), config(thread))
    message, body = _last_result(out)
    assert message.status == "success" and body["status"] == "succeeded"
    assert body["result"]["amount_minor"] == 19900 and body["provider_ref"]
    assert out["messages"][-1].content == "done"
    assert refunds_at_provider(rt, order) == 1
    assert statuses(rt, thread) == ["executed"]

    # A double click: the thread is finished, so nothing runs and nothing is added.
    again = graph.invoke(Command(resume=confirm(pid)), config(thread))
    assert "__interrupt__" not in again
    assert len(again["messages"]) == len(out["messages"])
    assert refunds_at_provider(rt, order) == 1
    assert refunded_minor(rt, order) == 19900
    assert tokens_issued(rt, thread) == 1


@pytest.mark.parametrize("text", ["ok", "好的"])
def test_free_text_confirms_nothing_and_the_question_stands(rt: Runtime, text: str) -> None:
    thread, order = new_id("t"), new_order(rt)
    graph, asked = start_refund(rt, thread, order)
    pid = asked.value["proposal_id"]

    out = graph.invoke(Command(resume=text), config(thread))
    again = only_interrupt(out)
    assert again.value["error"]["code"] == "invalid_decision"
    assert again.value["proposal_id"] == pid
    assert statuses(rt, thread) == AWAITING and tokens_issued(rt, thread) == 0
    assert refunds_at_provider(rt, order) == 0 and tool_messages(out) == []

    # The same question is still open and a real decision still works, exactly once.
    done = graph.invoke(Command(resume=confirm(pid)), config(thread))
    assert tool_content(tool_messages(done)[-1])["status"] == "succeeded"
    assert refunds_at_provider(rt, order) == 1


@pytest.mark.parametrize("whose", ["unknown", "other_thread"])
def test_decision_naming_another_proposal_is_refused(rt: Runtime, whose: str) -> None:
    thread, order = new_id("t"), new_order(rt)
    graph, asked = start_refund(rt, thread, order)
    other_thread, other_order = new_id("t"), new_order(rt)
    if whose == "unknown":
        named = "prop_does_not_exist"
    else:
        named = start_refund(rt, other_thread, other_order)[1].value["proposal_id"]

    out = graph.invoke(Command(resume=confirm(named)), config(thread))
    again = only_interrupt(out)
    assert again.value["error"]["code"] == "invalid_decision"
    assert again.value["proposal_id"] == asked.value["proposal_id"]
    assert statuses(rt, thread) == AWAITING and tokens_issued(rt, thread) == 0
    if whose == "other_thread":
        assert statuses(rt, other_thread) == AWAITING
        assert tokens_issued(rt, other_thread) == 0
    assert refunds_at_provider(rt, order) == refunds_at_provider(rt, other_order) == 0


@pytest.mark.parametrize(
    ("resume", "code", "status"),
    [
        ({"action": "decline"}, "declined", "declined"),
        ({"action": "cancel"}, "cancelled", "cancelled"),
        ({"decisions": [{"type": "reject", "message": "no"}]}, "declined", "declined"),
    ],
)
def test_decline_and_cancel_are_distinct_outcomes(
    rt: Runtime, resume: dict[str, Any], code: str, status: str
) -> None:
    thread, order = new_id("t"), new_order(rt)
    graph, asked = start_refund(rt, thread, order)
    if "action" in resume:
        resume = {**resume, "proposal_id": asked.value["proposal_id"]}

    out = graph.invoke(Command(resume=resume), config(thread))
    message, body = _last_result(out)
    assert message.status == "error"
    assert body["code"] == code and body["retryable"] is False and "advice" in body
    assert "status" not in body
    assert out["messages"][-1].content == "done"
    assert statuses(rt, thread) == [status]
    assert refunds_at_provider(rt, order) == 0 and tokens_issued(rt, thread) == 0


def test_expiry_is_judged_on_the_server_clock_right_open(rt: Runtime) -> None:
    moment = [db_now(rt)]
    pinned = open_demo(rt.url, setup=False, clock=lambda: moment[0], max_connections=2).runtime
    try:
        thread, order = new_id("t"), new_order(rt)
        graph, asked = start_refund(pinned, thread, order)
        (proposal,) = proposals(rt, thread)
        moment[0] = proposal["expires_at"]  # exactly at expires_at it is already expired

        out = graph.invoke(Command(resume=confirm(asked.value["proposal_id"])), config(thread))
        message, body = _last_result(out)
        assert message.status == "error" and body["code"] == "proposal_expired"
        assert statuses(rt, thread) == ["expired"]
        assert refunds_at_provider(rt, order) == 0 and tokens_issued(rt, thread) == 0
    finally:
        pinned.close()


def _edit(pid: str, order: str, amount: int) -> dict[str, Any]:
    args = refund_call(order, amount)["args"]
    return {"action": "edit", "proposal_id": pid, "args": args}


def test_edit_asks_again_with_a_fresh_preview_then_runs_the_edited_amount(rt: Runtime) -> None:
    thread, order = new_id("t"), new_order(rt)
    graph, asked = start_refund(rt, thread, order)
    old = asked.value["proposal_id"]

    out = graph.invoke(Command(resume=_edit(old, order, 5000)), config(thread))
    fresh = only_interrupt(out).value
    assert fresh["proposal_id"] != old and "error" not in fresh
    assert fresh["args"]["amount_minor"] == 5000
    amount = next(f for f in fresh["preview"]["fields"] if f["name"] == "amount_minor")
    assert amount["value"] == 5000 and amount["display"] == "¥50.00"
    assert fresh["action_requests"][0]["args"]["amount_minor"] == 5000
    assert statuses(rt, thread) == ["superseded", "awaiting_confirmation"]
    assert refunds_at_provider(rt, order) == 0

    done = graph.invoke(Command(resume=confirm(fresh["proposal_id"])), config(thread))
    body = tool_content(tool_messages(done)[-1])
    assert body["status"] == "succeeded" and body["result"]["amount_minor"] == 5000
    assert provider_amounts(rt, order) == [5000]
    assert refunded_minor(rt, order) == 5000


def test_stale_resume_after_an_edit_never_answers_the_new_question(rt: Runtime) -> None:
    thread, order = new_id("t"), new_order(rt)
    graph, asked = start_refund(rt, thread, order)
    old = asked.value["proposal_id"]
    fresh = only_interrupt(graph.invoke(Command(resume=_edit(old, order, 5000)), config(thread)))
    new = fresh.value["proposal_id"]

    for stale in (confirm(old), {"action": "decline", "proposal_id": old}):
        out = graph.invoke(Command(resume=stale), config(thread))
        again = only_interrupt(out).value
        assert again["proposal_id"] == new and again["error"]["code"] == "invalid_decision"
        assert statuses(rt, thread) == ["superseded", "awaiting_confirmation"]
        assert tokens_issued(rt, thread) == 0 and refunds_at_provider(rt, order) == 0

    done = graph.invoke(Command(resume=confirm(new)), config(thread))
    assert tool_content(tool_messages(done)[-1])["status"] == "succeeded"
    assert provider_amounts(rt, order) == [5000]


def test_an_edit_that_changes_nothing_keeps_the_question(rt: Runtime) -> None:
    thread, order = new_id("t"), new_order(rt)
    graph, asked = start_refund(rt, thread, order)
    pid = asked.value["proposal_id"]
    unchanged = {**_edit(pid, order, 19900), "args": {**asked.value["args"]}}
    out = graph.invoke(Command(resume=unchanged), config(thread))
    again = only_interrupt(out).value
    assert again["proposal_id"] == pid
    assert statuses(rt, thread) == AWAITING

    done = graph.invoke(Command(resume=confirm(pid)), config(thread))
    assert tool_content(tool_messages(done)[-1])["status"] == "succeeded"
    assert refunds_at_provider(rt, order) == 1


class SimulatedCrash(Exception):
    """Stands for the process dying between the confirmation and the execution."""


def _crash_after_the_decision(rt: Runtime, patch: pytest.MonkeyPatch, where: str) -> str:
    """Make the process 'die' right after the confirm; the proposal's status it leaves.

    `two_steps`: the confirm committed on its own (as a client's confirm that hands out a
    token does), and the execution never started. `one_transaction`: inside the
    transaction that confirms and executes together, before its commit: nothing of it
    stays.
    """
    if where == "two_steps":

        def decide_then_crash(identity: Any, decision: Any, operation: Any = None, **_: Any) -> Any:
            rt.service.decide(identity, decision)
            raise SimulatedCrash

        patch.setattr(rt.executor, "confirm", decide_then_crash)
        return "confirmed"
    confirming = rt.service.confirming

    def confirming_then_crash(*args: Any, **kwargs: Any) -> Any:
        confirming(*args, **kwargs)
        raise SimulatedCrash

    patch.setattr(rt.service, "confirming", confirming_then_crash)
    return "awaiting_confirmation"


@pytest.mark.parametrize("where", ["two_steps", "one_transaction"])
@pytest.mark.parametrize("amount", [5000, 19900], ids=["edited", "edit_unchanged"])
def test_a_node_rerun_after_confirming_an_edit_executes_it_once(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch, amount: int, where: str
) -> None:
    thread, order = new_id("t"), new_order(rt)
    graph, asked = start_refund(rt, thread, order)
    edit = _edit(asked.value["proposal_id"], order, amount)
    current = only_interrupt(graph.invoke(Command(resume=edit), config(thread))).value

    with monkeypatch.context() as patch:
        left = _crash_after_the_decision(rt, patch, where)
        with pytest.raises(SimulatedCrash):
            graph.invoke(Command(resume=confirm(current["proposal_id"])), config(thread))
    assert statuses(rt, thread)[-1] == left and refunds_at_provider(rt, order) == 0

    # Resuming re-runs the approval node from its start, replaying edit and confirm.
    out = graph.invoke(None, config(thread))
    assert tool_content(tool_messages(out)[-1])["status"] == "succeeded"
    assert provider_amounts(rt, order) == [amount]
    assert statuses(rt, thread)[-1] == "executed"


def test_langchain_hitl_approve_is_bound_to_the_asked_proposal(rt: Runtime) -> None:
    thread, order = new_id("t"), new_order(rt)
    graph, _ = start_refund(rt, thread, order)
    out = graph.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config(thread))
    assert tool_content(tool_messages(out)[-1])["status"] == "succeeded"
    assert refunds_at_provider(rt, order) == 1 and statuses(rt, thread) == ["executed"]


def test_another_user_cannot_answer_by_resuming_the_thread(rt: Runtime) -> None:
    thread, order = new_id("t"), new_order(rt)
    graph, asked = start_refund(rt, thread, order)
    pid = asked.value["proposal_id"]

    with pytest.raises(NotFound):
        graph.invoke(Command(resume=confirm(pid)), config(thread, user_id="user_7"))
    assert statuses(rt, thread) == AWAITING and tokens_issued(rt, thread) == 0
    assert refunds_at_provider(rt, order) == 0

    # The intruder's answer must not linger: the owner's own decision is what counts.
    out = graph.invoke(Command(resume={"action": "decline", "proposal_id": pid}), config(thread))
    assert tool_content(tool_messages(out)[-1])["code"] == "declined"
    assert statuses(rt, thread) == ["declined"] and refunds_at_provider(rt, order) == 0


def test_a_user_id_argument_from_the_model_is_refused(rt: Runtime) -> None:
    thread, order = new_id("t"), new_order(rt, user_id="user_7")
    call = refund_call(order, 5000, user_id="user_7")
    graph = scripted_graph(rt, [call], "done")
    out = graph.invoke({"messages": [HumanMessage("refund it")]}, config(thread))
    assert "__interrupt__" not in out
    (message,) = tool_messages(out)
    body = tool_content(message)
    assert message.status == "error" and body["code"] == "validation_failed"
    assert "user_id" in body["message"]
    assert proposals(rt, thread) == [] and refunds_at_provider(rt, order) == 0


TOKEN_TRACES_SQL = """
SELECT (SELECT count(*) FROM checkpoint_writes WHERE position('wgt_'::bytea IN blob) > 0)
     + (SELECT count(*) FROM checkpoint_blobs
        WHERE blob IS NOT NULL AND position('wgt_'::bytea IN blob) > 0)
     + (SELECT count(*) FROM checkpoints WHERE checkpoint::text LIKE '%%wgt_%%') AS n
"""


def test_no_confirmation_secret_is_ever_written_to_a_checkpoint(rt: Runtime) -> None:
    thread, order = new_id("t"), new_order(rt)
    graph, asked = start_refund(rt, thread, order)
    out = graph.invoke(Command(resume=confirm(asked.value["proposal_id"])), config(thread))
    assert tool_content(tool_messages(out)[-1])["status"] == "succeeded"
    with rt.pool.connection() as conn:
        row = conn.execute(TOKEN_TRACES_SQL).fetchone()
    assert row is not None and row["n"] == 0  # the ledger keeps only the token's hash


APPROVE = {"decisions": [{"type": "approve"}]}


def _swap_pending_call(graph: Any, thread: str, call: dict[str, Any]) -> None:
    """Rewrite the pending AIMessage's tool call, as Studio lets a developer do."""
    messages = graph.get_state(config(thread)).values["messages"]
    asking = next(m for m in reversed(messages) if isinstance(m, AIMessage))
    swapped = AIMessage("", id=asking.id, tool_calls=[call])
    graph.update_state(config(thread), {"messages": [swapped]}, as_node="agent")


@pytest.mark.parametrize(("answer", "amounts"), [("approve", [19900]), ("reject", [])])
def test_unnamed_approve_never_answers_a_question_nobody_was_shown(
    rt: Runtime, answer: str, amounts: list[int]
) -> None:
    thread, order = new_id("t"), new_order(rt)
    graph, asked = start_refund(rt, thread, order, amount_minor=100)
    assert asked.value["args"]["amount_minor"] == 100
    _swap_pending_call(graph, thread, refund_call(order, 19900))

    # The ¥199.00 question is raised and would be answered in the same run: refused.
    out = graph.invoke(Command(resume=APPROVE), config(thread))
    shown = only_interrupt(out).value
    assert shown["args"]["amount_minor"] == 19900
    assert shown["error"]["code"] == "invalid_decision"
    assert shown["action_requests"][0]["description"].startswith("Refused")
    assert provider_amounts(rt, order) == [] and tool_messages(out) == []

    # Now it was shown; the person's next answer counts, and only that one.
    done = graph.invoke(Command(resume={"decisions": [{"type": answer}]}), config(thread))
    assert "__interrupt__" not in done
    assert provider_amounts(rt, order) == amounts
    assert refunded_minor(rt, order) == sum(amounts)


@pytest.mark.parametrize("where", ["in_the_decision", "beside_the_decisions"])
def test_langchain_decision_naming_another_proposal_is_refused(rt: Runtime, where: str) -> None:
    thread, order = new_id("t"), new_order(rt)
    graph, asked = start_refund(rt, thread, order)
    other_thread, other_order = new_id("t"), new_order(rt)
    other = start_refund(rt, other_thread, other_order)[1].value["proposal_id"]
    if where == "in_the_decision":
        resume: dict[str, Any] = {"decisions": [{"type": "approve", "proposal_id": other}]}
    else:
        resume = {**APPROVE, "proposal_id": other}

    out = graph.invoke(Command(resume=resume), config(thread))
    again = only_interrupt(out).value
    assert again["error"]["code"] == "invalid_decision"
    assert again["proposal_id"] == asked.value["proposal_id"]
    assert statuses(rt, thread) == statuses(rt, other_thread) == AWAITING
    assert tokens_issued(rt, thread) == tokens_issued(rt, other_thread) == 0
    assert refunds_at_provider(rt, order) == refunds_at_provider(rt, other_order) == 0

    # Naming the asked proposal itself is an answer like the writegate event.
    named = {"decisions": [{"type": "approve", "proposal_id": asked.value["proposal_id"]}]}
    done = graph.invoke(Command(resume=named), config(thread))
    assert tool_content(tool_messages(done)[-1])["status"] == "succeeded"
    assert refunds_at_provider(rt, order) == 1


AUDIT_EVENTS_SQL = """
SELECT event, status FROM writegate.audit WHERE proposal_id = %s ORDER BY audit_id
"""


def test_mark_as_resolved_cancels_every_pending_question_and_ends_the_run(rt: Runtime) -> None:
    thread, first, second = new_id("t"), new_order(rt), new_order(rt)
    calls = [refund_call(first, 100), refund_call(second, 200)]
    graph = scripted_graph(rt, calls, "noted: nothing was refunded")
    out = graph.invoke({"messages": [HumanMessage("refund both")]}, config(thread))
    assert len(out["__interrupt__"]) == 2

    # Agent Chat UI's "Mark as Resolved" sends exactly this, and no answer.
    out = graph.invoke(Command(goto="__end__"), config(thread))
    assert "__interrupt__" not in out
    assert graph.get_state(config(thread)).next == ()
    results = [tool_content(m) for m in tool_messages(out)]
    assert sorted(r["code"] for r in results) == ["cancelled", "cancelled"]
    assert isinstance(out["messages"][-1], ToolMessage)  # the run ended without the model
    assert statuses(rt, thread) == ["cancelled", "cancelled"]
    assert refunds_at_provider(rt, first) == refunds_at_provider(rt, second) == 0
    with rt.pool.connection() as conn:
        for row in proposals(rt, thread):
            events = conn.execute(AUDIT_EVENTS_SQL, (row["proposal_id"],)).fetchall()
            assert events[-1]["status"] == "cancelled"

    # The model reads the cancellations with the thread's next message.
    later = graph.invoke({"messages": [HumanMessage("ok")]}, config(thread))
    assert later["messages"][-1].content == "noted: nothing was refunded"
    assert tokens_issued(rt, thread) == 0 and refunds_at_provider(rt, first) == 0
