"""Build the writegate state graph.

    START -> agent -(router)-> read ----------------------------> join -> agent ...
                             -> propose -> approval (+ execute) -> join
                             -> refuse (duplicate tool calls) ---> join

Each write call travels its own branch (LangGraph `Send`), so several writes in one
model turn get one proposal and one interrupt each. A confirmed write executes inside
its `approval` branch, so it never waits for the answers to its sibling writes.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import Runnable
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from graph.model import build_chat_model
from graph.nodes import Nodes
from graph.runtime import Runtime


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
    builder: Any = StateGraph(MessagesState)  # nodes take branch payloads, not the state
    builder.add_node("agent", nodes.agent)
    builder.add_node("read", nodes.read, destinations=("join",))
    builder.add_node("propose", nodes.propose, destinations=("approval", "join"))
    builder.add_node("approval", nodes.approval, destinations=("join",))
    builder.add_node("refuse", nodes.refuse, destinations=("join",))
    builder.add_node("join", nodes.join, destinations=("agent",))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", nodes.route, ["read", "propose", "refuse", "__end__"])
    return builder.compile(checkpointer=checkpointer, name="writegate")
