"""An unknown outcome, reconciled later, reaches the thread on its next turn — once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from langgraph.types import Command

from tests.app_db import setup_app
from tests.integration.graph_helpers import (
    config,
    confirm,
    interrupts,
    new_id,
    new_order,
    only_interrupt,
    provider_amounts,
    refund_call,
    refunds_at_provider,
    scripted,
    tool_content,
    tool_messages,
)
from writegate.approval.execution import RetryPolicy
from writegate.approval.reconcile import Reconciler
from writegate.checkpoints.ops import PgBacklog
from writegate.demo.faults import FaultScript
from writegate.demo.provider import SimulatedProvider
from writegate.demo.runtime import open_demo
from writegate.demo.scripted import DemoChatModel as ScriptedChatModel
from writegate.graph.build import build_graph
from writegate.graph.settled import MARK
from writegate.runtime.wiring import Runtime
from writegate.runtime.writegate import Writegate

NO_WAIT = RetryPolicy(base_delay=0.0)


@pytest.fixture(scope="module")
def faults() -> FaultScript:
    return FaultScript()


@pytest.fixture(scope="module")
def rt(create_database: Callable[[], str], faults: FaultScript) -> Iterator[Runtime]:
    url = create_database()
    setup_app(url)
    runtime = open_demo(
        url, setup=False, retry=NO_WAIT, provider=SimulatedProvider(url, faults=faults)
    ).runtime
    try:
        yield runtime
    finally:
        runtime.close()


def test_a_reconciled_unknown_write_is_reported_on_the_next_turn_once(
    rt: Runtime, faults: FaultScript
) -> None:
    order, thread = new_order(rt), new_id("th")
    faults.reset([f"{order}=timeout_after*3"])  # applied, but every answer lost
    graph = build_graph(
        rt,
        model=scripted([refund_call(order)], "checking", "noted", "noted again", "welcome"),
        checkpointer=rt.checkpointer,
    )
    out = graph.invoke({"messages": [HumanMessage(f"refund {order}")]}, config(thread))
    out = graph.invoke(
        Command(resume=confirm(only_interrupt(out).value["proposal_id"])), config(thread)
    )
    unknown = tool_content(tool_messages(out)[-1])
    assert unknown["code"] == "outcome_unknown" and refunds_at_provider(rt, order) == 1

    out = graph.invoke({"messages": [HumanMessage("did it go through?")]}, config(thread))
    assert not [m for m in out["messages"] if isinstance(m, SystemMessage)]  # not settled yet

    settled = Reconciler(rt.service, PgBacklog(rt.pool), retry=NO_WAIT).drain()
    assert settled and refunds_at_provider(rt, order) == 1  # found by key, not re-sent

    out = graph.invoke({"messages": [HumanMessage("and now?")]}, config(thread))
    notes = [m for m in out["messages"] if isinstance(m, SystemMessage)]
    assert (
        len(notes) == 1 and notes[0].additional_kwargs[MARK] == unknown["details"]["execution_id"]
    )
    assert '"status":"succeeded"' in str(notes[0].content)
    out = graph.invoke({"messages": [HumanMessage("thanks")]}, config(thread))
    assert len([m for m in out["messages"] if isinstance(m, SystemMessage)]) == 1


# -- outcomes the reconciler finishes: a 503, a 429, an unknown --------------------------

REFUND_199 = "refund {order} 199.00 because it arrived broken"
WILL_BE_RECONCILED = [
    ("unavailable*3", "temporarily_unavailable"),
    ("rate_limited*3", "rate_limited"),
    ("timeout_after*3", "outcome_unknown"),
]


def _person_confirms_whatever_is_asked(graph: Any, out: dict[str, Any], thread: str) -> Any:
    """The person confirms each approval the graph asks for, as in the reported case."""
    while interrupts(out):
        proposal_id = only_interrupt(out).value["proposal_id"]
        out = graph.invoke(Command(resume=confirm(proposal_id)), config(thread))
    return out


def _notes(out: dict[str, Any]) -> list[SystemMessage]:
    return [m for m in out["messages"] if isinstance(m, SystemMessage)]


@pytest.mark.parametrize(("fault", "code"), WILL_BE_RECONCILED[:2], ids=["503", "429"])
def test_a_refund_that_met_a_transient_refusal_is_reported_once_and_not_paid_twice(
    rt: Runtime, faults: FaultScript, fault: str, code: str
) -> None:
    order, thread = new_order(rt, payable_minor=39900), new_id("th")
    faults.reset([f"{order}={fault}"])  # every attempt of the first execution refused
    graph = build_graph(rt, model=ScriptedChatModel(), checkpointer=rt.checkpointer)

    def asked() -> dict[str, Any]:
        return {"messages": [HumanMessage(REFUND_199.format(order=order))]}

    out = _person_confirms_whatever_is_asked(graph, graph.invoke(asked(), config(thread)), thread)
    refused = tool_content(tool_messages(out)[-1])
    assert refused["code"] == code and provider_amounts(rt, order) == []

    assert Reconciler(rt.service, PgBacklog(rt.pool), retry=NO_WAIT).drain()
    assert provider_amounts(rt, order) == [19900]  # the reconciler finished it: one refund

    # The person asks again; the model must first hear that the refund went through.
    out = graph.invoke(asked(), config(thread))
    out = _person_confirms_whatever_is_asked(graph, out, thread)
    assert provider_amounts(rt, order) == [19900]
    notes = _notes(out)
    assert (
        len(notes) == 1 and notes[0].additional_kwargs[MARK] == refused["details"]["execution_id"]
    )
    assert '"status":"succeeded"' in str(notes[0].content)
    out = graph.invoke({"messages": [HumanMessage("thanks")]}, config(thread))
    assert len(_notes(out)) == 1  # told once


@pytest.mark.parametrize(("fault", "code"), WILL_BE_RECONCILED, ids=["503", "429", "unknown"])
def test_an_outcome_being_reconciled_tells_the_model_not_to_propose_it_again(
    rt: Runtime, faults: FaultScript, fault: str, code: str
) -> None:
    order, thread = new_order(rt, payable_minor=39900), new_id("th")
    faults.reset([f"{order}={fault}"])
    graph = build_graph(rt, model=ScriptedChatModel(), checkpointer=rt.checkpointer)

    def asked() -> dict[str, Any]:
        return {"messages": [HumanMessage(REFUND_199.format(order=order))]}

    out = _person_confirms_whatever_is_asked(graph, graph.invoke(asked(), config(thread)), thread)
    first = tool_content(tool_messages(out)[-1])
    assert first["code"] == code
    assert "do not propose" in first.get("advice", "").lower()

    # While it is open, the same request proposed again is refused, with the same advice,
    # and nobody is asked to confirm it.
    out = graph.invoke(asked(), config(thread))
    assert not interrupts(out)
    again = tool_content(tool_messages(out)[-1])
    assert again["code"] in ("in_progress", "outcome_unknown")
    assert again["details"]["execution_id"] == first["details"]["execution_id"]
    assert "do not propose" in again.get("advice", "").lower()
    assert _notes(out) == []  # nothing is final yet, so nothing is reported as final


# -- the same through `wg.middleware()` in LangChain's `create_agent` ---------------------


@tool("refund_order")
def refund_as_the_model_sees_it(
    order_id: str, amount_minor: int, currency: str, reason: str
) -> str:
    """Refund part or all of an order (writegate runs its registered tool, never this).

    Args:
        order_id: The order.
        amount_minor: The amount in minor units.
        currency: The order's currency.
        reason: Why.
    """
    raise AssertionError("a write behind the middleware never runs the agent's own tool")


def _middleware_agent(rt: Runtime, model: ScriptedChatModel, checkpointer: Any) -> Any:
    from langchain.agents import create_agent

    return create_agent(
        model,
        [refund_as_the_model_sees_it],
        middleware=[Writegate(rt, []).middleware()],
        checkpointer=checkpointer,
    )


@pytest.mark.parametrize("run_async", [False, True], ids=["invoke", "ainvoke"])
def test_the_middleware_reports_a_reconciled_unknown_write_once_on_the_next_turn(
    rt: Runtime, faults: FaultScript, run_async: bool
) -> None:
    order, thread = new_order(rt), new_id("th")
    faults.reset([f"{order}=timeout_after*3"])
    model = scripted([refund_call(order)], "checking", "noted", "noted again", "welcome")

    async def saver_then(turns: list[Any]) -> list[dict[str, Any]]:
        async with Writegate(rt, []).async_checkpointer() as saver:
            agent = _middleware_agent(rt, model, saver)
            return [await agent.ainvoke(turn, config(thread)) for turn in turns]

    def run(*turns: Any) -> dict[str, Any]:
        if run_async:
            return asyncio.run(saver_then(list(turns)))[-1]
        agent = _middleware_agent(rt, model, rt.checkpointer)
        return [agent.invoke(turn, config(thread)) for turn in turns][-1]

    out = run({"messages": [HumanMessage(f"refund {order}")]})
    out = run(Command(resume=confirm(only_interrupt(out).value["proposal_id"])))
    unknown = tool_content(tool_messages(out)[-1])
    assert unknown["code"] == "outcome_unknown" and refunds_at_provider(rt, order) == 1
    out = run({"messages": [HumanMessage("did it go through?")]})
    assert not _notes(out)  # not settled yet

    assert Reconciler(rt.service, PgBacklog(rt.pool), retry=NO_WAIT).drain()
    out = run({"messages": [HumanMessage("and now?")]})
    notes = _notes(out)
    assert (
        len(notes) == 1 and notes[0].additional_kwargs[MARK] == unknown["details"]["execution_id"]
    )
    assert '"status":"succeeded"' in str(notes[0].content)
    # Kept in the thread just before the model's answer, and shown to it on that call.
    assert out["messages"][-2] == notes[0] and out["messages"][-1].content == "noted again"
    assert model.calls[-1][-1] == notes[0]
    out = run({"messages": [HumanMessage("thanks")]})
    assert len(_notes(out)) == 1  # told once
    assert refunds_at_provider(rt, order) == 1
