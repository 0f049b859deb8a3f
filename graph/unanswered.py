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

A tool message that writegate did not write can answer a waiting call too: Agent Chat
UI writes "Successfully handled tool call." for every call it sees unanswered before it
sends a new message. It answers nothing. Its call's proposal is cancelled all the same,
and writegate's message takes its place, under the client's message id, so the history
keeps one answer per call and never says a waiting write was handled. Only the ledger
can tell such a message from writegate's own (any client may write anything), so the
newest calls' answers are looked up once, before the model first reads them.

The history is rewritten as a whole (`RemoveMessage(REMOVE_ALL_MESSAGES)` and the
messages in order), the way LangChain's agent repairs a history: an appended tool
message would land after the new message, where it answers nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, RemoveMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from writegate.approval.errors import ForeignCall, WritegateError
from writegate.approval.unanswered import close_client_answered, close_unanswered, closed
from writegate.approval.wire import receipt_content
from writegate.graph.identity import identity_of, thread_of
from writegate.graph.messages import tool_error, tool_result
from writegate.runtime.wiring import Runtime


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


def client_answered(
    messages: Sequence[AnyMessage], guarded: Callable[[str], bool]
) -> dict[int, list[tuple[dict[str, Any], ToolMessage]]]:
    """The newest model message's guarded calls that a tool message answers, while no
    model turn has read them yet: writegate's own answer, or one a client wrote, which
    only the ledger tells apart. Only that message's calls can still wait. No I/O."""
    for at in range(len(messages) - 1, -1, -1):
        message = messages[at]
        if isinstance(message, AIMessage) and message.tool_calls:
            break
        if isinstance(message, AIMessage):
            return {}  # the model has had its turn since: nothing new to read
    else:
        return {}
    said: dict[str, ToolMessage] = {}
    for after in messages[at + 1 :]:
        if not isinstance(after, ToolMessage):
            break
        said.setdefault(after.tool_call_id, after)
    found = [
        (dict(call), said[call["id"]])
        for call in message.tool_calls
        if call["id"] in said and guarded(call["name"])
    ]
    return {at: found} if found else {}


@dataclass
class Answers:
    """Per model message id, the tool messages for its unanswered calls (`added`); per
    id of a client's tool message, writegate's message in its place (`replaced`)."""

    added: dict[str | None, list[ToolMessage]] = field(default_factory=dict)
    replaced: dict[str, ToolMessage] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.added or self.replaced)


def with_answers(messages: Sequence[AnyMessage], answers: Answers) -> list[AnyMessage]:
    """The history with each model message's added answers (by its id) placed after the
    tool messages that already follow it, and each replaced message in its place."""
    out: list[AnyMessage] = []
    pending: list[ToolMessage] = []
    for message in messages:
        if pending and not isinstance(message, ToolMessage):
            out.extend(pending)
            pending = []
        out.append(answers.replaced.get(message.id or "", message))
        if isinstance(message, AIMessage) and message.id in answers.added:
            pending = answers.added[message.id]
    return out + pending


class Unanswered:
    """Answers the tool calls a new message left unanswered (see the module docstring)."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime

    def guarded(self, name: str) -> bool:
        return name in self.rt.registry and self.rt.registry.get(name).requires_approval

    def needed(self, messages: Sequence[AnyMessage]) -> bool:
        """Whether `answers` has anything to look up. No I/O."""
        return bool(unanswered_calls(messages) or client_answered(messages, self.guarded))

    def answers(self, messages: Sequence[AnyMessage], config: RunnableConfig) -> Answers:
        """The tool messages for unanswered calls, and writegate's in place of a client's;
        empty if none."""
        found = unanswered_calls(messages)
        claimed = client_answered(messages, self.guarded)
        answers = Answers()
        if not (found or claimed):
            return answers
        identity, thread = identity_of(config, self.rt.server_user), thread_of(config)
        for at, calls in found.items():
            asked = messages[at]
            answers.added[asked.id] = [
                self._answer(identity, thread, asked.id, call) for call in calls
            ]
        for at, said in claimed.items():
            for call, message in said:
                mine = self._instead(identity, thread, messages[at].id, call, message)
                if mine is not None:
                    answers.replaced[message.id or ""] = mine
        return answers

    def _instead(
        self,
        identity: Any,
        thread: str,
        message_id: str | None,
        call: dict[str, Any],
        said: ToolMessage,
    ) -> ToolMessage | None:
        """Writegate's message for a call a tool message answers while its proposal still
        waits (a client's, then: the proposal is cancelled); None if the write ended."""
        try:
            cancelled = close_client_answered(
                self.rt.service, identity, thread, message_id or "", call["id"]
            )
        except ForeignCall:
            raise  # someone else's thread: the run stops, and nothing is answered for them
        if cancelled is None:
            return None
        mine = tool_error(call["id"], call["name"], cancelled)
        mine.id = said.id  # in the client's message's place: one answer per call
        return mine

    def _answer(
        self, identity: Any, thread: str, message_id: str | None, call: dict[str, Any]
    ) -> ToolMessage:
        name = call["name"]
        if not self.guarded(name):
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
