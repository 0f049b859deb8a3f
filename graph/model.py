"""The OpenAI chat model the environment configures (`writegate.openai_chat_model`).

- ``OPENAI_API_KEY`` set: ``ChatOpenAI`` with model ``WRITEGATE_MODEL`` (default
  gpt-4o-mini), optionally at ``OPENAI_BASE_URL``.
- only ``OPENAI_BASE_URL`` set: the same, against a local OpenAI-compatible server
  (vLLM, llama.cpp, Ollama) with a placeholder key, since those ignore it.
- neither: none; whoever builds the agent chooses its model (the demo its scripted one,
  `writegate serve` on a database of no application `NoChatModel`, which says so).

Tools are bound with strict JSON schemas, so a real model can only produce
arguments that match the schema; the specs are checked here first because a
non-strict schema would be silently accepted by most local servers.
The OpenAI client is imported only when such a model is built, so importing this module
(to describe the model, or to learn that none is configured) stays light.
The returned runnable streams token by token under ``.stream()`` or LangGraph's
``stream_mode="messages"``, and answers in one piece under ``.invoke()``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableBinding
from pydantic import SecretStr

from writegate.graph.scripted import ScriptedChatModel

DEFAULT_MODEL = "gpt-4o-mini"
PLACEHOLDER_API_KEY = "writegate-no-key"  # local servers require a value but ignore it
REQUEST_TIMEOUT_S = 120.0  # local models can be slow; still bounded so a hung server fails

ChatRunnable = Runnable[LanguageModelInput, AIMessage]


@dataclass(frozen=True)
class ModelConfig:
    """The resolved choice of model; ``api_key`` is kept out of ``repr``."""

    kind: Literal["openai"]
    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)


def resolve_model_config(env: Mapping[str, str] | None = None) -> ModelConfig | None:
    """Read the model choice from ``env`` (default: ``os.environ``); None: no model."""
    env = os.environ if env is None else env
    api_key = env.get("OPENAI_API_KEY") or None
    base_url = env.get("OPENAI_BASE_URL") or None
    if api_key is None and base_url is None:
        return None
    return ModelConfig(
        kind="openai",
        model=env.get("WRITEGATE_MODEL") or DEFAULT_MODEL,
        base_url=base_url,
        api_key=api_key or PLACEHOLDER_API_KEY,
    )


def describe_openai_model(env: Mapping[str, str] | None = None) -> str | None:
    """One line saying which OpenAI model ``env`` configures, without revealing the key;
    None when it configures none."""
    config = resolve_model_config(env)
    if config is None:
        return None
    where = config.base_url or "the OpenAI API"
    keyless = " (no API key, placeholder sent)" if config.api_key == PLACEHOLDER_API_KEY else ""
    return f"{config.model} at {where}{keyless}"


def _check_schema(schema: Any, where: str) -> None:
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            raise ValueError(f"{where}: strict schemas need additionalProperties: false")
        missing = sorted(set(properties) - set(schema.get("required", [])))
        if missing:
            raise ValueError(f"{where}: strict schemas must require every field, not {missing}")
        for name, sub in properties.items():
            _check_schema(sub, f"{where}.{name}")
    if "items" in schema:
        _check_schema(schema["items"], f"{where}[]")
    for key in ("anyOf", "oneOf", "allOf"):
        for i, sub in enumerate(schema.get(key, [])):
            _check_schema(sub, f"{where}.{key}[{i}]")
    for key in ("$defs", "definitions"):
        for name, sub in schema.get(key, {}).items():
            _check_schema(sub, f"{where}.{key}.{name}")


def check_strict_tool_specs(tools: Sequence[Mapping[str, Any]]) -> None:
    """Raise ValueError unless every spec is an OpenAI function spec with a strict schema."""
    for spec in tools:
        function = spec.get("function")
        if spec.get("type") != "function" or not isinstance(function, Mapping):
            raise ValueError(f"not an OpenAI function spec: {spec!r}")
        name = function.get("name")
        if not name:
            raise ValueError(f"function spec without a name: {spec!r}")
        if function.get("strict") is not True:
            raise ValueError(f"{name}: function spec must set strict: true")
        parameters = function.get("parameters")
        if not isinstance(parameters, Mapping) or parameters.get("type") != "object":
            raise ValueError(f"{name}: parameters must be an object schema")
        _check_schema(dict(parameters), name)


def openai_chat_model(
    tools: Sequence[Mapping[str, Any]], env: Mapping[str, str] | None = None
) -> ChatRunnable | None:
    """The OpenAI chat model ``env`` (default: ``os.environ``) configures, with ``tools``
    (OpenAI function specs, strict) bound; None when it configures none."""
    check_strict_tool_specs(tools)
    specs = [dict(spec) for spec in tools]
    config = resolve_model_config(env)
    if config is None:
        return None
    assert config.api_key is not None
    from langchain_openai import ChatOpenAI  # the client and its SDK load only here

    model = ChatOpenAI(
        model=config.model,
        api_key=SecretStr(config.api_key),
        base_url=config.base_url,
        temperature=0,
        timeout=REQUEST_TIMEOUT_S,
        # Compatible servers implement Chat Completions only; with the real API
        # leave the choice to langchain-openai, which knows which models need Responses.
        use_responses_api=False if config.base_url else None,
    )
    if not specs:
        # The API rejects parallel_tool_calls when no tools are sent.
        return model
    return model.bind_tools(specs, strict=True, parallel_tool_calls=True)


NO_MODEL = "placeholder model: no chat model is configured (no OPENAI_API_KEY set)"


class NoChatModel(ScriptedChatModel):
    """The agent's model where none is configured and no application brings its own:
    every answer says so, rather than pretending to be one."""

    def _unscripted(self, messages: Sequence[BaseMessage]) -> AIMessage:
        return AIMessage(
            content="No chat model is configured: set OPENAI_API_KEY, or OPENAI_BASE_URL "
            "for an OpenAI-compatible server, and start again."
        )


def env_chat_model(
    tools: Sequence[Mapping[str, Any]], env: Mapping[str, str] | None = None
) -> ChatRunnable:
    """The library's agent model when the one who builds it brings none: the configured
    OpenAI model, else `NoChatModel`."""
    model = openai_chat_model(tools, env)
    return NoChatModel() if model is None else model


def streams_tokens(model: Any) -> bool:
    """Whether `model` may stream its text token by token. writegate's scripted models
    (`ScriptedChatModel` and what derives from it: `NoChatModel`, the demo's model)
    answer in one piece, as does a chat model whose streaming is disabled (a model bound
    to tools under `disable_streaming="tool_calling"` too); LangGraph's `messages` mode
    would only cost their runs its callbacks on every step. Any other model is taken to
    stream."""
    while isinstance(model, RunnableBinding):
        model = model.bound
    if isinstance(model, ScriptedChatModel):
        return False
    return not (isinstance(model, BaseChatModel) and model.disable_streaming)


def describe_env_model(env: Mapping[str, str] | None = None) -> str:
    """One line naming `env_chat_model`'s choice."""
    return describe_openai_model(env) or NO_MODEL
