"""The demo agent's chat model: OpenAI when the environment configures one
(`writegate.openai_chat_model`), else the offline scripted demo model
(`demo/scripted.py`), loaded only then."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage
from langchain_core.runnables import Runnable

from writegate import describe_openai_model, openai_chat_model

OFFLINE = "scripted demo model (no OPENAI_API_KEY set)"


def demo_chat_model(
    tools: Sequence[Mapping[str, Any]], env: Mapping[str, str] | None = None
) -> Runnable[LanguageModelInput, AIMessage]:
    """OpenAI with `tools` bound when `env` (default: the environment) configures it,
    else the scripted demo model with them bound."""
    model = openai_chat_model(tools, env)
    if model is not None:
        return model
    from writegate.demo.scripted import DemoChatModel

    specs = [dict(spec) for spec in tools]
    return DemoChatModel().bind_tools(specs) if specs else DemoChatModel()


def describe_demo_model(env: Mapping[str, str] | None = None) -> str:
    """One line saying which model the demo uses, without revealing the key."""
    return describe_openai_model(env) or OFFLINE
