"""Build the writegate state graph.

    START -> agent -(router)-> read ---------------------------------> agent ...
                             -> write [propose -> approval -> execute] --> agent
                             -> refuse (duplicate tool calls) --------> agent

Each write call travels its own `write` subgraph (fanned out with `Send`), so several
writes in one model turn get one proposal and one interrupt each, and a confirmed
write executes at once even while its siblings still wait for their answers. Every
branch is one node of the parent graph, so they all finish in the same superstep and
the model runs once, after the last of them.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import Runnable
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from writegate.graph.model import build_chat_model
from writegate.graph.nodes import Nodes
from writegate.graph.runtime import Runtime
from writegate.graph.write_branch import build_write_branch


def build_graph(
    runtime: Runtime,
    *,
    model: Runnable[Any, Any] | None = None,
    checkpointer: BaseCheckpointSaver[Any] | bool | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compile the graph. Pass `checkpointer=runtime.checkpointer` for durable threads;
    leave it None under LangGraph Server, which supplies its own."""
    model = model or build_chat_model(runtime.registry.openai_tools())
    nodes = Nodes(runtime, model)
    builder: Any = StateGraph(MessagesState)  # branch nodes take Send payloads
    builder.add_node("agent", nodes.agent)
    builder.add_node("read", nodes.read)
    builder.add_node("write", build_write_branch(runtime))
    builder.add_node("refuse", nodes.refuse)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", nodes.route, ["read", "write", "refuse", "__end__"])
    for branch in ("read", "write", "refuse"):
        builder.add_edge(branch, "agent")
    return builder.compile(checkpointer=checkpointer, name="writegate")
