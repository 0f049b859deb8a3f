"""The payloads LangChain's front ends send, rebuilt rule for rule (no code of theirs).

- Agent Chat UI at fdc87e6, `src/lib/ensure-tool-responses.ts`: before a new message,
  a ToolMessage of its own for every call of a model message that no tool message
  follows: id `do-not-render-<uuid>`, the call's name and id, a fixed content.
- Its "Mark as Resolved": `Command(goto="__end__")`; its stream hook adds the thread
  head's `checkpoint` to every run.
- Agent Inbox at f38301b: a `HumanResponse` list; "Ignore" is a state update.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

CLIENT_CONTENT = "Successfully handled tool call."
DO_NOT_RENDER = "do-not-render-"


def ensure_tool_responses(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """`ensureToolCallsHaveResponses` over the thread's messages as JSON (`type` keys)."""
    made: list[dict[str, Any]] = []
    for at, message in enumerate(messages):
        if message.get("type") != "ai" or message.get("tool_calls") == []:
            continue
        following = messages[at + 1] if at + 1 < len(messages) else None
        if following is not None and following.get("type") == "tool":
            continue
        made += [
            {
                "type": "tool",
                "tool_call_id": call.get("id") or "",
                "id": f"{DO_NOT_RENDER}{uuid.uuid4()}",
                "name": call["name"],
                "content": CLIENT_CONTENT,
            }
            for call in message.get("tool_calls") or []
        ]
    return made


def chat_input(messages: Sequence[dict[str, Any]], text: str) -> dict[str, Any]:
    """The run input of Agent Chat UI's composer: its tool messages, then the person's."""
    human = {"id": str(uuid.uuid4()), "type": "human", "content": [{"type": "text", "text": text}]}
    return {"messages": [*ensure_tool_responses(messages), human]}
