"""Where nobody brings a chat model and none is configured, the library's agent says so;
it never follows the demo's rules. A scripted model without a script has nothing to
say."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage

from writegate.graph.model import NO_MODEL, NoChatModel, describe_env_model, env_chat_model
from writegate.testing import ScriptedChatModel

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "list_orders",
            "description": "List orders.",
            "strict": True,
            "parameters": {"type": "object", "properties": {}, "required": [],
                           "additionalProperties": False},
        },
    }
]  # fmt: skip


def test_without_a_configured_model_the_agent_answers_that_none_is() -> None:
    model = env_chat_model(TOOLS, env={})
    assert isinstance(model, NoChatModel)
    reply = model.invoke([HumanMessage("list orders")])
    assert reply.tool_calls == []
    assert "No chat model is configured: set OPENAI_API_KEY" in str(reply.content)
    assert describe_env_model({}) == NO_MODEL


def test_a_scripted_model_without_a_script_says_it_has_none() -> None:
    with pytest.raises(RuntimeError, match="has no script"):
        ScriptedChatModel().invoke([HumanMessage("list orders")])
