"""Hostile text in a model's tool call or an edit: refused as validation_failed, and the
thread stays usable.

PostgreSQL's jsonb has no NUL, a lone surrogate has no UTF-8 form and deep nesting
exhausts recursion; each is refused by canonicalization before any row is written.
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
    new_id,
    new_order,
    only_interrupt,
    open_graph_runtime,
    proposals,
    refund_call,
    refunds_at_provider,
    scripted_graph,
    start_refund,
    statuses,
    tool_content,
    tool_messages,
)
from writegate.runtime.wiring import Runtime


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


HOSTILE = {
    "nul": {"reason": "broken\u0000"},
    "escape": {"reason": "\u001b[2Kok"},
    "surrogate": {"reason": "broken\ud800"},
    "nul_key": {"extra\u0000": "x"},
    "deep": {"extra": _nested(700)},
}


@pytest.fixture(scope="module")
def rt(create_database: Callable[[], str]) -> Iterator[Runtime]:
    with open_graph_runtime(create_database) as runtime:
        yield runtime


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_model_arguments_are_refused_and_the_thread_goes_on(rt: Runtime, case: str) -> None:
    thread, order = new_id("t"), new_order(rt)
    hostile = refund_call(order, **HOSTILE[case])
    graph = scripted_graph(rt, [hostile], "refused", [refund_call(order)], "done")
    out = graph.invoke({"messages": [HumanMessage("refund it")]}, config(thread))
    body = tool_content(tool_messages(out)[-1])
    assert body["code"] == "validation_failed" and body["retryable"] is False
    assert proposals(rt, thread) == []

    # A later, ordinary message on the same thread works.
    out = graph.invoke({"messages": [HumanMessage("refund it, plainly")]}, config(thread))
    pid = only_interrupt(out).value["proposal_id"]
    out = graph.invoke(Command(resume=confirm(pid)), config(thread))
    assert tool_content(tool_messages(out)[-1])["status"] == "succeeded"
    assert refunds_at_provider(rt, order) == 1


@pytest.mark.parametrize("case", ["nul", "escape", "nul_key"])
def test_hostile_edit_is_refused_and_the_question_stands(rt: Runtime, case: str) -> None:
    thread, order = new_id("t"), new_order(rt)
    graph, asked = start_refund(rt, thread, order)
    pid = asked.value["proposal_id"]
    args = {**asked.value["args"], **HOSTILE[case]}
    edit = {"action": "edit", "proposal_id": pid, "args": args}
    out = graph.invoke(Command(resume=edit), config(thread))
    again = only_interrupt(out).value
    assert again["proposal_id"] == pid
    assert again["error"]["code"] == "validation_failed"
    assert statuses(rt, thread) == ["awaiting_confirmation"]

    out = graph.invoke(Command(resume=confirm(pid)), config(thread))
    assert tool_content(tool_messages(out)[-1])["status"] == "succeeded"
    assert refunds_at_provider(rt, order) == 1
