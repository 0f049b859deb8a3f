"""Tool calls a new message left unanswered: answered before the model runs again.

When new input comes to a thread instead of a resume (a person types in the chat box
while an approval waits; Agent Chat UI sends exactly that), LangGraph drops the
thread's interrupted tasks. Their tool calls would stay unanswered in the history,
which OpenAI refuses (400) on this turn and on every later one, and their proposals
would wait until they expire. So before the model runs, each unanswered call gets its
tool message, placed right after the model message that made it: a waiting write is
cancelled (`approval/unanswered.py`, audited), a write that ran meanwhile reports its
receipt, and anything else says it did not run. The person's new message then goes to
the model, which proposes afresh whatever it asks for.

The history is rewritten as a whole (`RemoveMessage(REMOVE_ALL_MESSAGES)` and the
messages in order), the way LangChain's agent repairs a history: an appended tool
message would land after the new message, where it answers nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, RemoveMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from writegate.approval.errors import ForeignCall, WritegateError
from writegate.approval.unanswered import close_unanswered, closed
from writegate.graph.identity import identity_of, thread_of
from writegate.graph.messages import receipt_content, tool_error, tool_result
from writegate.graph.runtime import Runtime


def unanswered_calls(messages: Sequence[AnyMessage]) -> dict[int, list[dict[str, Any]]]:
    """Per position of a model message, its tool calls that no tool message right after
    it answers. No I/O: nearly every turn has none."""
    found: dict[int, list[dict[str, Any]]] = {}
    for at, message in enumerate(messages):
        if not isinstance(message, AIMessage) or not message.tool_calls:
            continue
        answered = set()
        for after in messages[at + 1 :]:
            if not isinstance(after, ToolMessage):
                break
            answered.add(after.tool_call_id)
        missing = [dict(call) for call in message.tool_calls if call["id"] not in answered]
        if missing:
            found[at] = missing
    return found


def with_answers(
    messages: Sequence[AnyMessage], answers: dict[str | None, list[ToolMessage]]
) -> list[AnyMessage]:
    """The history with each model message's `answers` (by its id) placed after the tool
    messages that already follow it."""
    out: list[AnyMessage] = []
    pending: list[ToolMessage] = []
    for message in messages:
        if pending and not isinstance(message, ToolMessage):
            out.extend(pending)
            pending = []
        out.append(message)
        if isinstance(message, AIMessage) and message.id in answers:
            pending = answers[message.id]
    return out + pending


class Unanswered:
    """Answers the tool calls a new message left unanswered (see the module docstring)."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime

    def answers(
        self, messages: Sequence[AnyMessage], config: RunnableConfig
    ) -> dict[str | None, list[ToolMessage]]:
        """Per model message id, the tool messages for its unanswered calls; {} if none."""
        found = unanswered_calls(messages)
        if not found:
            return {}
        identity, thread = identity_of(config, self.rt.server_user), thread_of(config)
        answers: dict[str | None, list[ToolMessage]] = {}
        for at, calls in found.items():
            asked = messages[at]
            answers[asked.id] = [self._answer(identity, thread, asked.id, call) for call in calls]
        return answers

    def _answer(
        self, identity: Any, thread: str, message_id: str | None, call: dict[str, Any]
    ) -> ToolMessage:
        name = call["name"]
        if not (name in self.rt.registry and self.rt.registry.get(name).requires_approval):
            # A read, or a tool writegate does not guard: it may have run; its answer is lost.
            return tool_error(call["id"], name, closed(None, write=False))
        try:
            receipt = close_unanswered(
                self.rt.service, identity, thread, message_id or "", call["id"]
            )
        except ForeignCall:
            raise  # someone else's thread: the run stops, and nothing is answered for them
        except WritegateError as exc:
            return tool_error(call["id"], name, exc)
        return tool_result(call["id"], name, receipt_content(receipt))

    def update(self, messages: Sequence[AnyMessage], config: RunnableConfig) -> list[Any]:
        """The messages update that answers them, for a node's output; [] if none."""
        answers = self.answers(messages, config)
        if not answers:
            return []
        return [RemoveMessage(id=REMOVE_ALL_MESSAGES), *with_answers(messages, answers)]
