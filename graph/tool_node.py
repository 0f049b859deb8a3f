"""`wg.tool_node()`: a drop-in for LangGraph's `ToolNode` that puts writes behind the gate.

Given a messages state whose last message is the model's turn, it fans each tool call
out to its own task (`Send`): reads run at once and are audited; each write goes
through its own gate (propose -> interrupt -> execute), so several writes in one turn
ask one question each, all pending at once, and a confirmed one runs without waiting
for its siblings. Every call's answer comes back as a ToolMessage whose content is JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from writegate.graph.gate import ToolCallGate
from writegate.graph.identity import identity_of
from writegate.graph.nodes import CallNodes
from writegate.graph.settled import awaiting_news, settled_updates
from writegate.graph.unanswered import Unanswered
from writegate.runtime.wiring import Runtime


def build_tool_node(
    runtime: Runtime, name: str = "tools"
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compiled without a checkpointer: as a node it shares its parent graph's."""
    calls, gate = CallNodes(runtime), ToolCallGate(runtime)
    builder: Any = StateGraph(MessagesState)  # the call nodes take Send payloads
    builder.add_node("read", calls.read)
    builder.add_node("write", gate.node)
    builder.add_node("refuse", calls.refuse)
    builder.add_conditional_edges(START, calls.route, ["read", "write", "refuse", END])
    for branch in ("read", "write", "refuse"):
        builder.add_edge(branch, END)
    return builder.compile(name=name)


def build_before_model(runtime: Runtime) -> Callable[[dict[str, Any], RunnableConfig], Any]:
    """A node for the start of each turn of a hand-built graph, ahead of the model: it
    checks who acts, answers the tool calls a new message left unanswered (see
    graph/unanswered.py) and tells the model once about writes reconciled since."""
    unanswered = Unanswered(runtime)

    def before_model(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        # No identity, or one the run may not claim: the run fails before the model runs.
        identity = identity_of(config, runtime.server_user)
        answered = unanswered.update(state["messages"], config)
        history = answered[1:] or state["messages"]
        news = settled_updates(runtime.store, identity, awaiting_news(history))
        return {"messages": [*answered, *news]}

    return before_model
