"""The gate for one write tool call: propose, ask until a valid decision, execute.

The three steps of `graph/write_branch.py`, run in one go so they fit inside a single
node or task: the agent graph and the tool node run one gate per write call, each in
its own task, so each asks its own question. LangGraph re-runs a node
from its start on resume; every step is safe to repeat (the proposal is found again by
its tool-call id, answers already given replay in order, a second execution reports
the first receipt), so the gate can simply run again from the top.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig

from writegate.graph.runtime import Runtime
from writegate.graph.write_branch import WriteBranch


class WriteGate:
    def __init__(self, runtime: Runtime) -> None:
        self.branch = WriteBranch(runtime)

    def run(
        self, call: dict[str, Any], config: RunnableConfig, message_id: str | None = None
    ) -> ToolMessage:
        """The call's ToolMessage: a receipt, or why nothing ran. `message_id`: the
        model message that made the call (with the call's id, the key of the call)."""
        state: dict[str, Any] = {"call": call, "message_id": message_id or ""}
        for step in (self.branch.propose, self.branch.approval):
            update = step(state, config)  # type: ignore[arg-type]
            if update.get("messages"):
                message: ToolMessage = update["messages"][-1]
                return message
            state.update(update)
        raise AssertionError("the approval step always answers with a message")

    def node(self, task: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        """A graph node for one call sent to it (`Send(node, {"call": call,
        "message_id": id})`)."""
        return {"messages": [self.run(task["call"], config, task.get("message_id"))]}
