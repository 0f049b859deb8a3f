""" "Mark as Resolved": what `Command(goto="__end__")` means for a thread awaiting approval.

Agent Chat UI's button sends `Command(goto="__end__")` and no answer. `__end__` names no
node, so LangGraph would only re-run the waiting approval nodes, which ask the same
questions again while the UI says the thread is resolved. writegate defines it: each
pending approval question of the thread is answered with `RESOLVE`, which cancels its
proposal (outcome `cancelled`, audited); the run then ends without a model turn, and
the model reads the cancellations with the next message of the thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.messages import AnyMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, StateSnapshot

from writegate.graph.messages import INTERRUPT_KIND

# The answer each pending question gets; the branch marks its ToolMessage with RESOLVED.
RESOLVE = {"type": "writegate.resolve"}
RESOLVED = {"resolved": True}


def _resolves(value: Any) -> bool:
    if not isinstance(value, Command) or value.resume is not None or not value.goto:
        return False
    goto = value.goto if isinstance(value.goto, (list, tuple)) else [value.goto]
    return all(target == END for target in goto)


def _answered(command: Command, state: StateSnapshot) -> Command:
    """The command with every pending approval question answered by RESOLVE."""
    answers = {
        pending.id: RESOLVE
        for pending in state.interrupts
        if isinstance(pending.value, dict) and pending.value.get("type") == INTERRUPT_KIND
    }
    if not answers:
        return command  # nothing waits: `__end__` changes nothing
    return Command(update=command.update, resume=answers)


def ends_turn(messages: Sequence[AnyMessage]) -> bool:
    """Whether the newest tool results include a question the person marked resolved."""
    for message in reversed(messages):
        if not isinstance(message, ToolMessage):
            return False
        if message.artifact == RESOLVED:
            return True
    return False


class WritegateGraph(CompiledStateGraph[Any, Any, Any, Any]):
    """The compiled graph; it reads "Mark as Resolved" before a run starts.

    Every way of running a graph (invoke, events, the server) goes through `stream` or
    `astream`, so these two are the place to read the command.
    """

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        if _resolves(input) and config is not None:
            input = _answered(input, self.get_state(config))
        yield from super().stream(input, config, **kwargs)

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        if _resolves(input) and config is not None:
            input = _answered(input, await self.aget_state(config))
        async for chunk in super().astream(input, config, **kwargs):
            yield chunk
