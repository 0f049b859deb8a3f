"""Build the writegate state graph.

    START -> agent -(router)-> read --------------------------------> agent ...
                             -> write (propose, approval, execute) --> agent
                             -> refuse (duplicate tool calls) -------> agent

Each write call runs as its own `write` task (fanned out with `Send`): one node that
proposes, asks, decides and executes (`graph/gate.py`), re-running safely from its
start on resume. Several writes in one model turn get one proposal and one interrupt
each, and a confirmed write executes as soon as its answer arrives, even while its
siblings still wait: LangGraph keeps a finished task's writes while the others of its
superstep are interrupted. All the tasks belong to one superstep, so the model runs
once, after the last of them. One node instead of a subgraph saves a write its own
checkpoints (five per write before).
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import Runnable
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from writegate.graph.gate import ToolCallGate
from writegate.graph.nodes import LIBRARY_PROMPT, Nodes
from writegate.runtime.wiring import Runtime


def build_graph(
    runtime: Runtime,
    *,
    model: Runnable[Any, Any],
    checkpointer: BaseCheckpointSaver[Any] | bool | None = None,
    system_prompt: str = LIBRARY_PROMPT,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compile the graph. Pass `checkpointer=runtime.checkpointer` for durable threads;
    leave it None under LangGraph Server, which supplies its own. `model`: the chat
    model, its tools bound or not (the agent binds them)."""
    nodes = Nodes(runtime, model, system_prompt)
    builder: Any = StateGraph(MessagesState)  # branch nodes take Send payloads
    builder.add_node("agent", nodes.agent)
    builder.add_node("read", nodes.read)
    builder.add_node("write", ToolCallGate(runtime).node)
    builder.add_node("refuse", nodes.refuse)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", nodes.route, ["read", "write", "refuse", "__end__"])
    for branch in ("read", "write", "refuse"):
        builder.add_edge(branch, "agent")
    return builder.compile(checkpointer=checkpointer, name="writegate")
