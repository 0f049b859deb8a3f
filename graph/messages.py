"""Tool results as LangChain `ToolMessage`s: the wire format (`approval/wire.py`) in the
message type the model reads, and the receipts read back from a thread's messages."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import ToolMessage

from writegate.approval.errors import WritegateError
from writegate.approval.wire import dumps, error_content


def tool_result(call_id: str, name: str, content: dict[str, Any]) -> ToolMessage:
    failed = "code" in content and "status" not in content
    return ToolMessage(
        content=dumps(content),
        tool_call_id=call_id,
        name=name,
        status="error" if failed else "success",
    )


def tool_error(call_id: str, name: str, exc: WritegateError) -> ToolMessage:
    return tool_result(call_id, name, error_content(exc))


def executed_values(messages: Any) -> dict[str, dict[str, Any]]:
    """Per tool call id, the result its receipt reports: what ran, after any edit."""
    found: dict[str, dict[str, Any]] = {}
    for message in messages:
        if not isinstance(message, ToolMessage):
            continue
        try:
            body = json.loads(str(message.content))
        except json.JSONDecodeError:
            continue
        receipt = isinstance(body, dict) and {"execution_id", "request_key"} <= body.keys()
        if receipt and isinstance(body.get("result"), dict):
            found[message.tool_call_id] = dict(body["result"])
    return found
