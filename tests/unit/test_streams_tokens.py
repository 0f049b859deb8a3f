"""Which chat models can stream their text token by token (`graph.model.streams_tokens`):
the service asks LangGraph for a token stream only from those."""

from __future__ import annotations

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda

from writegate.demo.model import demo_chat_model
from writegate.graph.model import NoChatModel, openai_chat_model, streams_tokens
from writegate.graph.scripted import ScriptedChatModel

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "noop",
            "description": "does nothing",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {},
                "required": [],
                "additionalProperties": False,
            },
        },
    }
]


def test_a_model_that_streams_does_bound_to_its_tools_or_not() -> None:
    openai = openai_chat_model(TOOLS, env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert openai is not None and streams_tokens(openai)  # bound with the tools, strictly
    fake = GenericFakeChatModel(messages=iter([AIMessage("hi")]))
    assert streams_tokens(fake) and streams_tokens(fake.bind(stop=["x"]))


def test_a_model_that_answers_in_one_piece_does_not() -> None:
    assert not streams_tokens(ScriptedChatModel(script=[AIMessage("hi")]))
    assert not streams_tokens(NoChatModel())
    assert not streams_tokens(demo_chat_model(TOOLS, env={}))  # the offline demo model
    fake = GenericFakeChatModel(messages=iter([]), disable_streaming=True)
    assert not streams_tokens(fake)


def test_what_is_not_a_chat_model_is_taken_to_stream() -> None:
    assert streams_tokens(RunnableLambda(lambda x: x))
