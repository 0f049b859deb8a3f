"""A chat model that replies from a script: a test's, or a notebook's, stand-in for a
real model (`writegate.testing` exports it).

``ScriptedChatModel(script=[AIMessage, ...])`` returns those replies in order, one per
call, and says so when it runs out; ``feed`` queues more. A tool call without an id gets
``call_<number of input messages>_<index>``: deterministic for a conversation and unique
within a thread, because the history only grows. Without a script it has nothing to
say: a subclass may answer instead (`_unscripted`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.tool import tool_call
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import PrivateAttr

CALL_LOG_SIZE = 100


@dataclass
class _SharedState:
    """Mutable state shared between a model and its ``bind_tools`` copies.

    Shared on purpose: a test holds the unbound model while the graph calls the
    bound copy, and both must see the same script position and call log.
    """

    cursor: int = 0
    # Bounded: a long-running server on such a model must not grow with every turn.
    calls: deque[list[BaseMessage]] = field(default_factory=lambda: deque(maxlen=CALL_LOG_SIZE))
    lock: threading.Lock = field(default_factory=threading.Lock)


class ScriptedChatModel(BaseChatModel):
    """A chat model that returns its script's replies in order."""

    script: list[AIMessage] | None = None
    """Replies to return in order; None: `_unscripted` answers."""
    tool_names: tuple[str, ...] | None = None
    """Tools bound with ``bind_tools``; None means no restriction."""

    _state: _SharedState = PrivateAttr(default_factory=_SharedState)

    @property
    def _llm_type(self) -> str:
        return "writegate-scripted"

    @property
    def calls(self) -> list[list[BaseMessage]]:
        """The message lists this model (or a bound copy) was invoked with."""
        with self._state.lock:
            return [list(c) for c in self._state.calls]

    def feed(self, replies: Sequence[AIMessage]) -> None:
        """Drop the replies already given and queue these next (a long-running caller,
        such as the bench, would otherwise carry every reply it ever scripted)."""
        with self._state.lock:
            assert self.script is not None
            del self.script[: self._state.cursor]
            self._state.cursor = 0
            self.script.extend(replies)

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        names = tuple(convert_to_openai_tool(t)["function"]["name"] for t in tools)
        return self.model_copy(update={"tool_names": names})

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        with self._state.lock:
            self._state.calls.append(list(messages))
            if self.script is not None:
                message = self._next_scripted(len(messages))
            else:
                message = self._unscripted(messages)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _next_scripted(self, n_messages: int) -> AIMessage:
        assert self.script is not None
        index = self._state.cursor
        if index >= len(self.script):
            raise RuntimeError(f"scripted model ran out of replies after {index} call(s)")
        self._state.cursor += 1
        reply = self.script[index]
        calls = [
            tool_call(name=c["name"], args=c["args"], id=c.get("id") or f"call_{n_messages}_{i}")
            for i, c in enumerate(reply.tool_calls)
        ]
        return reply.model_copy(update={"tool_calls": calls}, deep=True)

    def _unscripted(self, messages: Sequence[BaseMessage]) -> AIMessage:
        """The reply when there is no script: none here; a subclass may answer."""
        raise RuntimeError("scripted model has no script: pass script=[AIMessage, ...]")
