"""Several writes in one model turn: one proposal and one interrupt each.

Answered together (one resume map) or one at a time, every write runs exactly once
and no decision is asked twice; two calls sharing one tool-call id are both refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from tests.integration.graph_helpers import (
    config,
    confirm,
    interrupts,
    new_id,
    new_order,
    only_interrupt,
    open_graph_runtime,
    proposals,
    refund_call,
    refunds_at_provider,
    scripted_graph,
    statuses,
    ticket_call,
    tickets_titled,
    tool_content,
    tool_messages,
)
from writegate.runtime.wiring import Runtime


@pytest.fixture(scope="module")
def rt(create_database: Callable[[], str]) -> Iterator[Runtime]:
    with open_graph_runtime(create_database) as runtime:
        yield runtime


def _start_two(rt: Runtime, thread: str, calls: list[dict[str, Any]]) -> tuple[Any, list[Any]]:
    graph = scripted_graph(rt, calls, "done")
    out = graph.invoke({"messages": [HumanMessage("do both")]}, config(thread))
    asked = interrupts(out)
    assert len(asked) == 2
    assert len({i.id for i in asked}) == 2
    assert len({i.value["proposal_id"] for i in asked}) == 2
    by_call = {i.value["tool_call_id"]: i for i in asked}
    assert set(by_call) == {c["id"] for c in calls}
    return graph, [by_call[c["id"]] for c in calls]


def _results(out: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m.tool_call_id: tool_content(m) for m in tool_messages(out)}


def test_two_writes_answered_together_run_once_each(rt: Runtime) -> None:
    thread, order, title = new_id("t"), new_order(rt), new_id("Printer jams")
    calls = [refund_call(order), ticket_call(title)]
    graph, asked = _start_two(rt, thread, calls)
    assert statuses(rt, thread) == ["awaiting_confirmation"] * 2
    assert refunds_at_provider(rt, order) == 0 and tickets_titled(rt, title) == 0

    answers = {i.id: confirm(i.value["proposal_id"]) for i in asked}
    out = graph.invoke(Command(resume=answers), config(thread))
    assert "__interrupt__" not in out
    results = _results(out)
    assert [results[c["id"]]["status"] for c in calls] == ["succeeded", "succeeded"]
    assert out["messages"][-1].content == "done"
    assert refunds_at_provider(rt, order) == 1 and tickets_titled(rt, title) == 1
    assert statuses(rt, thread) == ["executed"] * 2

    # Replaying the same map on the finished thread runs nothing again.
    graph.invoke(Command(resume=answers), config(thread))
    assert refunds_at_provider(rt, order) == 1 and tickets_titled(rt, title) == 1


def test_two_writes_answered_one_at_a_time(rt: Runtime) -> None:
    thread, first_order, second_order = new_id("t"), new_order(rt), new_order(rt)
    calls = [refund_call(first_order), refund_call(second_order, 5000)]
    graph, (first, second) = _start_two(rt, thread, calls)

    out = graph.invoke(
        Command(resume={first.id: confirm(first.value["proposal_id"])}), config(thread)
    )
    # Only the unanswered question is still asked; the first is not asked again.
    still = only_interrupt(out)
    assert still.value["proposal_id"] == second.value["proposal_id"]
    assert "error" not in still.value
    # The confirmed write ran at once: it does not wait for the other answer (which
    # may come much later, or never).
    by_id = {p["proposal_id"]: p["status"] for p in proposals(rt, thread)}
    assert by_id[first.value["proposal_id"]] == "executed"
    assert by_id[second.value["proposal_id"]] == "awaiting_confirmation"
    assert refunds_at_provider(rt, first_order) == 1
    assert refunds_at_provider(rt, second_order) == 0

    out = graph.invoke(
        Command(resume={still.id: confirm(second.value["proposal_id"])}), config(thread)
    )
    assert "__interrupt__" not in out
    results = _results(out)
    assert [results[c["id"]]["status"] for c in calls] == ["succeeded", "succeeded"]
    assert refunds_at_provider(rt, first_order) == 1
    assert refunds_at_provider(rt, second_order) == 1
    assert statuses(rt, thread) == ["executed"] * 2


def test_a_decline_and_a_confirm_in_one_map_stay_separate(rt: Runtime) -> None:
    thread, first_order, second_order = new_id("t"), new_order(rt), new_order(rt)
    calls = [refund_call(first_order), refund_call(second_order)]
    graph, (first, second) = _start_two(rt, thread, calls)
    answers = {
        first.id: {"action": "decline", "proposal_id": first.value["proposal_id"]},
        second.id: confirm(second.value["proposal_id"]),
    }
    results = _results(graph.invoke(Command(resume=answers), config(thread)))
    assert results[calls[0]["id"]]["code"] == "declined"
    assert results[calls[1]["id"]]["status"] == "succeeded"
    assert refunds_at_provider(rt, first_order) == 0
    assert refunds_at_provider(rt, second_order) == 1


def test_two_calls_sharing_one_id_are_both_refused(rt: Runtime) -> None:
    thread, first_order, second_order = new_id("t"), new_order(rt), new_order(rt)
    shared = new_id("call")
    calls = [refund_call(first_order, call_id=shared), refund_call(second_order, call_id=shared)]
    graph = scripted_graph(rt, calls, "done")
    out = graph.invoke({"messages": [HumanMessage("do both")]}, config(thread))
    assert "__interrupt__" not in out
    refused = tool_messages(out)
    assert len(refused) == 2
    assert all(m.tool_call_id == shared and m.status == "error" for m in refused)
    assert [tool_content(m)["code"] for m in refused] == ["validation_failed"] * 2
    assert proposals(rt, thread) == []
    assert refunds_at_provider(rt, first_order) == refunds_at_provider(rt, second_order) == 0


def test_a_plain_resume_cannot_answer_one_of_several_questions(rt: Runtime) -> None:
    thread, first_order, second_order = new_id("t"), new_order(rt), new_order(rt)
    calls = [refund_call(first_order), refund_call(second_order)]
    graph, (first, _) = _start_two(rt, thread, calls)
    with pytest.raises(RuntimeError, match="multiple pending interrupts"):
        graph.invoke(Command(resume=confirm(first.value["proposal_id"])), config(thread))
    assert statuses(rt, thread) == ["awaiting_confirmation"] * 2
    assert refunds_at_provider(rt, first_order) == refunds_at_provider(rt, second_order) == 0


def test_the_same_write_twice_in_one_turn_is_proposed_once(rt: Runtime) -> None:
    thread, order = new_id("t"), new_order(rt)
    calls = [refund_call(order, 5000), refund_call(order, 5000)]
    graph = scripted_graph(rt, calls, "done")
    out = graph.invoke({"messages": [HumanMessage("refund it")]}, config(thread))
    asked = only_interrupt(out)
    assert asked.value["tool_call_id"] == calls[0]["id"]
    assert len(proposals(rt, thread)) == 1
    twin = tool_content(tool_messages(out)[0])
    assert twin["code"] == "validation_failed"
    assert twin["details"]["duplicate_of"] == calls[0]["id"]

    out = graph.invoke(Command(resume=confirm(asked.value["proposal_id"])), config(thread))
    results = _results(out)
    assert results[calls[0]["id"]]["status"] == "succeeded"
    assert results[calls[1]["id"]]["code"] == "validation_failed"
    assert refunds_at_provider(rt, order) == 1


def test_a_resume_streams_every_question_it_leaves_open(rt: Runtime) -> None:
    # The HTTP service takes a decision's open questions from its run's stream instead of
    # reading the checkpoint after it: the stream must name each one, those of the
    # same step that were not answered included.
    thread, first_order, second_order = new_id("t"), new_order(rt), new_order(rt)
    calls = [refund_call(first_order), refund_call(second_order, 5000)]
    graph, (first, second) = _start_two(rt, thread, calls)

    answer = Command(resume={first.id: confirm(first.value["proposal_id"])})
    streamed = [
        intr
        for mode, chunk in graph.stream(answer, config(thread), stream_mode=["messages", "updates"])
        if mode == "updates"
        for intr in chunk.get("__interrupt__", ())
    ]
    left = graph.get_state(config(thread)).interrupts
    assert [(i.id, i.value) for i in streamed] == [(i.id, i.value) for i in left]
    assert [i.value["proposal_id"] for i in streamed] == [second.value["proposal_id"]]
