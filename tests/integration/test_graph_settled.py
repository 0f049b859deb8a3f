"""An unknown outcome, reconciled later, reaches the thread on its next turn — once."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.types import Command

from writegate.approval.execution import RetryPolicy
from writegate.approval.reconcile import Reconciler
from writegate.checkpoints.migrate import setup_database
from writegate.checkpoints.ops import PgBacklog
from writegate.graph.build import build_graph
from writegate.graph.runtime import Runtime
from writegate.graph.settled import MARK
from tests.integration.graph_helpers import (
    config,
    confirm,
    new_id,
    new_order,
    only_interrupt,
    refund_call,
    refunds_at_provider,
    scripted,
    tool_content,
    tool_messages,
)
from writegate.tools.faults import FaultScript
from writegate.tools.provider import SimulatedProvider

NO_WAIT = RetryPolicy(base_delay=0.0)


@pytest.fixture(scope="module")
def faults() -> FaultScript:
    return FaultScript()


@pytest.fixture(scope="module")
def rt(create_database: Callable[[], str], faults: FaultScript) -> Iterator[Runtime]:
    url = create_database()
    setup_database(url)
    runtime = Runtime.open(
        url, setup=False, retry=NO_WAIT, provider=SimulatedProvider(url, faults=faults)
    )
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
